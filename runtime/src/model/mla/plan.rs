//! The MLA-family plan: every layer full attention over its own latent cache, with the
//! indexer's keys where the layer runs its own indexer (every layer, as in mlx-lm, unless
//! the config shares them as GLM-5.2 does), dense or routed as the config's
//! `first_k_dense_replace` and `moe_layer_freq` say.

use super::config::{IndexerType, MlaConfig};
use crate::config::LayerType;
use crate::error::{Error, Result};
use crate::kv_layout::KvLayout;
use crate::plan::{KvRole, LayerFlags, LayerPlan, ModelPlan};
use crate::signature::CacheSignature;

/// Resolves an MLA-family model. A kv layout that quantizes any cache is refused: the
/// latent caches have no quantized kind (mlx-lm has none either).
pub fn resolve(config: &MlaConfig, kv: &KvLayout) -> Result<ModelPlan> {
    if let Some(entry) = kv.entries().next() {
        return Err(Error::config(
            &kv.source,
            format!("[{}].layer_idx", entry.position),
            "the MLA family's latent caches are not quantized; expected no entries",
        ));
    }
    let layers = (0..config.num_hidden_layers)
        .map(|i| LayerPlan {
            attention: LayerType::Full,
            kv: KvRole::Donor {
                cache: i,
                exported: false,
            },
            // A layer without its own indexer caches no indexer keys: its signature says
            // it reuses the last full layer's choice.
            cache: CacheSignature::Mla {
                indexer: config.indexer_types[i] == IndexerType::Full,
            },
            flags: LayerFlags {
                moe: config.moe.is_some_and(|m| m.routes(i)),
                ..LayerFlags::default()
            },
        })
        .collect();
    Ok(ModelPlan {
        family: super::FAMILY_ID,
        layers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glm_5_routes_from_layer_3_and_every_layer_runs_its_indexer() {
        let c = MlaConfig::from_json_str(
            "g",
            include_str!("../../../../generated/models/glm-5/config.json"),
        )
        .unwrap();
        let plan = resolve(&c, &KvLayout::float()).unwrap();
        assert_eq!(plan.layers.len(), 78);
        let moe: Vec<bool> = plan.layers.iter().map(|l| l.flags.moe).collect();
        assert_eq!(&moe[..4], &[false, false, false, true]);
        assert!(moe[3..].iter().all(|&m| m));
        assert!(
            plan.layers
                .iter()
                .all(|l| l.cache == CacheSignature::Mla { indexer: true })
        );
        // A layer frequency of 2 routes every other layer past the dense ones.
        let mut c2 = c.clone();
        if let Some(m) = &mut c2.moe {
            m.moe_layer_freq = 2;
        }
        let plan = resolve(&c2, &KvLayout::float()).unwrap();
        assert!(!plan.layers[3].flags.moe && plan.layers[4].flags.moe);
    }

    #[test]
    fn glm_5_2_layers_without_an_indexer_have_latent_caches() {
        let c = MlaConfig::from_json_str(
            "g",
            include_str!("../../../../generated/models/glm-5.2/config.json"),
        )
        .unwrap();
        let plan = resolve(&c, &KvLayout::float()).unwrap();
        let own: Vec<bool> = plan
            .layers
            .iter()
            .map(|l| l.cache == CacheSignature::Mla { indexer: true })
            .collect();
        assert_eq!(
            &own[..8],
            &[true, true, true, false, false, false, true, false]
        );
        assert_eq!(own.iter().filter(|&&o| o).count(), 21);
        assert!(plan.layers[3..].iter().all(|l| l.flags.moe));
    }

    #[test]
    fn a_kv_layout_that_quantizes_is_refused() {
        let c = MlaConfig::from_json_str(
            "d",
            include_str!("../../../../generated/models/deepseek-v3.2/config.json"),
        )
        .unwrap();
        let layout = KvLayout::float().with_entry(
            0,
            crate::quantization::QuantSpec {
                bits: 8,
                group_size: 64,
            },
        );
        let e = resolve(&c, &layout).unwrap_err().to_string();
        assert!(e.contains("not quantized"), "{e}");
    }
}
