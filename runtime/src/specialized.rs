//! A generated model at run time: what a generated module declares of itself (its
//! [`Specialization`]: fingerprint, cache signatures, the unrolled layers) and the
//! one wrapper every generated model runs in ([`Specialized`]): the guard (plan
//! fingerprint once, cache signatures every call) in front of the unrolled layers, the
//! family's monolith behind it, and a count of the calls the fast path took. Generated
//! modules hold their model's structure; everything they would share lives here.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use mlx_rs::Array;

use crate::cache::AnyCache;
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::guard;
use crate::model::segments::{self, DecodeSegments, Staged};
use crate::model::{LanguageModel, Loaded, ModelRef};
use crate::plan::ModelPlan;
use crate::registry::Implementation;
use crate::signature::CacheSignature;

/// The unrolled layers of a generated model: one step over caches that are exactly its
/// signatures, through compiled segments when given (single-token steps).
pub type ForwardLayers<M> =
    fn(&M, &Array, &mut [AnyCache], Option<&mut DecodeSegments>) -> Result<Array>;

/// What a generated module declares: everything the wrapper needs that the generator
/// decided.
#[derive(Debug)]
pub struct Specialization<M: 'static> {
    /// Unique id, e.g. `gemma4-e4b-generated`.
    pub id: &'static str,
    /// 16-hex fingerprint of the plan it was generated for.
    pub fingerprint: &'static str,
    /// The folder its config came from.
    pub source: &'static str,
    /// The cache signatures the fast path runs on, in cache order.
    pub cache_signatures: &'static [CacheSignature],
    /// The unrolled layers.
    pub forward_layers: ForwardLayers<M>,
}

/// Builds a generated model over a loaded model (see [`Implementation::construct`]).
pub trait Construct: Sync + std::fmt::Debug {
    /// The generated model over `model`; an error when `model` is not of the family it
    /// was generated for.
    fn construct(&'static self, model: &Loaded) -> Result<Box<dyn LanguageModel>>;
}

impl<M: Staged> Construct for Specialization<M> {
    fn construct(&'static self, model: &Loaded) -> Result<Box<dyn LanguageModel>> {
        let m = model.downcast::<M>().ok_or_else(|| {
            Error::Selection(format!(
                "implementation {} serves the {} family, the model is {}",
                self.id,
                M::FAMILY,
                model.family().name()
            ))
        })?;
        Ok(Box::new(Specialized::new(m, self)))
    }
}

impl<M: Staged> Specialization<M> {
    /// Its registry entry.
    pub const fn implementation(&'static self) -> Implementation {
        Implementation {
            id: self.id,
            fingerprint: self.fingerprint,
            source: self.source,
            construct: self,
        }
    }

    /// The error of [`Self::forward_layers`] handed caches other than its signatures.
    pub fn cache_mismatch(&self, caches: &[AnyCache]) -> Error {
        let why = guard::mismatch(caches, self.cache_signatures).unwrap_or_default();
        Error::Request(format!("{} was generated for other caches: {why}", self.id))
    }
}

/// A sharer handed K/V of another kind than it was generated for.
pub fn unexpected_kv(layer: usize, expected: &str) -> Error {
    Error::Unsupported(format!(
        "layer {layer} was generated for {expected} K/V from its donor"
    ))
}

/// A generated model over a loaded model of its family.
#[derive(Debug)]
pub struct Specialized<M: 'static> {
    model: Rc<M>,
    spec: &'static Specialization<M>,
    plan_matches: bool,
    fast_path_calls: Cell<u64>,
    segments: RefCell<Option<DecodeSegments>>,
}

impl<M: Staged> Specialized<M> {
    /// Wraps a loaded model; its plan's fingerprint is checked once, here.
    pub fn new(model: Rc<M>, spec: &'static Specialization<M>) -> Self {
        let plan_matches = Fingerprint::of(model.plan()).short() == spec.fingerprint;
        Specialized {
            model,
            spec,
            plan_matches,
            fast_path_calls: Cell::new(0),
            segments: RefCell::new(None),
        }
    }
}

impl<M: Staged> LanguageModel for Specialized<M> {
    fn forward(&self, tokens: &Array, caches: &mut [AnyCache]) -> Result<Array> {
        let m = &*self.model;
        if !self.plan_matches || !guard::caches_match(caches, self.spec.cache_signatures) {
            return m.monolith_forward(tokens, caches);
        }
        self.fast_path_calls.set(self.fast_path_calls.get() + 1);
        if tokens.ndim() == 2 && tokens.dim(1) == 1 && segments::compiles(m) {
            let mut segments = self.segments.borrow_mut();
            let segments = segments.get_or_insert_with(|| DecodeSegments::new(&self.model));
            return (self.spec.forward_layers)(m, tokens, caches, Some(segments));
        }
        (self.spec.forward_layers)(m, tokens, caches, None)
    }

    fn plan(&self) -> &ModelPlan {
        self.model.plan()
    }

    fn loaded(&self) -> ModelRef<'_> {
        &*self.model
    }

    fn implementation(&self) -> &str {
        self.spec.id
    }

    fn fast_path_calls(&self) -> u64 {
        self.fast_path_calls.get()
    }
}
