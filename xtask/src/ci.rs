//! What a CI pipeline step reads: `--junit FILE` (JUnit XML, one `<testsuite>` per side, one
//! `<testcase>` per check) and, where `GITHUB_STEP_SUMMARY` names a file, the comparison's
//! Markdown appended to it. The XML is `quick-junit`'s, which escapes it and drops what XML
//! cannot carry; it stays within the Jenkins xUnit schema (`junit-10.xsd`).

use crate::compare::{status_word, Comparison, Side, TimedRun};
use anyhow::{Context, Result};
use link_report::{Profile, Status};
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The variable GitHub Actions sets to the step's summary file.
pub const STEP_SUMMARY: &str = "GITHUB_STEP_SUMMARY";

/// One `<testcase>`: passed, skipped or failed, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Case {
    pub name: String,
    pub status: Status,
    /// The one-line message (skipped or failed).
    pub message: String,
    /// For a failure: every failed run's detail, one per line.
    pub body: String,
}

/// A check over all of a side's timed runs: failed when any run failed it, skipped when any
/// run skipped it (and none failed), passed only when every run passed it.
pub(crate) fn check_cases(runs: &[&TimedRun]) -> Vec<Case> {
    let mut names: Vec<String> = Vec::new();
    for r in runs {
        for c in &r.loaded.report.checks {
            let name = c.name.to_string();
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let mut failed = Vec::new();
            let mut skipped = Vec::new();
            for r in runs {
                for c in r
                    .loaded
                    .report
                    .checks
                    .iter()
                    .filter(|c| c.name.as_str() == name)
                {
                    let line = format!("run {}: {}", r.index, c.detail);
                    match c.outcome {
                        Status::Passed => {}
                        Status::Skipped => skipped.push(line),
                        Status::Failed => failed.push(line),
                    }
                }
            }
            let (status, lines) = if !failed.is_empty() {
                (Status::Failed, failed)
            } else if !skipped.is_empty() {
                (Status::Skipped, skipped)
            } else {
                (Status::Passed, Vec::new())
            };
            let message = match lines.len() {
                0 => String::new(),
                1 => lines[0].clone(),
                n => format!("{} ({n} of {} runs)", lines[0], runs.len()),
            };
            Case {
                name,
                status,
                message,
                body: lines.join("\n"),
            }
        })
        .collect()
}

/// The side's verdict over all its runs (a side with no report still has a testcase), and,
/// when a trace pass ran, whether its exec counts are available.
fn side_cases(side: &Side) -> Vec<Case> {
    let why = side
        .reason
        .clone()
        .unwrap_or_else(|| "no reason given".into());
    let mut out = vec![Case {
        name: "outcome".into(),
        status: side.outcome,
        message: if side.outcome == Status::Passed {
            String::new()
        } else {
            format!("{}: {why}", status_word(side.outcome))
        },
        body: String::new(),
    }];
    if let Some(t) = &side.traced {
        let reason = t.reason.clone().unwrap_or_else(|| "no reason given".into());
        let (status, message) = match (t.outcome, t.available) {
            (Status::Passed, true) => (Status::Passed, String::new()),
            (Status::Skipped, _) => (Status::Skipped, format!("traced run skipped: {reason}")),
            (Status::Failed, _) => (Status::Failed, format!("traced run failed: {reason}")),
            (Status::Passed, false) => {
                (Status::Failed, format!("exec counts unavailable: {reason}"))
            }
        };
        out.push(Case {
            name: "exec_counts".into(),
            status,
            message,
            body: String::new(),
        });
    }
    out
}

/// The JUnit XML of a comparison: `<testsuites>` with one `<testsuite>` per side (`mini`,
/// `link`), each with its checks (over every timed run), its outcome and its exec counts.
pub fn junit(c: &Comparison, runs: &[TimedRun]) -> String {
    let mut report = Report::new(format!("cargo xtask runtime ({})", c.mode));
    for side in [&c.mini, &c.link] {
        report.add_test_suite(suite(c, side, runs));
    }
    report
        .to_string()
        .expect("serializing XML into a String cannot fail")
}

fn suite(c: &Comparison, side: &Side, runs: &[TimedRun]) -> TestSuite {
    let mine: Vec<&TimedRun> = runs
        .iter()
        .filter(|r| r.loaded.report.profile == side.profile)
        .collect();
    let mut cases = check_cases(&mine);
    cases.extend(side_cases(side));
    let nanos: u128 = mine
        .iter()
        .flat_map(|r| &r.loaded.report.phases)
        .filter(|p| link_report::PhaseName::in_total(&p.name))
        .map(|p| p.duration_ns)
        .sum();
    let mut suite = TestSuite::new(side_name(side.profile, c.mode));
    suite.set_time(Duration::from_nanos(nanos.try_into().unwrap_or(u64::MAX)));
    suite.add_properties([
        Property::new("mode", side.mode.as_str()),
        Property::new("source", side.source.as_str()),
        Property::new("runs", mine.len().to_string()),
    ]);
    let class = match c.mode {
        link_report::Mode::Confined => format!("runtime.{}", side.profile),
        link_report::Mode::Diagnostic => format!("runtime.{}.diagnostic", side.profile),
    };
    let skipped = cases.iter().filter(|k| k.status == Status::Skipped).count();
    suite.add_test_cases(cases.into_iter().map(|k| test_case(k, &class)));
    // Counted as quick-junit's `disabled` too; `skipped` is what most readers look for.
    suite
        .extra
        .insert("skipped".into(), skipped.to_string().into());
    // The comparison's warnings (noise, vague figures, outliers), where CI keeps a suite's log.
    if !c.warnings.is_empty() {
        suite.set_system_err(c.warnings.join("\n"));
    }
    suite
}

fn test_case(k: Case, class: &str) -> TestCase {
    let status = match k.status {
        Status::Passed => TestCaseStatus::success(),
        Status::Skipped => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(k.message);
            s
        }
        Status::Failed => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(k.message).set_description(k.body);
            s
        }
    };
    let mut case = TestCase::new(k.name, status);
    case.set_classname(class);
    case
}

/// A suite's name: `Mini`, `Link`, or with `(diagnostic)` so no diagnostic result takes a
/// confined one's name.
fn side_name(p: Profile, mode: link_report::Mode) -> String {
    let side = match p {
        Profile::Mini => "Mini",
        Profile::Link => "Link",
    };
    match mode {
        link_report::Mode::Confined => side.to_string(),
        link_report::Mode::Diagnostic => format!("{side} (diagnostic)"),
    }
}

/// Writes the JUnit XML to `path` (its directory is created).
pub fn write_junit(path: &Path, c: &Comparison, runs: &[TimedRun]) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, junit(c, runs))
        .with_context(|| format!("cannot write the JUnit XML to {}", path.display()))
}

/// The step summary file, when `GITHUB_STEP_SUMMARY` (passed in as `var`) names one.
pub fn step_summary_file(var: Option<OsString>) -> Option<PathBuf> {
    var.filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Appends `markdown` to the step summary file (never truncates what earlier steps wrote).
pub fn append_step_summary(path: &Path, markdown: &str) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open the step summary {}", path.display()))?;
    let mut text = String::from("\n");
    text.push_str(markdown);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    f.write_all(text.as_bytes())
        .with_context(|| format!("cannot append to the step summary {}", path.display()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::compare::tests::{from_runs, runs_of};
    use link_report::CheckName;

    /// Every element of the document, in order, as (path, attributes, text).
    type Element = (String, Vec<(String, String)>, String);

    fn parse(xml: &str) -> Vec<Element> {
        let doc = roxmltree::Document::parse(xml).expect("well-formed XML");
        doc.descendants()
            .filter(|n| n.is_element())
            .map(|n| {
                let mut path: Vec<&str> = n
                    .ancestors()
                    .filter(|a| a.is_element())
                    .map(|a| a.tag_name().name())
                    .collect();
                path.reverse();
                let attrs = n
                    .attributes()
                    .map(|a| (a.name().to_string(), a.value().to_string()))
                    .collect();
                let text = n.text().unwrap_or_default().to_string();
                (path.join("/"), attrs, text)
            })
            .collect()
    }

    fn attr<'a>(e: &'a Element, key: &str) -> &'a str {
        e.1.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no attribute {key} on {}", e.0))
    }

    #[test]
    fn junit_is_well_formed_with_skipped_and_failed_checks() {
        let mut runs = runs_of(2, |_, _| 1.0);
        // Link run 2 fails a check with markup in its detail; Mini skips one in both runs.
        let detail = "read <other>/secret & got \"it\"\nsecond line";
        let check = runs[3]
            .loaded
            .report
            .checks
            .iter_mut()
            .find(|c| c.name == CheckName::AgentFilesIsolated)
            .unwrap();
        check.outcome = Status::Failed;
        check.detail = detail.into();
        for i in [0, 2] {
            let c = &mut runs[i].loaded.report.checks[0];
            c.outcome = Status::Skipped;
            c.detail = "no <model> & no 'net'".into();
        }
        runs[3].loaded.report.outcome = link_report::Outcome {
            status: Status::Failed,
            reason: Some("check agent_files_isolated failed".into()),
        };
        let c = from_runs(&runs);
        let xml = junit(&c, &runs);
        let elements = parse(&xml);

        let suites: Vec<&Element> = elements
            .iter()
            .filter(|e| e.0 == "testsuites/testsuite")
            .collect();
        let names: Vec<&str> = suites.iter().map(|s| attr(s, "name")).collect();
        assert_eq!(names, ["Mini", "Link"]);
        let cases = |class: &str| -> Vec<&Element> {
            elements
                .iter()
                .filter(|e| e.0 == "testsuites/testsuite/testcase" && attr(e, "classname") == class)
                .collect()
        };
        let (mini, link) = (cases("runtime.mini"), cases("runtime.link"));
        // One testcase per check in the report, then the outcome and the exec counts.
        let checks = runs[0].loaded.report.checks.len();
        assert_eq!(mini.len(), checks + 2, "{xml}");
        assert_eq!(attr(suites[0], "tests"), (checks + 2).to_string());
        let link_checks = runs[1].loaded.report.checks.len();
        assert_eq!(link.len(), link_checks + 2, "{xml}");

        // The skipped check: <skipped message> with the detail intact after unescaping.
        let skipped: Vec<&Element> = elements
            .iter()
            .filter(|e| e.0.ends_with("testcase/skipped"))
            .collect();
        assert_eq!(skipped.len(), 1, "{xml}");
        assert_eq!(
            attr(skipped[0], "message"),
            "run 1: no <model> & no 'net' (2 of 2 runs)"
        );
        assert_eq!(attr(suites[0], "skipped"), "1");
        assert_eq!(attr(suites[0], "failures"), "0");

        // The failed check and the failed side: <failure>, markup escaped and recovered.
        let failures: Vec<&Element> = elements
            .iter()
            .filter(|e| e.0.ends_with("testcase/failure"))
            .collect();
        assert_eq!(failures.len(), 2, "{xml}");
        // The message is an attribute, where XML turns a line break into a space; the
        // failure's text keeps every line.
        let one_line = detail.replace('\n', " ");
        assert_eq!(attr(failures[0], "message"), format!("run 2: {one_line}"));
        assert_eq!(failures[0].2, format!("run 2: {detail}"));
        assert!(
            attr(failures[1], "message").starts_with("failed: run 2: check agent_files"),
            "{xml}"
        );
        assert_eq!(attr(suites[1], "failures"), "2");
        let root = &elements[0];
        assert_eq!(root.0, "testsuites");
        assert_eq!(attr(root, "failures"), "2");
        // The Jenkins xUnit schema allows no `skipped` count on `<testsuites>`.
        assert!(root.1.iter().all(|(k, _)| k != "skipped"), "{xml}");
        // Raw markup from a detail never reaches the file.
        assert!(
            !xml.contains("<other>") && !xml.contains("<model>"),
            "{xml}"
        );
    }

    /// Validates each XML file against the XSD with Python's `xmlschema` (pinned in
    /// `ci/requirements.txt`): `Err` names each invalid file and why. `None` when the validator
    /// is not installed.
    fn xsd_errors(xsd: &Path, files: &[PathBuf]) -> Option<Result<(), String>> {
        const SCRIPT: &str = "import sys, xmlschema\n\
            schema = xmlschema.XMLSchema(sys.argv[1])\n\
            bad = []\n\
            for f in sys.argv[2:]:\n\
            \x20   errors = list(schema.iter_errors(f))\n\
            \x20   if errors: bad.append(f'{f}: {errors[0].reason} at {errors[0].path}')\n\
            print('\\n'.join(bad))\n\
            sys.exit(1 if bad else 0)\n";
        let have = std::process::Command::new("python3")
            .args(["-c", "import xmlschema"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !have {
            return None;
        }
        let out = std::process::Command::new("python3")
            .args(["-c", SCRIPT])
            .arg(xsd)
            .args(files)
            .output()
            .expect("running python3");
        Some(verdict(&out))
    }

    /// A validator's answer: `Ok` when it exited 0, else what it printed.
    pub(crate) fn verdict(out: &std::process::Output) -> Result<(), String> {
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    #[test]
    fn junit_is_valid_against_the_jenkins_xunit_schema() {
        let xsd = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/junit-10.xsd");
        let dir = std::env::temp_dir().join(format!("xtask-junit-xsd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Passed; a failed check with markup and a skipped one; a skipped side with warnings;
        // diagnostic names.
        let passed = runs_of(2, |_, _| 1.0);
        let mut mixed = runs_of(2, |_, _| 1.0);
        mixed[3].loaded.report.checks[1].outcome = Status::Failed;
        mixed[3].loaded.report.checks[1].detail = "read <x> & \"y\"\nline two".into();
        mixed[0].loaded.report.checks[0].outcome = Status::Skipped;
        let mut skipped = from_runs(&passed);
        skipped.mini.outcome = Status::Skipped;
        skipped.mini.reason = Some("confinement unavailable: no bwrap".into());
        skipped.warnings = vec!["the machine was busy".into()];
        let mut diagnostic = from_runs(&passed);
        diagnostic.mode = link_report::Mode::Diagnostic;
        let docs = [
            junit(&from_runs(&passed), &passed),
            junit(&from_runs(&mixed), &mixed),
            junit(&skipped, &passed),
            junit(&diagnostic, &passed),
        ];
        let mut files = Vec::new();
        for (i, xml) in docs.iter().enumerate() {
            let f = dir.join(format!("{i}.xml"));
            std::fs::write(&f, xml).unwrap();
            files.push(f);
        }
        // The negative control: what the earlier writer put on the root, which Jenkins refuses.
        let bad = dir.join("bad.xml");
        std::fs::write(
            &bad,
            docs[0].replacen("<testsuites ", "<testsuites skipped=\"0\" ", 1),
        )
        .unwrap();
        let valid = xsd_errors(&xsd, &files);
        let control = xsd_errors(&xsd, std::slice::from_ref(&bad));
        std::fs::remove_dir_all(&dir).unwrap();
        let (Some(valid), Some(control)) = (valid, control) else {
            link_report::skip::tool_missing("Python's xmlschema");
            return;
        };
        valid.unwrap_or_else(|e| panic!("invalid against junit-10.xsd: {e}"));
        let why = control.expect_err("the validator must refuse `skipped` on <testsuites>");
        assert!(why.contains("skipped"), "{why}");
    }

    #[test]
    fn warnings_reach_each_suites_log_and_diagnostic_suites_have_names_of_their_own() {
        let runs = runs_of(2, |_, _| 1.0);
        let mut c = from_runs(&runs);
        c.warnings = vec![
            "the machine was busy <load 3> & more".into(),
            "second".into(),
        ];
        let elements = parse(&junit(&c, &runs));
        let logs: Vec<&Element> = elements
            .iter()
            .filter(|e| e.0 == "testsuites/testsuite/system-err")
            .collect();
        assert_eq!(logs.len(), 2);
        assert_eq!(logs[0].2, "the machine was busy <load 3> & more\nsecond");
        c.mode = link_report::Mode::Diagnostic;
        let elements = parse(&junit(&c, &runs));
        let names: Vec<&str> = elements
            .iter()
            .filter(|e| e.0 == "testsuites/testsuite")
            .map(|e| attr(e, "name"))
            .collect();
        assert_eq!(names, ["Mini (diagnostic)", "Link (diagnostic)"]);
        assert!(elements
            .iter()
            .filter(|e| e.0 == "testsuites/testsuite/testcase")
            .all(|e| attr(e, "classname").ends_with(".diagnostic")));
    }

    #[test]
    fn unavailable_exec_counts_fail_and_a_skipped_side_is_skipped() {
        let runs = runs_of(1, |_, _| 1.0);
        let mut c = from_runs(&runs);
        c.link.traced.as_mut().unwrap().available = false;
        c.link.traced.as_mut().unwrap().reason = Some("trace is empty".into());
        c.mini.outcome = Status::Skipped;
        c.mini.reason = Some("confinement unavailable".into());
        let elements = parse(&junit(&c, &runs));
        let find = |class: &str, name: &str| {
            let i = elements
                .iter()
                .position(|e| {
                    e.0.ends_with("testcase")
                        && attr(e, "classname") == class
                        && attr(e, "name") == name
                })
                .unwrap();
            elements.get(i + 1).cloned()
        };
        let exec = find("runtime.link", "exec_counts").unwrap();
        assert!(exec.0.ends_with("testcase/failure"));
        assert_eq!(
            attr(&exec, "message"),
            "exec counts unavailable: trace is empty"
        );
        let outcome = find("runtime.mini", "outcome").unwrap();
        assert!(outcome.0.ends_with("testcase/skipped"));
        assert_eq!(
            attr(&outcome, "message"),
            "skipped: confinement unavailable"
        );
    }

    #[test]
    fn step_summary_is_appended_not_overwritten() {
        assert_eq!(step_summary_file(None), None);
        assert_eq!(step_summary_file(Some("".into())), None);
        let path = std::env::temp_dir().join(format!(
            "xtask-step-summary-{}-{:?}.md",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::write(&path, "# an earlier step\n").unwrap();
        assert_eq!(
            step_summary_file(Some(path.clone().into_os_string())),
            Some(path.clone())
        );
        let c = from_runs(&runs_of(2, |_, _| 1.0));
        let md = crate::compare::markdown(&c);
        append_step_summary(&path, &md).unwrap();
        append_step_summary(&path, "tail without newline").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("# an earlier step\n\n# Runtime comparison"),
            "{text}"
        );
        assert!(text.contains(&md));
        assert!(text.ends_with("\ntail without newline\n"));
        std::fs::remove_file(&path).unwrap();
        // A missing file is created, as GitHub's runner expects.
        append_step_summary(&path, "x").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "\nx\n");
        std::fs::remove_file(&path).unwrap();
    }
}
