//! How numbers are shown: bytes, and the one line of figures that ends `run`.

use std::time::Duration;

use runtime::generate::GenerationStats;

/// Bytes in decimal units (B, kB, MB, GB), three significant digits or so.
pub fn bytes(n: u64) -> String {
    let n = n as f64;
    if n < 1e3 {
        format!("{n:.0} B")
    } else if n < 1e6 {
        format!("{:.1} kB", n / 1e3)
    } else if n < 1e9 {
        format!("{:.1} MB", n / 1e6)
    } else {
        format!("{:.2} GB", n / 1e9)
    }
}

/// The figures of one generation, on one line:
/// `cold start 9.8 s | prompt 12 tokens | prefill 345.6 tok/s | decode 78.9 tok/s (99
/// tokens) | peak 1.23 GB | gemma4-e4b-generated | fast path 99/101 forwards`, the cold
/// start (the warm-up's time) when there was one.
pub fn line(stats: &GenerationStats, cold_start: Option<Duration>) -> String {
    let forwards = stats.prefill_forwards + stats.decode_steps;
    let cold = cold_start.map_or(String::new(), |d| {
        format!("cold start {:.1} s | ", d.as_secs_f64())
    });
    format!(
        "{cold}prompt {} tokens | prefill {:.1} tok/s | decode {:.1} tok/s ({} tokens) | peak {} | {} | fast path {}/{} forwards",
        stats.prompt_tokens,
        stats.prefill_tok_s(),
        stats.decode_tok_s(),
        stats.generated_tokens,
        bytes(stats.peak_memory as u64),
        stats.implementation,
        stats.fast_path_calls,
        forwards,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_use_decimal_units() {
        assert_eq!(bytes(999), "999 B");
        assert_eq!(bytes(1_500), "1.5 kB");
        assert_eq!(bytes(2_340_000), "2.3 MB");
        assert_eq!(bytes(5_120_000_000), "5.12 GB");
    }
}
