//! The model implementation registry: an immutable list of implementations, each with
//! an id, the fingerprint of the plan it was generated for, and a constructor. The binary
//! fills it (with `generated::implementations()`), so the runtime never depends on
//! generated code.

use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::model::{LanguageModel, Loaded};
use crate::specialized::Construct;

/// A generated implementation.
#[derive(Debug, Clone, Copy)]
pub struct Implementation {
    /// Unique id, e.g. `gemma4-e4b-generated`.
    pub id: &'static str,
    /// 16-hex fingerprint of the plan it was generated for.
    pub fingerprint: &'static str,
    /// The folder its config came from (for the parity gate and `inspect`).
    pub source: &'static str,
    /// Builds it (its [`crate::specialized::Specialization`]).
    pub construct: &'static dyn Construct,
}

impl Implementation {
    /// Builds this implementation over `model`, which must be of its family.
    pub fn construct_on(&self, model: &Loaded) -> Result<Box<dyn LanguageModel>> {
        self.construct.construct(model)
    }
}

/// Which implementation a run asks for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ImplChoice {
    /// The generated implementation whose fingerprint matches, else the monolith.
    #[default]
    Auto,
    /// The monolith, always.
    Monolith,
    /// A generated implementation matching the model's fingerprint; anything else is
    /// an error (never a silent substitute).
    Generated,
    /// This implementation id, and no other.
    Declared(String),
}

/// The immutable set of implementations a binary carries.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    implementations: Vec<Implementation>,
}

impl Registry {
    /// A registry over `implementations` (ids must be unique).
    pub fn new(implementations: Vec<Implementation>) -> Result<Self> {
        for (i, a) in implementations.iter().enumerate() {
            let monolith = crate::families::monolith_ids().any(|m| m == a.id);
            if monolith || implementations[..i].iter().any(|b| b.id == a.id) {
                return Err(Error::Selection(format!(
                    "implementation id {} is registered twice",
                    a.id
                )));
            }
        }
        Ok(Registry { implementations })
    }

    /// The registered implementations.
    pub fn implementations(&self) -> &[Implementation] {
        &self.implementations
    }

    /// The implementation generated for `fingerprint`, if any.
    pub fn find_fingerprint(&self, fingerprint: &Fingerprint) -> Option<&Implementation> {
        let short = fingerprint.short();
        self.implementations.iter().find(|i| i.fingerprint == short)
    }

    /// Chooses the implementation for `model`.
    pub fn select(&self, model: Loaded, choice: &ImplChoice) -> Result<Box<dyn LanguageModel>> {
        let fingerprint = Fingerprint::of(model.plan());
        let monolith = |m: Loaded| -> Box<dyn LanguageModel> { m.monolith() };
        match choice {
            ImplChoice::Monolith => Ok(monolith(model)),
            ImplChoice::Auto => match self.find_fingerprint(&fingerprint) {
                Some(i) => i.construct_on(&model),
                None => Ok(monolith(model)),
            },
            ImplChoice::Generated => match self.find_fingerprint(&fingerprint) {
                Some(i) => i.construct_on(&model),
                None => Err(Error::Selection(format!(
                    "no generated implementation for fingerprint {fingerprint} (registered: {}); \
                     refusing to fall back to the monolith. Generate one with \
                     `cargo xtask generate --model-dir DIR --name NAME`",
                    self.list()
                ))),
            },
            ImplChoice::Declared(id) if crate::families::monolith_ids().any(|m| m == id) => {
                let m = monolith(model);
                if m.implementation() != id {
                    return Err(Error::Selection(format!(
                        "{id} is not the monolith of the {} family ({}); refusing to fall back",
                        m.loaded().family().name(),
                        m.implementation()
                    )));
                }
                Ok(m)
            }
            ImplChoice::Declared(id) => {
                let imp = self.implementations.iter().find(|i| i.id == id).ok_or_else(|| {
                    Error::Selection(format!(
                        "implementation {id} is not registered (registered: {}); refusing to fall back",
                        self.list()
                    ))
                })?;
                if imp.fingerprint != fingerprint.short() {
                    return Err(Error::Selection(format!(
                        "implementation {id} was generated for fingerprint {}, this model has {fingerprint}; \
                         refusing to fall back",
                        imp.fingerprint
                    )));
                }
                imp.construct_on(&model)
            }
        }
    }

    fn list(&self) -> String {
        if self.implementations.is_empty() {
            return "none".to_owned();
        }
        self.implementations
            .iter()
            .map(|i| format!("{} ({})", i.id, i.fingerprint))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
