//! A deployment document, as `sutra check` and `POST /v1/deployments` read it: the YAML reader,
//! then the checker, then the diagnostics rendered as both answer them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sutra_core::{check, diagnostic, yaml};

fuzz_target!(
    init: sutra_fuzz::tolerate_caught_panics(),
    |data: &[u8]| {
        let Ok(source) = std::str::from_utf8(data) else {
            return;
        };
        if let Ok(root) = yaml::parse(source) {
            let _ = root.to_json();
        }
        let checked = check::check(source);
        assert_eq!(
            checked.deployment.is_some(),
            checked.errors() == 0,
            "a deployment is handed out exactly when no error was found"
        );
        assert!(checked.diagnostics.len() <= check::DIAGNOSTICS_MAX + 1);
        let _ = diagnostic::render_all(&checked.diagnostics, "fuzz.yaml", source);
        for found in &checked.diagnostics {
            let _ = found.to_json("fuzz.yaml");
        }
    }
);
