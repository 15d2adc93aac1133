//! What a CI pipeline step reads: `--junit FILE` (JUnit XML, one `<testsuite>` per side, one
//! `<testcase>` per check) and, where `GITHUB_STEP_SUMMARY` names a file, the comparison's
//! Markdown appended to it. The XML is written by hand; [`escape`] is all it needs.

use crate::compare::{status_word, Comparison, Side, TimedRun};
use anyhow::{Context, Result};
use link_report::{Profile, Status};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable GitHub Actions sets to the step's summary file.
pub const STEP_SUMMARY: &str = "GITHUB_STEP_SUMMARY";

/// `text` as XML character data or an attribute value: the five markup characters as
/// entities, and characters XML 1.0 cannot carry at all (controls other than tab, line feed
/// and carriage return) as U+FFFD.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Kept in attributes as references, or a parser would normalize them to spaces.
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

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
    let mut suites = String::new();
    let (mut all_tests, mut all_failures, mut all_skipped) = (0, 0, 0);
    for side in [&c.mini, &c.link] {
        let mine: Vec<&TimedRun> = runs
            .iter()
            .filter(|r| r.loaded.report.profile == side.profile)
            .collect();
        let mut cases = check_cases(&mine);
        cases.extend(side_cases(side));
        let count = |s: Status| cases.iter().filter(|k| k.status == s).count();
        let (failures, skipped) = (count(Status::Failed), count(Status::Skipped));
        all_tests += cases.len();
        all_failures += failures;
        all_skipped += skipped;
        let seconds: u128 = mine
            .iter()
            .flat_map(|r| &r.loaded.report.phases)
            .filter(|p| link_report::PhaseName::in_total(&p.name))
            .map(|p| p.duration_ns)
            .sum();
        let name = side_name(side.profile, c.mode);
        suites.push_str(&format!(
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" \
             skipped=\"{skipped}\" time=\"{:.3}\">\n",
            escape(&name),
            cases.len(),
            seconds as f64 / 1e9
        ));
        suites.push_str(&format!(
            "    <properties>\n      <property name=\"mode\" value=\"{}\"/>\n      \
             <property name=\"source\" value=\"{}\"/>\n      <property name=\"runs\" \
             value=\"{}\"/>\n    </properties>\n",
            escape(side.mode.as_str()),
            escape(&side.source),
            mine.len()
        ));
        let class = match c.mode {
            link_report::Mode::Confined => format!("runtime.{}", side.profile),
            link_report::Mode::Diagnostic => format!("runtime.{}.diagnostic", side.profile),
        };
        for k in &cases {
            let open = format!(
                "    <testcase name=\"{}\" classname=\"{}\"",
                escape(&k.name),
                escape(&class)
            );
            match k.status {
                Status::Passed => suites.push_str(&format!("{open}/>\n")),
                Status::Skipped => suites.push_str(&format!(
                    "{open}>\n      <skipped message=\"{}\"/>\n    </testcase>\n",
                    escape(&k.message)
                )),
                Status::Failed => suites.push_str(&format!(
                    "{open}>\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                    escape(&k.message),
                    escape(&k.body)
                )),
            }
        }
        // The comparison's warnings (noise, vague figures, outliers), where CI keeps a suite's
        // log.
        if !c.warnings.is_empty() {
            suites.push_str(&format!(
                "    <system-err>{}</system-err>\n",
                escape(&c.warnings.join("\n"))
            ));
        }
        suites.push_str("  </testsuite>\n");
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <testsuites name=\"cargo xtask runtime ({})\" tests=\"{all_tests}\" \
         failures=\"{all_failures}\" errors=\"0\" skipped=\"{all_skipped}\">\n{suites}</testsuites>\n",
        escape(c.mode.as_str())
    )
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
mod tests {
    use super::*;
    use crate::compare::tests::{from_runs, runs_of};
    use link_report::CheckName;

    /// A minimal XML reader: every element closed in order, attributes quoted and free of
    /// raw `<` and `&` that is not an entity, text free of raw `<`/`&`. Returns every element
    /// as (path, attributes with entities decoded, text decoded).
    type Element = (String, Vec<(String, String)>, String);

    fn unescape(s: &str) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('&') {
            out.push_str(&rest[..i]);
            let end = rest[i..].find(';').expect("an entity ends with ;") + i;
            let entity = &rest[i + 1..end];
            out.push(match entity {
                "amp" => '&',
                "lt" => '<',
                "gt" => '>',
                "quot" => '"',
                "apos" => '\'',
                e if e.starts_with('#') => char::from_u32(e[1..].parse().unwrap()).unwrap(),
                e => panic!("unknown entity &{e};"),
            });
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        out
    }

    fn parse(xml: &str) -> Vec<Element> {
        let body = xml
            .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
            .expect("an XML declaration");
        let mut stack: Vec<String> = Vec::new();
        let mut out: Vec<Element> = Vec::new();
        let mut rest = body;
        while !rest.is_empty() {
            let lt = rest.find('<').unwrap_or(rest.len());
            let text = &rest[..lt];
            assert!(!text.contains('>'), "raw > in text: {text:?}");
            if !text.trim().is_empty() {
                let last = out.iter_mut().rev().find(|e| Some(&e.0) == stack.last());
                last.expect("text inside an element")
                    .2
                    .push_str(&unescape(text));
            }
            if lt == rest.len() {
                break;
            }
            let gt = rest[lt..].find('>').expect("a tag ends with >") + lt;
            let tag = &rest[lt + 1..gt];
            rest = &rest[gt + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().expect("a closing tag has an opening one");
                assert_eq!(
                    open.rsplit('/').next().unwrap(),
                    name,
                    "closed out of order"
                );
                continue;
            }
            let (tag, self_closing) = match tag.strip_suffix('/') {
                Some(t) => (t, true),
                None => (tag, false),
            };
            let (name, mut attrs_text) = tag.split_once(' ').unwrap_or((tag, ""));
            let mut attrs = Vec::new();
            loop {
                attrs_text = attrs_text.trim_start();
                if attrs_text.is_empty() {
                    break;
                }
                let (key, after) = attrs_text.split_once("=\"").expect("attribute=\"value\"");
                let end = after.find('"').expect("a closing quote");
                let value = &after[..end];
                assert!(!value.contains('<'), "raw < in attribute {key}: {value:?}");
                assert!(!value.contains('\n'), "raw line feed in attribute {key}");
                attrs.push((key.to_string(), unescape(value)));
                attrs_text = &after[end + 1..];
            }
            let path = match stack.last() {
                Some(parent) => format!("{parent}/{name}"),
                None => name.to_string(),
            };
            out.push((path.clone(), attrs, String::new()));
            if !self_closing {
                stack.push(path);
            }
        }
        assert!(stack.is_empty(), "unclosed elements: {stack:?}");
        out
    }

    fn attr<'a>(e: &'a Element, key: &str) -> &'a str {
        e.1.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no attribute {key} on {}", e.0))
    }

    #[test]
    fn escape_covers_markup_and_controls() {
        assert_eq!(
            escape("a<b>&\"c\" 'd'\n\u{1}"),
            "a&lt;b&gt;&amp;&quot;c&quot; &apos;d&apos;&#10;\u{FFFD}"
        );
        assert_eq!(unescape(&escape("x < y & \"z\"\n")), "x < y & \"z\"\n");
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
        assert_eq!(attr(failures[0], "message"), format!("run 2: {detail}"));
        assert_eq!(failures[0].2, format!("run 2: {detail}"));
        assert!(
            attr(failures[1], "message").starts_with("failed: run 2: check agent_files"),
            "{xml}"
        );
        assert_eq!(attr(suites[1], "failures"), "2");
        let root = &elements[0];
        assert_eq!(root.0, "testsuites");
        assert_eq!(attr(root, "failures"), "2");
        assert_eq!(attr(root, "skipped"), "1");
        // Raw markup from a detail never reaches the file.
        assert!(
            !xml.contains("<other>") && !xml.contains("<model>"),
            "{xml}"
        );
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
