//! The Llama-family plan: every layer full attention over its own growing cache, q/k
//! norm and MiniCPM's residual scale as the config says.

use super::config::LlamaConfig;
use crate::config::LayerType;
use crate::error::Result;
use crate::kv_layout::KvLayout;
use crate::plan::{KvRole, LayerFlags, LayerPlan, ModelPlan, check_kv_layout};
use crate::signature::CacheSignature;

/// Resolves a Llama-family model: every layer full attention and a donor of its own
/// growing cache (float, or quantized as the kv layout says), q/k norm as the
/// config says.
pub fn resolve(config: &LlamaConfig, kv: &KvLayout) -> Result<ModelPlan> {
    let n = config.num_hidden_layers;
    check_kv_layout(kv, n, n, |_| config.head_dim)?;
    let layers = (0..n)
        .map(|i| LayerPlan {
            attention: LayerType::Full,
            kv: KvRole::Donor {
                cache: i,
                exported: false,
            },
            cache: CacheSignature::Plain.with_quant(kv.get(i)),
            flags: LayerFlags {
                qk_norm: config.qk_norm,
                residual_scale: config.minicpm.is_some(),
                ..LayerFlags::default()
            },
        })
        .collect();
    Ok(ModelPlan {
        family: super::FAMILY_ID,
        layers,
    })
}
