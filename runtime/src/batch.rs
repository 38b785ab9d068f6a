//! Continuous batching: requests of different lengths decoding as one batch. A request
//! is prefilled alone, then joins the batch's caches left-padded
//! ([`crate::cache::ragged`]); each step runs one single-token forward over every row,
//! each row sampled with its own sampler and step index, the step after the current
//! tokens queued before they are read (as [`crate::generate::Pipeline::Ahead`]); rows
//! that end leave at the next step boundary. Only for models whose caches all grow.
//!
//! A row's tokens equal its tokens alone when the batched forward rounds as the
//! single-row one does; kernels for several rows may round differently (BENCHMARKS.md
//! and README.md report what was measured).

use mlx_rs::Array;
use mlx_rs::ops::indexing::TryIndexOp;

use crate::cache::AnyCache;
use crate::cache::ragged::{batchable, join, keep_rows};
use crate::error::{Error, Result};
use crate::generate::GenerateOptions;
use crate::kv_layout::KvLayout;
use crate::kv_policy;
use crate::model::LanguageModel;
use crate::sampling::Sampler;
use crate::sequence::{Advance, Sequence};

/// One row of a batch.
struct Row {
    sampler: Sampler,
    max_tokens: usize,
    stop_tokens: Vec<u32>,
    generated: usize,
    /// Decode steps built for this row (its sampler's step index).
    steps: u64,
    /// The sampled token not yet read, `[1]` uint32.
    current: Array,
    /// The step after `current`, queued.
    next: Option<Array>,
}

/// Requests decoding together.
pub struct Batch {
    caches: Vec<AnyCache>,
    rows: Vec<Row>,
    kv_layout: KvLayout,
}

impl Batch {
    /// An empty batch whose caches follow `kv_layout`.
    pub fn new(kv_layout: KvLayout) -> Self {
        Batch {
            caches: Vec::new(),
            rows: Vec::new(),
            kv_layout,
        }
    }

    /// Rows decoding.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row decodes.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Prefills `prompt` alone (as [`crate::sequence::Sequence::prefill`]), samples its
    /// first token and adds it as the last row. `opts` gives its limits and sampler; its
    /// kv layout must be the batch's.
    pub fn join(
        &mut self,
        model: &dyn LanguageModel,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<()> {
        let seq = crate::sequence::Sequence::prefill(model, prompt, opts)?;
        self.join_prefilled(seq, opts)
    }

    /// Adds a sequence just prefilled (no step decoded yet) as the last row; `opts` are
    /// the options it was prefilled with.
    pub fn join_prefilled(&mut self, seq: Sequence, opts: &GenerateOptions) -> Result<()> {
        let (mut caches, current) = seq.into_parts();
        // The prefill left its caches as the next step would see them.
        kv_policy::apply(&mut caches, &self.kv_layout)?;
        if !batchable(&caches) {
            let kind = caches
                .iter()
                .find(|c| !c.is_batchable())
                .map_or_else(|| "these".to_owned(), |c| c.signature().to_string());
            return Err(Error::Unsupported(format!(
                "this model's caches cannot hold rows of different lengths ({kind} caches)"
            )));
        }
        self.caches = if self.rows.is_empty() {
            caches
        } else {
            join(&[&self.caches, &caches])?
        };
        self.rows.push(Row {
            sampler: opts.sampler,
            max_tokens: opts.max_tokens,
            stop_tokens: opts.stop_tokens.clone(),
            generated: 0,
            steps: 0,
            current,
            next: None,
        });
        Ok(())
    }

    /// Drops the rows `leave` (indices in the batch's current order).
    pub fn remove(&mut self, leave: &[usize]) -> Result<()> {
        let keep: Vec<usize> = (0..self.rows.len())
            .filter(|r| !leave.contains(r))
            .collect();
        if keep.len() == self.rows.len() {
            return Ok(());
        }
        if keep.is_empty() {
            self.rows.clear();
            self.caches.clear();
            return Ok(());
        }
        self.caches = keep_rows(&self.caches, &keep)?;
        let mut i = 0;
        self.rows.retain(|_| {
            let k = keep.contains(&i);
            i += 1;
            k
        });
        Ok(())
    }

    /// One token for every row: the next step queued (for the rows that go on), then
    /// every current token read. Returns each row's advance, in row order; rows that
    /// ended are gone afterwards.
    pub fn step(&mut self, model: &dyn LanguageModel) -> Result<Vec<Advance>> {
        if self.rows.is_empty() {
            return Ok(Vec::new());
        }
        // Every row goes into the next forward (one that then ends wastes its part).
        let wanted = self.rows.iter().any(|r| r.generated + 1 < r.max_tokens);
        if wanted {
            let currents: Vec<&Array> = self.rows.iter().map(|r| &r.current).collect();
            let tokens = mlx_rs::ops::concatenate(&currents, 0)?.reshape(&[-1, 1])?;
            kv_policy::apply(&mut self.caches, &self.kv_layout)?;
            let logits = model.forward(&tokens, &mut self.caches)?;
            let mut queued = Vec::with_capacity(self.rows.len());
            for (b, row) in self.rows.iter_mut().enumerate() {
                row.steps += 1;
                let b = b as i32;
                let next = row
                    .sampler
                    .sample(&logits.try_index((b..b + 1, -1, ..))?, row.steps)?;
                queued.push(next.clone());
                row.next = Some(next);
            }
            mlx_rs::transforms::async_eval(&queued)?;
        }
        let mut advances = Vec::with_capacity(self.rows.len());
        let mut ended = Vec::new();
        for (i, row) in self.rows.iter_mut().enumerate() {
            let token = crate::generate::read_token(&row.current)?;
            let advance = Advance::of(token, &row.stop_tokens, &mut row.generated, row.max_tokens);
            match (advance, row.next.take()) {
                (Advance::Token(_), Some(next)) => row.current = next,
                (Advance::Token(_), None) => {
                    return Err(Error::Request("a batch row without its next step".into()));
                }
                _ => ended.push(i),
            }
            advances.push(advance);
        }
        self.remove(&ended)?;
        Ok(advances)
    }
}
