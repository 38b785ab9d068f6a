//! One request's generation as a scheduler drives it: prefill once, then one decode step
//! at a time, with the step after the current token queued before that token is read
//! (as [`crate::generate::Pipeline::Ahead`] does). A server keeps several sequences and
//! evaluates their queued steps together; each sequence still runs the graphs a
//! [`crate::generate::generate`] of its prompt alone would, so its tokens are the same.

use mlx_rs::Array;

use crate::cache::AnyCache;
use crate::error::{Error, Result};
use crate::generate::{
    GenerateOptions, StopReason, admit, check_prompt, last, prefill_part, read_token,
};
use crate::kv_policy;
use crate::model::LanguageModel;

/// What reading a sequence's current token gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// A generated token; the sequence goes on.
    Token(u32),
    /// A generated token, the last one (`max_tokens` reached).
    Last(u32),
    /// A stop token: nothing is emitted and the sequence has ended.
    Stopped,
}

impl Advance {
    /// What reading `token` means for a request that has emitted `generated` tokens of
    /// at most `max_tokens` and ends at `stop_tokens`; counts it when it is emitted.
    pub(crate) fn of(
        token: u32,
        stop_tokens: &[u32],
        generated: &mut usize,
        max_tokens: usize,
    ) -> Advance {
        if stop_tokens.contains(&token) {
            return Advance::Stopped;
        }
        *generated += 1;
        if *generated >= max_tokens {
            Advance::Last(token)
        } else {
            Advance::Token(token)
        }
    }
}

/// A request's prefill, one forward at a time ([`Prefilling::step`]), so that a scheduler
/// can run other requests' decode steps between its chunks: a long prompt then delays
/// the running streams by one chunk's forward a step, not by its whole prefill. Its
/// forwards are those of [`Sequence::prefill`], so the sequence it ends in is the same.
pub struct Prefilling {
    caches: Vec<AnyCache>,
    prompt: Vec<u32>,
    /// Prompt tokens in the caches so far.
    done: usize,
    opts: GenerateOptions,
}

impl Prefilling {
    /// Checks `prompt` and `opts` (admission by `opts.memory_limit` included) and makes
    /// the new float caches (the kv policy quantizes them as configured); runs nothing.
    pub fn start(
        model: &dyn LanguageModel,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<Self> {
        check_prompt(model, prompt)?;
        if opts.max_tokens == 0 {
            return Err(Error::Request("max_tokens must be at least 1".into()));
        }
        admit(model, prompt, opts)?;
        Ok(Prefilling {
            caches: model.loaded().float_caches(1),
            prompt: prompt.to_vec(),
            done: 0,
            opts: opts.clone(),
        })
    }

    /// Runs the next forward of the prefill (evaluated); the sequence, its first token
    /// sampled, once the whole prompt is in.
    pub fn step(&mut self, model: &dyn LanguageModel) -> Result<Option<Sequence>> {
        let Some(current) = prefill_part(
            model,
            &mut self.caches,
            &self.prompt,
            &mut self.done,
            &self.opts,
        )?
        else {
            return Ok(None);
        };
        Ok(Some(Sequence {
            caches: std::mem::take(&mut self.caches),
            opts: self.opts.clone(),
            steps: 0,
            generated: 0,
            current,
            next: None,
            finished: None,
        }))
    }

    /// Prompt tokens in the caches so far, of how many.
    pub fn progress(&self) -> (usize, usize) {
        (self.done, self.prompt.len())
    }
}

/// A request being generated: its caches and where its decode stands.
pub struct Sequence {
    caches: Vec<AnyCache>,
    opts: GenerateOptions,
    /// Decode steps built so far (the sampler's step index).
    steps: u64,
    /// Tokens emitted so far.
    generated: usize,
    /// The sampled token not yet read (evaluated, or queued).
    current: Array,
    /// The step after `current`, queued by [`Sequence::queue_next`].
    next: Option<Array>,
    finished: Option<StopReason>,
}

impl Sequence {
    /// Prefills `prompt` (batch 1) as [`crate::generate::generate`] does, on new float
    /// caches (the kv policy quantizes them as configured), and samples the first token
    /// (evaluated). Admission by `opts.memory_limit` comes first.
    pub fn prefill(
        model: &dyn LanguageModel,
        prompt: &[u32],
        opts: &GenerateOptions,
    ) -> Result<Self> {
        let mut p = Prefilling::start(model, prompt, opts)?;
        loop {
            if let Some(seq) = p.step(model)? {
                return Ok(seq);
            }
        }
    }

    /// Builds the step after the current token (its graph, not evaluated) unless the
    /// current token will be the last; returns it for the caller to queue with the other
    /// sequences' steps (`async_eval`).
    pub fn queue_next(&mut self, model: &dyn LanguageModel) -> Result<Option<&Array>> {
        if self.finished.is_some() || self.next.is_some() {
            return Ok(self.next.as_ref());
        }
        if self.generated + 1 >= self.opts.max_tokens {
            return Ok(None);
        }
        self.next = Some(self.step(model)?);
        Ok(self.next.as_ref())
    }

    /// Reads the current token (waiting for it) and moves on to the queued step, or
    /// builds and evaluates it when none was queued.
    pub fn advance(&mut self, model: &dyn LanguageModel) -> Result<Advance> {
        if self.finished.is_some() {
            return Err(Error::Request("the sequence has ended".into()));
        }
        let token = read_token(&self.current)?;
        let advance = Advance::of(
            token,
            &self.opts.stop_tokens,
            &mut self.generated,
            self.opts.max_tokens,
        );
        match advance {
            Advance::Stopped => {
                self.finished = Some(StopReason::StopToken);
                return Ok(advance);
            }
            Advance::Last(_) => {
                self.finished = Some(StopReason::MaxTokens);
                return Ok(advance);
            }
            Advance::Token(_) => {}
        }
        self.current = match self.next.take() {
            Some(n) => n,
            None => {
                let n = self.step(model)?;
                n.eval()?;
                n
            }
        };
        Ok(advance)
    }

    /// The caches and the current token (`[1]` uint32), for a scheduler that takes the
    /// sequence over (a [`crate::batch::Batch`] row) right after the prefill.
    pub fn into_parts(self) -> (Vec<AnyCache>, Array) {
        (self.caches, self.current)
    }

    /// Tokens emitted so far.
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// Why it ended, once it has.
    pub fn finished(&self) -> Option<StopReason> {
        self.finished
    }

    fn step(&mut self, model: &dyn LanguageModel) -> Result<Array> {
        kv_policy::apply(&mut self.caches, &self.opts.kv_layout)?;
        let logits = model.forward(&self.current.reshape(&[1, 1])?, &mut self.caches)?;
        self.steps += 1;
        self.opts.sampler.sample(&last(&logits)?, self.steps)
    }
}
