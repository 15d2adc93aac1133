//! The files one `runtime` invocation writes under the target directory: a leaf the
//! comparison's page reads for its links, and the runs write.

use link_report::{Mode, Profile};
use std::path::{Path, PathBuf};

/// Diagnostic outputs carry `-diagnostic` so they never overwrite confined ones.
pub(super) fn tag(mode: Mode) -> &'static str {
    match mode {
        Mode::Confined => "",
        Mode::Diagnostic => "-diagnostic",
    }
}

/// The files one profile's runs write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    pub report: PathBuf,
    pub traced: PathBuf,
    pub trace: PathBuf,
}

pub fn files(target: &Path, profile: Profile, mode: Mode) -> Files {
    let stem = format!("runtime-{profile}{}", tag(mode));
    Files {
        report: target.join(format!("{stem}.json")),
        traced: target.join(format!("{stem}-traced.json")),
        trace: target.join(format!("{stem}.trace")),
    }
}

/// Run `index` (1-based) of one side: `target/runtime-runs[-diagnostic]/{mini,link}-{index}.json`.
pub fn run_file(target: &Path, profile: Profile, mode: Mode, index: u32) -> PathBuf {
    target
        .join(format!("runtime-runs{}", tag(mode)))
        .join(format!("{profile}-{index}.json"))
}

/// `runtime-comparison[-diagnostic].{json,md,svg}`.
pub fn comparison_files(target: &Path, mode: Mode) -> [PathBuf; 3] {
    let stem = format!("runtime-comparison{}", tag(mode));
    ["json", "md", "svg"].map(|ext| target.join(format!("{stem}.{ext}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnostic_outputs_never_share_confined_names() {
        let t = Path::new("/w/target");
        let confined = files(t, Profile::Mini, Mode::Confined);
        assert_eq!(confined.report, t.join("runtime-mini.json"));
        assert_eq!(confined.traced, t.join("runtime-mini-traced.json"));
        assert_eq!(confined.trace, t.join("runtime-mini.trace"));
        let diag = files(t, Profile::Mini, Mode::Diagnostic);
        assert_eq!(diag.report, t.join("runtime-mini-diagnostic.json"));
        assert_eq!(diag.traced, t.join("runtime-mini-diagnostic-traced.json"));
        assert_eq!(diag.trace, t.join("runtime-mini-diagnostic.trace"));
        assert_eq!(
            run_file(t, Profile::Link, Mode::Confined, 3),
            t.join("runtime-runs/link-3.json")
        );
        assert_eq!(
            run_file(t, Profile::Mini, Mode::Diagnostic, 1),
            t.join("runtime-runs-diagnostic/mini-1.json")
        );
        let c = comparison_files(t, Mode::Confined);
        let d = comparison_files(t, Mode::Diagnostic);
        assert_eq!(c[0], t.join("runtime-comparison.json"));
        for (c, d) in c.iter().zip(&d) {
            assert_ne!(c, d);
            assert!(d.to_string_lossy().contains("diagnostic"));
        }
    }
}
