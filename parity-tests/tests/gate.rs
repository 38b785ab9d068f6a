//! The parity gate in CI: every registered generated model (so a newly generated one is
//! covered without editing this file) against the monolith on its shrunk twin.

use parity_tests::gate::{self, GateOptions, Report};

#[test]
fn every_generated_model_matches_the_monolith_bit_for_bit() {
    let opts = GateOptions::twins();
    let mut report = Report::default();
    let mut failures = Vec::new();
    for imp in generated::implementations() {
        match gate::run(&imp, &opts) {
            Ok(m) => report.models.push(m),
            Err(e) => failures.push(e.to_string()),
        }
    }
    eprintln!("{report}");
    assert!(
        failures.is_empty(),
        "parity gate failed:\n{}",
        failures.join("\n")
    );
    assert_eq!(report.models.len(), generated::implementations().len());
    for m in &report.models {
        // The guard must have refused at least once: a fallback to the monolith, or
        // (over caches nothing runs on) a refusal both sides fail alike.
        assert!(
            m.fast_path > 0 && m.fallbacks + m.refusals > 0,
            "{}: both paths must run",
            m.id
        );
        assert!(m.fast_bytes > 0, "{}: no fast-path bytes compared", m.id);
    }
}
