//! The published JSON Schemas of what the xtask and the runner write, generated from the Rust
//! types (`schemars`) into `schemas/`: `cargo xtask schemas` rewrites them, and
//! `schemas::tests::the_published_schemas_are_the_types` fails when a type changed without
//! its schema (and its `schema_version`).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Each published file and its schema, generated now.
pub fn generated() -> Vec<(&'static str, String)> {
    let pretty =
        |s: schemars::Schema| serde_json::to_string_pretty(&s).expect("a schema serializes") + "\n";
    vec![
        (
            "run-report.schema.json",
            pretty(schemars::schema_for!(link_report::Report)),
        ),
        (
            "runtime-comparison.schema.json",
            pretty(schemars::schema_for!(crate::compare::Comparison)),
        ),
        (
            "bench-sandbox.schema.json",
            pretty(schemars::schema_for!(
                crate::bench_sandbox::report::SandboxBench
            )),
        ),
        (
            "load.schema.json",
            pretty(schemars::schema_for!(crate::load::report::LoadReport)),
        ),
        (
            "fleet.schema.json",
            pretty(schemars::schema_for!(crate::fleet::Fleet)),
        ),
    ]
}

/// Writes every schema into `dir` (the repository's `schemas/`); the paths written.
pub fn write(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    generated()
        .into_iter()
        .map(|(name, text)| {
            let path = dir.join(name);
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../schemas")
    }

    /// `check-jsonschema` (pinned in `ci/requirements.txt`) on each file: `Err` says which
    /// failed and why; `None` when it is not installed.
    fn validate(schema: &Path, files: &[PathBuf]) -> Option<Result<(), String>> {
        let have = std::process::Command::new("check-jsonschema")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !have {
            return None;
        }
        let out = std::process::Command::new("check-jsonschema")
            .arg("--schemafile")
            .arg(schema)
            .args(files)
            .output()
            .expect("running check-jsonschema");
        Some(crate::ci::tests::verdict(&out))
    }

    #[test]
    fn real_outputs_are_valid_against_the_published_schemas() {
        use crate::compare::tests::{comparison_of_cycles, from_runs, runs_of};
        use link_report::Status;
        let dir = std::env::temp_dir().join(format!("xtask-schemas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: String| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        // Reports recorded by the runner (Mini and full Link, timed and traced).
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let reports: Vec<PathBuf> = ["mini", "link", "mini-traced", "link-traced"]
            .iter()
            .map(|n| data.join(format!("runtime-{n}.json")))
            .collect();
        // Comparisons: passed with cycles, a skipped and a failed side, with a machine.
        let passed = comparison_of_cycles(12, 1.1, 1.0);
        let mut skipped = from_runs(&runs_of(2, |_, _| 1.0));
        skipped.link.outcome = Status::Skipped;
        skipped.link.reason = Some("confinement unavailable".into());
        skipped.machine = Some(link_report::machine::Machine::detect());
        let mut failed = from_runs(&runs_of(2, |_, _| 1.0));
        failed.mini.outcome = Status::Failed;
        failed.mini.reason = Some("cold_turn: no reply".into());
        let comparisons = vec![
            write("passed.json", json(&passed)),
            write("skipped.json", json(&skipped)),
            write("failed.json", json(&failed)),
        ];
        let machines: Vec<crate::fleet::Measured> = [passed, skipped]
            .into_iter()
            .enumerate()
            .map(|(i, comparison)| crate::fleet::Measured {
                name: format!("m{i}"),
                path: PathBuf::from("x"),
                comparison,
                programs: Ok([("link".to_string(), "a".repeat(64))].into()),
            })
            .collect();
        let fleet = vec![write(
            "fleet.json",
            json(&crate::fleet::build(&machines, false).unwrap()),
        )];
        // A load result, measured and skipped.
        let mut measured = crate::load::report::LoadReport::empty(
            &crate::load::Options {
                clients: vec![32],
                rounds: 6,
                secs: 1.0,
                allow_stale: false,
            },
            "abc",
            &["load".into()],
        );
        let skipped_load = measured.clone();
        measured
            .measured(crate::load::report::tests::samples(32, 0.6, 0.15))
            .unwrap();
        let loads = vec![
            write("load.json", json(&measured)),
            write("load-skipped.json", json(&skipped_load)),
        ];
        let bad = vec![write(
            "bad.json",
            std::fs::read_to_string(&reports[0])
                .unwrap()
                .replacen("\"passed\"", "\"maybe\"", 1),
        )];
        let schema = |n: &str| published().join(n);
        let results = [
            (
                "run reports",
                validate(&schema("run-report.schema.json"), &reports),
            ),
            (
                "comparisons",
                validate(&schema("runtime-comparison.schema.json"), &comparisons),
            ),
            ("fleet", validate(&schema("fleet.schema.json"), &fleet)),
            ("loads", validate(&schema("load.schema.json"), &loads)),
        ];
        let control = validate(&schema("run-report.schema.json"), &bad);
        std::fs::remove_dir_all(&dir).unwrap();
        let Some(control) = control else {
            link_report::skip::tool_missing("check-jsonschema");
            return;
        };
        for (what, r) in results {
            r.expect("check-jsonschema ran")
                .unwrap_or_else(|e| panic!("{what} are not valid: {e}"));
        }
        assert!(control.is_err(), "the validator passed a status of `maybe`");
    }

    fn json<T: serde::Serialize>(v: &T) -> String {
        serde_json::to_string_pretty(v).unwrap()
    }

    #[test]
    fn the_published_schemas_are_the_types() {
        for (name, text) in generated() {
            let path = published().join(name);
            let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                on_disk == text,
                "{} differs from its type: run `cargo xtask schemas`, bump the format's \
                 schema_version if a field changed, and commit both",
                path.display()
            );
        }
    }
}
