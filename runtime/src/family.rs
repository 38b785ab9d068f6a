//! What a model family provides, behind three traits: the family itself ([`Family`]:
//! its name, the `model_type`s it reads, its config parser), a validated config of it
//! ([`ModelConfig`]: plan resolution, memory, synthesis, loading), and a loaded model of
//! it ([`FamilyModel`]: caches, monolith, options). A family is one folder under
//! `model/` implementing them, and one line in [`crate::families::ALL`]; nothing
//! family-neutral names a family's types.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use mlx_rs::{Array, Dtype};
use serde_json::Value;

use crate::cache::AnyCache;
use crate::error::Result;
use crate::kv_layout::KvLayout;
use crate::memory::MemoryShape;
use crate::model::LanguageModel;
use crate::model::barrier::Barrier;
use crate::options::ExecOptions;
use crate::plan::{FamilyId, ModelPlan};
use crate::quantization::{QuantSpec, QuantizationMap};
use crate::synth::SynthOptions;
use crate::weights::catalog::Catalog;

/// A model family, registered once in [`crate::families::ALL`].
pub trait Family: Sync + 'static {
    /// The family's name: in plans (and so in fingerprints), ids and messages.
    fn name(&self) -> &'static str;

    /// The id plans of this family carry.
    fn id(&self) -> FamilyId {
        FamilyId(self.name())
    }

    /// The `model_type` values of config.json this family reads.
    fn model_types(&self) -> &'static [&'static str];

    /// Whether a config.json without `model_type` is this family's.
    fn reads_untyped_configs(&self) -> bool {
        false
    }

    /// Parses and validates a parsed config.json; `file` names it in errors.
    fn parse_config(&self, file: &str, value: &Value) -> Result<AnyConfig>;

    /// The implementation id of the family's monolith.
    fn monolith_id(&self) -> &'static str;
}

/// Where the facts a plan reads from a model's tensors (the presence of a tensor that
/// changes the computation, such as Gemma 4's layer scalars) come from.
#[derive(Debug, Clone, Copy)]
pub enum WeightFacts<'a> {
    /// As every shipped checkpoint has them (no weights at hand).
    AsShipped,
    /// The tensors themselves.
    Tensors(&'a Catalog),
    /// A `weight_facts.json` written from a checkpoint's tensors ([`ModelConfig::weight_facts_file`]);
    /// `file` names it in errors.
    File {
        /// The file, for messages.
        file: &'a str,
        /// Its text.
        text: &'a str,
    },
}

/// Seeded random tensors by canonical name, and the quantization map describing them.
pub type RandomTensors = (BTreeMap<String, Array>, Option<QuantizationMap>);

/// What every family's config states, borrowed from it: [`ModelConfig::basics`], from
/// which the trait's accessors of these facts read.
#[derive(Debug, Clone, Copy)]
pub struct ConfigBasics<'a> {
    /// The file (or description) the config came from, for messages.
    pub source: &'a str,
    /// num_hidden_layers.
    pub num_hidden_layers: usize,
    /// hidden_size.
    pub hidden_size: usize,
    /// vocab_size.
    pub vocab_size: usize,
    /// eos_token_id, as a list.
    pub eos_token_ids: &'a [u32],
    /// bos_token_id.
    pub bos_token_id: Option<u32>,
    /// max_position_embeddings, when the config gives it.
    pub max_position_embeddings: Option<usize>,
    /// The weights' quantization, when the config declares one.
    pub quantization: Option<&'a QuantizationMap>,
}

/// The [`ConfigBasics`] of a config whose fields carry the basics' names (`source`,
/// `num_hidden_layers`, `hidden_size`, `vocab_size`, `eos_token_ids`, `bos_token_id`,
/// `max_position_embeddings`, `quantization`), as every family's config does: the body
/// of its [`ModelConfig::basics`]. A config whose `max_position_embeddings` is not an
/// `Option` names the value to state.
#[macro_export]
macro_rules! config_basics {
    ($config:expr) => {
        $crate::config_basics!($config, max_position_embeddings: $config.max_position_embeddings)
    };
    ($config:expr, max_position_embeddings: $max_position:expr) => {
        $crate::family::ConfigBasics {
            source: &$config.source,
            num_hidden_layers: $config.num_hidden_layers,
            hidden_size: $config.hidden_size,
            vocab_size: $config.vocab_size,
            eos_token_ids: &$config.eos_token_ids,
            bos_token_id: $config.bos_token_id,
            max_position_embeddings: $max_position,
            quantization: $config.quantization.as_ref(),
        }
    };
}

/// Downcasting and comparing configs behind `dyn ModelConfig`; every config has it.
pub trait ConfigAny {
    /// For downcasting to the family's config type.
    fn as_any(&self) -> &dyn Any;

    /// Whether `other` is the same config (same family, equal values).
    fn same_as(&self, other: &dyn ModelConfig) -> bool;
}

impl<T: ModelConfig + PartialEq> ConfigAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn same_as(&self, other: &dyn ModelConfig) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
}

/// A validated config of some family: everything the runtime asks of a model before its
/// weights are loaded.
pub trait ModelConfig: fmt::Debug + Send + Sync + Any + ConfigAny {
    /// The family.
    fn family(&self) -> &'static dyn Family;

    /// The facts every config states.
    fn basics(&self) -> ConfigBasics<'_>;

    /// The file (or description) the config came from, for messages.
    fn source(&self) -> &str {
        self.basics().source
    }

    /// num_hidden_layers.
    fn num_hidden_layers(&self) -> usize {
        self.basics().num_hidden_layers
    }

    /// hidden_size.
    fn hidden_size(&self) -> usize {
        self.basics().hidden_size
    }

    /// vocab_size.
    fn vocab_size(&self) -> usize {
        self.basics().vocab_size
    }

    /// eos_token_id, as a list.
    fn eos_token_ids(&self) -> &[u32] {
        self.basics().eos_token_ids
    }

    /// bos_token_id.
    fn bos_token_id(&self) -> Option<u32> {
        self.basics().bos_token_id
    }

    /// max_position_embeddings, when the config gives it.
    fn max_position_embeddings(&self) -> Option<usize> {
        self.basics().max_position_embeddings
    }

    /// The weights' quantization, when the config declares one.
    fn quantization(&self) -> Option<&QuantizationMap> {
        self.basics().quantization
    }

    /// The number of KV caches the model keeps (one per layer that owns its K/V).
    fn num_caches(&self) -> usize;

    /// The sliding window, for families that have one.
    fn sliding_window(&self) -> Option<usize> {
        None
    }

    /// Whether the model has MoE experts (whose CPU `gather_mm` takes float32 only).
    fn has_moe(&self) -> bool {
        false
    }

    /// Resolves every per-layer branch for `kv`, with the facts the family reads from the
    /// tensors themselves taken from `facts`.
    fn resolve(&self, kv: &KvLayout, facts: WeightFacts<'_>) -> Result<ModelPlan>;

    /// The text of `weight_facts.json` for the tensors of `catalog`: what the family reads
    /// from them to resolve a plan, for a model folder kept without its weights; `None`
    /// when the family reads nothing from them.
    fn weight_facts_file(&self, catalog: &Catalog) -> Option<String>;

    /// What the memory plan needs of the model under `plan`.
    fn memory_shape(&self, plan: &ModelPlan) -> MemoryShape;

    /// Weight bytes as mlx-community would store the model (float `dtype_bytes`
    /// elements, or `quant` where the family's quant predicate applies).
    fn estimate_weight_bytes(&self, quant: Option<QuantSpec>, dtype_bytes: u64) -> u64;

    /// The shrunk twin: the same plan, small dimensions.
    fn twin(&self) -> AnyConfig;

    /// The same config with `quantization` set (the map random tensors came with).
    fn with_quantization(&self, quantization: Option<QuantizationMap>) -> AnyConfig;

    /// Seeded random tensors for this config, floats in `dtype`.
    fn random_tensors(&self, opts: SynthOptions, dtype: Dtype) -> Result<RandomTensors>;

    /// Writes a synthetic model folder (weights and config.json) in the family's layout.
    fn write_folder(
        &self,
        dir: &Path,
        tensors: &BTreeMap<String, Array>,
        quant: Option<&QuantizationMap>,
    ) -> Result<()>;

    /// Loads the weights of `catalog` into a model of this config with `plan` (resolved
    /// by [`Self::resolve`] for `kv_layout`); `on_file(done, total)` reports files read.
    fn load(
        &self,
        catalog: &Catalog,
        plan: ModelPlan,
        kv_layout: KvLayout,
        options: ExecOptions,
        on_file: &mut dyn FnMut(usize, usize),
    ) -> Result<Loaded>;

    /// What `mlx-aot inspect` shows of the config under `plan`: its dimensions as JSON,
    /// and one line for a terminal.
    fn summary(&self, plan: &ModelPlan) -> (Value, String);
}

/// A validated config of any family, shared.
#[derive(Clone)]
pub struct AnyConfig(Arc<dyn ModelConfig>);

impl AnyConfig {
    /// Wraps a family's config.
    pub fn new(config: impl ModelConfig) -> Self {
        AnyConfig(Arc::new(config))
    }

    /// Reads and validates `path` (a `config.json`) as the family its `model_type` names.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| crate::Error::io(path, e))?;
        Self::from_json_str(&path.display().to_string(), &text)
    }

    /// Parses and validates the text of a config.json; `file` names it in errors.
    pub fn from_json_str(file: &str, text: &str) -> Result<Self> {
        let value = crate::json::parse(file, text)?;
        crate::families::of_config(file, &value)?.parse_config(file, &value)
    }

    /// The family's config type, if it is one.
    pub fn downcast_ref<C: ModelConfig>(&self) -> Option<&C> {
        self.0.as_any().downcast_ref()
    }
}

impl std::ops::Deref for AnyConfig {
    type Target = dyn ModelConfig;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for AnyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for AnyConfig {
    fn eq(&self, other: &Self) -> bool {
        self.0.same_as(&*other.0)
    }
}

/// A loaded model of some family: config, plan, weights and options, shared (behind an
/// `Rc`) by the monolith and the generated implementations built over it.
pub trait FamilyModel: fmt::Debug + Any + ModelAny {
    /// What every loaded model holds.
    fn parts(&self) -> ModelParts<'_>;

    /// The validated config.
    fn config(&self) -> &dyn ModelConfig {
        self.parts().config
    }

    /// The plan, resolved once when the model was loaded.
    fn plan(&self) -> &ModelPlan {
        self.parts().plan
    }

    /// The kv layout the plan was resolved with.
    fn kv_layout(&self) -> &KvLayout {
        self.parts().kv_layout
    }

    /// How the model executes.
    fn options(&self) -> &ExecOptions {
        self.parts().options
    }

    /// The activation dtype.
    fn dtype(&self) -> Dtype;

    /// Bytes of all weight arrays.
    fn weight_bytes(&self) -> usize;

    /// Empty float caches: what the first prefill runs on.
    fn float_caches(&self, batch: usize) -> Vec<AnyCache>;

    /// Empty caches of the plan's signatures.
    fn planned_caches(&self, batch: usize) -> Vec<AnyCache>;

    /// Where the model's multi-token passes are evaluated before they go on.
    fn barrier(&self) -> Barrier;

    /// The family's monolith over this model.
    fn monolith(self: Rc<Self>) -> Box<dyn LanguageModel>;

    /// The same model (the same weight arrays, not copies) with other options.
    fn with_options(&self, options: ExecOptions) -> Loaded;
}

/// What every family's loaded model holds, borrowed from it: [`FamilyModel::parts`].
#[derive(Debug, Clone, Copy)]
pub struct ModelParts<'a> {
    /// The validated config.
    pub config: &'a dyn ModelConfig,
    /// The plan, resolved once when the model was loaded.
    pub plan: &'a ModelPlan,
    /// The kv layout the plan was resolved with.
    pub kv_layout: &'a KvLayout,
    /// How the model executes.
    pub options: &'a ExecOptions,
}

/// The [`ModelParts`] of a loaded model whose fields carry the parts' names (`config`,
/// `plan`, `kv_layout`, `options`), as every family's does: the body of its
/// [`FamilyModel::parts`].
#[macro_export]
macro_rules! model_parts {
    ($model:expr) => {
        $crate::family::ModelParts {
            config: &$model.config,
            plan: &$model.plan,
            kv_layout: &$model.kv_layout,
            options: &$model.options,
        }
    };
}

/// Downcasting loaded models behind `dyn FamilyModel`; every loaded model has it.
pub trait ModelAny {
    /// For downcasting to the family's model type.
    fn as_any(&self) -> &dyn Any;

    /// For downcasting a shared handle to the family's model type.
    fn into_any(self: Rc<Self>) -> Rc<dyn Any>;
}

impl<T: FamilyModel> ModelAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Rc<Self>) -> Rc<dyn Any> {
        self
    }
}

impl dyn FamilyModel {
    /// The family.
    pub fn family(&self) -> &'static dyn Family {
        self.config().family()
    }

    /// vocab_size.
    pub fn vocab_size(&self) -> usize {
        self.config().vocab_size()
    }

    /// eos_token_id, as a list.
    pub fn eos_token_ids(&self) -> &[u32] {
        self.config().eos_token_ids()
    }

    /// bos_token_id.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.config().bos_token_id()
    }

    /// The family's model type, if it is one.
    pub fn downcast_ref<M: FamilyModel>(&self) -> Option<&M> {
        self.as_any().downcast_ref()
    }

    /// The memory plan's model of this loaded model (its weights' real bytes).
    pub fn memory_model(&self, prefill_chunk: usize) -> crate::memory::MemoryModel {
        crate::memory::MemoryModel {
            shape: self.config().memory_shape(self.plan()),
            weight_bytes: self.weight_bytes() as u64,
            dtype_bytes: crate::memory::dtype_bytes(self.dtype()),
            prefill_chunk: prefill_chunk as u64,
        }
    }
}

/// A loaded model of any family, shared by the implementations built over it.
#[derive(Debug, Clone)]
pub struct Loaded(Rc<dyn FamilyModel>);

impl Loaded {
    /// Wraps a family's loaded model.
    pub fn new(model: impl FamilyModel) -> Self {
        Loaded(Rc::new(model))
    }

    /// Wraps a family's loaded model already shared.
    pub fn shared(model: Rc<impl FamilyModel>) -> Self {
        Loaded(model)
    }

    /// Loads a model folder of the family its `config.json` names (`model_type`),
    /// resolving its plan once.
    pub fn load(
        dir: &Path,
        kv_layout: KvLayout,
        options: ExecOptions,
        mut on_file: impl FnMut(usize, usize),
    ) -> Result<Self> {
        Resolved::open(dir, kv_layout)?.load(options, &mut on_file)
    }

    /// Builds a model from tensors in memory (canonical names), e.g. a synthetic twin.
    pub fn from_tensors(
        config: AnyConfig,
        kv_layout: KvLayout,
        options: ExecOptions,
        tensors: impl IntoIterator<Item = (String, Array)>,
    ) -> Result<Self> {
        let catalog = Catalog::from_arrays(tensors)?;
        let plan = config.resolve(&kv_layout, WeightFacts::Tensors(&catalog))?;
        config.load(&catalog, plan, kv_layout, options, &mut |_, _| {})
    }

    /// [`Loaded::from_tensors`] as the family's own model type `M`, with the default
    /// execution options (for tests that call a family's blocks and types directly); an
    /// error when `config` is of another family than `M`.
    pub fn typed_from_tensors<M: FamilyModel>(
        config: impl ModelConfig,
        kv_layout: KvLayout,
        tensors: impl IntoIterator<Item = (String, Array)>,
    ) -> Result<Rc<M>> {
        let loaded = Self::from_tensors(
            AnyConfig::new(config),
            kv_layout,
            ExecOptions::default(),
            tensors,
        )?;
        loaded.downcast::<M>().ok_or_else(|| {
            crate::error::Error::Unsupported(format!(
                "a {} model where {} was asked for",
                loaded.family().name(),
                std::any::type_name::<M>()
            ))
        })
    }

    /// The family's model type, shared, if it is one.
    pub fn downcast<M: FamilyModel>(&self) -> Option<Rc<M>> {
        self.0.clone().into_any().downcast().ok()
    }

    /// The family's monolith over this model.
    pub fn monolith(&self) -> Box<dyn LanguageModel> {
        self.0.clone().monolith()
    }
}

impl AsRef<dyn FamilyModel> for Loaded {
    fn as_ref(&self) -> &(dyn FamilyModel + 'static) {
        &*self.0
    }
}

impl std::ops::Deref for Loaded {
    type Target = dyn FamilyModel;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

/// A model folder opened and planned, its weights not yet read: the config, the catalog
/// of its tensors and the plan, resolved once and used for admission, inspection,
/// fingerprint and the load itself.
#[derive(Debug)]
pub struct Resolved {
    /// The validated config.
    pub config: AnyConfig,
    /// The kv layout the plan was resolved with.
    pub kv_layout: KvLayout,
    /// The plan.
    pub plan: ModelPlan,
    /// The folder's tensors (headers read, data not).
    pub catalog: Catalog,
}

impl Resolved {
    /// Opens `dir`: reads and validates `config.json`, catalogs the weights, resolves the
    /// plan for `kv_layout`.
    pub fn open(dir: &Path, kv_layout: KvLayout) -> Result<Self> {
        let config = AnyConfig::from_file(&dir.join("config.json"))?;
        let catalog = Catalog::open(dir)?;
        let plan = config.resolve(&kv_layout, WeightFacts::Tensors(&catalog))?;
        Ok(Resolved {
            config,
            kv_layout,
            plan,
            catalog,
        })
    }

    /// The memory plan's model of the folder (weight bytes from the files).
    pub fn memory_model(&self, prefill_chunk: usize) -> crate::memory::MemoryModel {
        crate::memory::MemoryModel {
            shape: self.config.memory_shape(&self.plan),
            weight_bytes: self.catalog.total_bytes(),
            dtype_bytes: self.catalog.activation_dtype_bytes(),
            prefill_chunk: prefill_chunk as u64,
        }
    }

    /// Reads the weights into a model with this plan.
    pub fn load(
        self,
        options: ExecOptions,
        on_file: &mut dyn FnMut(usize, usize),
    ) -> Result<Loaded> {
        self.config
            .load(&self.catalog, self.plan, self.kv_layout, options, on_file)
    }
}
