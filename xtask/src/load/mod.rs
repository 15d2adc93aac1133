//! `cargo xtask load`: throughput under load (issue 43). Runs the measuring program
//! (`target/release/examples/load`, `crates/link-cli/examples/load.rs`), which starts a
//! confined Mini and a confined full Link side by side and, in interleaved rounds whose order
//! rotates, counts per second CLIENTS clients' plain turns on Mini, plain, `write f.txt: x`
//! and `run: true` turns on full Link, and CLIENTS parallel loops of a bare bubblewrap run
//! (the floor of a command confined in a fresh sandbox). It reads the program's typed samples
//! (`link_report::load`) and writes `target/load.{json,md}`: per client count each kind's
//! median turns per second, its ratio to Mini's plain turn of the same round (geometric mean
//! with a 95% Student t interval, [`crate::paired`]), CPU milliseconds per turn per process,
//! and issue 43's goals (`write` ≥ 0.5×, `run` ≥ 0.3×) said met, not met or undecided by the
//! whole interval, the run goal beside the floor's ratio. No figure is a gate.
//!
//! One file each: `mod.rs` the command (its checks, the program run, the files written);
//! `report.rs` the result, its figures from the samples and its Markdown.

pub mod report;

use crate::outputs::{self, Workspace};
use crate::{bench_sandbox, exit, source, state};
use anyhow::{bail, Context, Result};
use link_report::load::LoadSamples;
use report::{markdown, LoadReport};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub use report::{FILE_JSON, FILE_MD};

/// Client counts unless `--clients` says otherwise.
pub const DEFAULT_CLIENTS: &str = "8,32";
/// Rounds per client count unless `--rounds` says otherwise.
pub const DEFAULT_ROUNDS: u32 = 6;
/// Seconds per kind per round unless `--secs` says otherwise.
pub const DEFAULT_SECS: f64 = 3.0;

/// What `load` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    pub clients: Vec<u32>,
    pub rounds: u32,
    pub secs: f64,
    /// Measure programs older than their sources or built with test hooks (said in the
    /// result's warnings).
    pub allow_stale: bool,
}

/// `cargo xtask load`: removes the earlier result, checks, runs, writes `target/load.json`
/// and `.md` and prints the Markdown. Exit 0 measured, 3 skipped (the JSON says why); an
/// error is exit 1 and leaves no result.
pub fn main(ws: &Workspace, opts: &Options) -> Result<u8> {
    remove_old(&ws.target)?;
    let fixture = state::from_env()?;
    let source = source::source(&ws.root)?;
    let started = Instant::now();
    let mut load = LoadReport::empty(opts, &source, &command(ws, opts, Path::new("FILE")));
    let skip = match bench_sandbox::no_bwrap() {
        Some(reason) => Some(reason),
        None => {
            let stale = programs_ready(ws, opts.allow_stale)?;
            if !stale.is_empty() {
                load.warnings.push(outputs::allow_stale_caveat(stale.len()));
            }
            bench_sandbox::unavailable(ws)?
        }
    };
    match skip {
        Some(reason) => {
            link_protocol::errln!("xtask: load: SKIPPED, nothing measured: {reason}");
            load.reason = Some(reason);
        }
        None => {
            load.programs = outputs::hash_programs(&ws.release())?;
            let samples = run(ws, opts, &fixture)?;
            load.measured(samples)?;
        }
    }
    load.elapsed_s = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    let paths = write(&ws.target, &load)?;
    link_protocol::out!("{}", markdown(&load));
    for p in paths {
        link_protocol::errln!("xtask: wrote {}", ws.show(&p).display());
    }
    Ok(match load.status {
        bench_sandbox::BenchStatus::Measured => exit::PASSED,
        bench_sandbox::BenchStatus::Skipped => exit::UNCONFINABLE,
        bench_sandbox::BenchStatus::Failed => exit::FAILED,
    })
}

/// Removes `load.json` and `load.md` left in `target` by an earlier run, so that a run that
/// fails never leaves one that looks like its own.
pub fn remove_old(target: &Path) -> Result<()> {
    for name in [FILE_JSON, FILE_MD] {
        let old = target.join(name);
        match std::fs::remove_file(&old) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot remove the old {}", old.display()))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The host, every plugin and the measuring program, ready to measure.
fn programs_ready(ws: &Workspace, allow_stale: bool) -> Result<Vec<String>> {
    let mut needed = outputs::program_outputs();
    needed.push(PathBuf::from(outputs::LOAD));
    let builds = [
        outputs::build_commands().swap_remove(0),
        outputs::load_build_command(),
    ];
    outputs::ready(ws, allow_stale, &needed, &builds)
}

/// The measuring program's command line, writing its samples to `out`.
fn command(ws: &Workspace, opts: &Options, out: &Path) -> Vec<String> {
    let clients: Vec<String> = opts.clients.iter().map(u32::to_string).collect();
    vec![
        ws.show(&ws.release().join(outputs::LOAD))
            .display()
            .to_string(),
        "--clients".into(),
        clients.join(","),
        "--rounds".into(),
        opts.rounds.to_string(),
        "--secs".into(),
        opts.secs.to_string(),
        "--out".into(),
        out.display().to_string(),
    ]
}

/// Runs the measuring program (its progress on this stderr) and reads its samples.
fn run(ws: &Workspace, opts: &Options, fixture: &Path) -> Result<LoadSamples> {
    let out = ws
        .target
        .join(format!(".load-samples-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let args = command(ws, opts, &out);
    link_protocol::errln!("xtask: load: $ {}", args.join(" "));
    let status = Command::new(ws.release().join(outputs::LOAD))
        .args(&args[1..])
        .env("LNK_TEST_STATE_DIR", fixture)
        .current_dir(&ws.root)
        .status()
        .with_context(|| format!("cannot run {}", args[0]))?;
    let text = std::fs::read_to_string(&out);
    let _ = std::fs::remove_file(&out);
    if !status.success() {
        bail!(
            "the measuring program failed ({status}); its output above says why, nothing was \
             measured"
        );
    }
    let text = text.with_context(|| format!("the measuring program wrote no {}", out.display()))?;
    serde_json::from_str(&text).context("the measuring program's samples do not read")
}

/// `load.json` (pretty) and `load.md` under `target`; their paths.
pub fn write(target: &Path, load: &LoadReport) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(target)
        .with_context(|| format!("cannot create {}", target.display()))?;
    let json = target.join(FILE_JSON);
    let text = serde_json::to_string_pretty(load)? + "\n";
    std::fs::write(&json, text).with_context(|| format!("cannot write {}", json.display()))?;
    let md = target.join(FILE_MD);
    std::fs::write(&md, markdown(load))
        .with_context(|| format!("cannot write {}", md.display()))?;
    Ok(vec![json, md])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_earlier_result_is_removed_before_a_run() {
        let dir = std::env::temp_dir().join(format!("xtask-load-old-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in [FILE_JSON, FILE_MD, "other.json"] {
            std::fs::write(dir.join(name), "old").unwrap();
        }
        remove_old(&dir).unwrap();
        assert!(!dir.join(FILE_JSON).exists() && !dir.join(FILE_MD).exists());
        assert!(dir.join("other.json").exists(), "only the load's own files");
        // Nothing to remove is no error.
        remove_old(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
