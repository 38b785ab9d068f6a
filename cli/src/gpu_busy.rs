//! The GPU's busy fraction beside `mlx-aot bench`: `nvidia-smi` sampling
//! `utilization.gpu` (the share of the last sample period in which a kernel ran) in the
//! background, each sample stamped with the wall clock, and the samples that fall inside
//! a column's decode windows averaged per column. Where `nvidia-smi` is missing or fails
//! (the CPU, Metal) there are no samples and the columns report none.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds between samples.
const PERIOD_MS: u32 = 100;

/// Seconds at the start of a decode window whose samples are left out: a sample
/// averages the period before it, which there still holds the prefill.
const LEAD_S: f64 = 0.2;

/// Seconds since the Unix epoch: the clock the bench's windows, the samples and the
/// mlx-lm script (`time.time()`) share.
pub fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A wall-clock interval `[start, end]` in seconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Window {
    /// Start.
    pub start: f64,
    /// End.
    pub end: f64,
}

/// One `utilization.gpu` reading (percent) and when it arrived.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the epoch.
    pub at: f64,
    /// Percent of the period the GPU ran a kernel.
    pub busy_pct: f64,
}

/// The mean of the samples inside some windows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Busy {
    /// Mean percent.
    pub mean_pct: f64,
    /// Samples averaged.
    pub samples: usize,
}

/// A running `nvidia-smi` and the samples it has printed so far.
pub struct Sampler {
    child: Child,
    reader: JoinHandle<()>,
    samples: Arc<Mutex<Vec<Sample>>>,
}

impl Sampler {
    /// Starts sampling; `None` where `nvidia-smi` cannot be started.
    pub fn start() -> Option<Sampler> {
        let mut child = Command::new("nvidia-smi")
            .args([
                "--query-gpu=utilization.gpu",
                "--format=csv,noheader,nounits",
                "-lms",
                &PERIOD_MS.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let stdout = child.stdout.take()?;
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&samples);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(busy_pct) = parse_sample(&line)
                    && let Ok(mut v) = sink.lock()
                {
                    v.push(Sample {
                        at: now_s(),
                        busy_pct,
                    });
                }
            }
        });
        Some(Sampler {
            child,
            reader,
            samples,
        })
    }

    /// Stops `nvidia-smi` and returns every sample it printed.
    pub fn stop(mut self) -> Vec<Sample> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.reader.join();
        self.samples.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// The percentage in one line of `nvidia-smi --format=csv,noheader,nounits` for one
/// GPU (the first GPU's where a line lists several); `None` for anything else.
pub fn parse_sample(line: &str) -> Option<f64> {
    let first = line.split(',').next()?.trim().trim_end_matches('%').trim();
    let pct: f64 = first.parse().ok()?;
    (0.0..=100.0).contains(&pct).then_some(pct)
}

/// The mean of the `samples` inside `windows` (each window's first [`LEAD_S`] left
/// out); `None` when none falls inside.
pub fn busy_in(samples: &[Sample], windows: &[Window]) -> Option<Busy> {
    let inside: Vec<f64> = samples
        .iter()
        .filter(|s| {
            windows
                .iter()
                .any(|w| s.at > w.start + LEAD_S && s.at <= w.end)
        })
        .map(|s| s.busy_pct)
        .collect();
    if inside.is_empty() {
        return None;
    }
    Some(Busy {
        mean_pct: inside.iter().sum::<f64>() / inside.len() as f64,
        samples: inside.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_line_gives_its_percentage_and_anything_else_none() {
        assert_eq!(parse_sample("87"), Some(87.0));
        assert_eq!(parse_sample(" 0 \n"), Some(0.0));
        assert_eq!(parse_sample("42 %"), Some(42.0));
        assert_eq!(parse_sample("55, 3"), Some(55.0));
        assert_eq!(parse_sample("utilization.gpu [%]"), None);
        assert_eq!(parse_sample("[N/A]"), None);
        assert_eq!(parse_sample("140"), None);
        assert_eq!(parse_sample(""), None);
    }

    #[test]
    fn only_samples_inside_a_window_past_its_lead_count() {
        let s = |at, busy_pct| Sample { at, busy_pct };
        let samples = [
            s(10.0, 5.0),  // before
            s(10.1, 99.0), // inside the lead of the first window
            s(10.5, 80.0),
            s(11.0, 60.0), // at the end: counts
            s(12.0, 1.0),  // between windows
            s(20.6, 70.0),
            s(30.0, 0.0), // after
        ];
        let windows = [
            Window {
                start: 10.0,
                end: 11.0,
            },
            Window {
                start: 20.0,
                end: 21.0,
            },
        ];
        let busy = busy_in(&samples, &windows).unwrap();
        assert_eq!(busy.samples, 3);
        assert!((busy.mean_pct - 70.0).abs() < 1e-9, "{busy:?}");
        assert_eq!(busy_in(&samples, &[]), None);
        assert_eq!(
            busy_in(
                &samples,
                &[Window {
                    start: 40.0,
                    end: 50.0
                }]
            ),
            None
        );
    }
}
