//! `--pipeline`: how the decode loop overlaps building a step with evaluating the last.

use runtime::generate::Pipeline;

/// The decode pipeline as the command line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PipelineArg {
    /// `threaded` on the CPU, `ahead` on a GPU (BENCHMARKS.md, seventh run: on the H200
    /// the second thread gained nothing and sometimes lost).
    Auto,
    /// Build, evaluate and read each step in turn.
    Off,
    /// Queue step t+1 before reading token t, on one thread (mlx-lm's loop).
    Ahead,
    /// As `ahead`, with a second thread submitting steps while the first builds.
    Threaded,
}

impl PipelineArg {
    /// The runtime's choice. `Threaded` makes the calling thread's default stream the
    /// shared one first, so call this before the model is loaded.
    pub fn prepare(self) -> anyhow::Result<Pipeline> {
        let pipeline = self.runtime();
        if pipeline == Pipeline::Threaded {
            runtime::stream::share_default()?;
        }
        Ok(pipeline)
    }

    /// The runtime's choice, for a thread whose default stream is already shared when
    /// it is `Threaded`.
    pub fn runtime(self) -> Pipeline {
        match self {
            PipelineArg::Auto if runtime::backend::cpu_default() => Pipeline::Threaded,
            PipelineArg::Auto => Pipeline::Ahead,
            PipelineArg::Off => Pipeline::Off,
            PipelineArg::Ahead => Pipeline::Ahead,
            PipelineArg::Threaded => Pipeline::Threaded,
        }
    }
}
