//! Before anything starts: the capability probes (run, skip or fail) and the programs' hashes.

use super::report::Recorder;
use super::text::ms;
use crate::fixture::StateRoot;
use crate::interrupt;
use crate::probe::{self, Verdict};
use crate::programs;
use link_protocol::plugin::Mode;
use link_report::CheckName;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Probes the sandbox (with the root's isolated environment) and the native capabilities.
/// `true` if the run goes ahead; otherwise it was skipped or failed `startup`.
pub(super) fn probe(rec: &mut Recorder<'_>, mode: Mode, programs: &Path, root: &StateRoot) -> bool {
    let native = probe::native_probe();
    let sandbox = probe::sandbox_probe(programs, |cmd| root.isolate(cmd));
    rec.probes(sandbox.evidence.clone(), native.evidence.clone());
    rec.say(format!(
        "capabilities: sandbox {:?}, native {:?}",
        sandbox.status, native.status
    ));
    match probe::judge(mode == Mode::Confined, &sandbox, &native) {
        Verdict::Run => true,
        Verdict::Skip(reason) => {
            rec.skip_run(reason);
            false
        }
        Verdict::Fail(reason) => {
            rec.fail(CheckName::Startup, reason);
            false
        }
    }
}

/// Hashes every program found (stopping on interrupt) into the report's artifacts.
pub(super) fn hash(rec: &mut Recorder<'_>, found: &[PathBuf]) {
    let at = Instant::now();
    for path in found {
        if interrupt::interrupted().is_some() {
            break;
        }
        match programs::artifact(path) {
            Ok(a) => rec.artifact(a),
            Err(e) => rec.say(format!("warning: cannot hash {}: {e}", path.display())),
        }
    }
    let bytes: u64 = rec.artifacts().iter().map(|a| a.bytes).sum();
    rec.say(format!(
        "hashed {} programs ({:.1} MB) in {}",
        rec.artifacts().len(),
        bytes as f64 / 1e6,
        ms(at.elapsed())
    ));
}
