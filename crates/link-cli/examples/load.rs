//! Throughput under load, the measuring program of `cargo xtask load`: CLIENTS clients, each
//! sending turns to an agent of its own, as fast as the runtime answers. Mini's plain turn is
//! the baseline; full Link's plain turn, `write f.txt: x` (the file tool) and `run: true` (a
//! confined command) are each divided by it, and so is the floor: CLIENTS parallel loops of a
//! bare bubblewrap run (`link_report::load::BARE_BWRAP`) per command, what `run: true` cannot
//! beat with a fresh sandbox per command. Both runtimes stay up, confined, and take turns:
//! every round times each of the five for SECS seconds, in an order that changes from round to
//! round, so a slow moment of the machine falls on all of them alike. It also reads where a
//! turn's CPU time went in the last round: each process's milliseconds per turn (the sandbox
//! plugin's with the commands it reaped). A failed sample is recorded with its error; the
//! xtask drops its round.
//!
//! It writes the samples (`link_report::load::LoadSamples`, JSON) to `--out` (or stdout) and
//! its progress to stderr; `cargo xtask load` computes the ratios, intervals and goals.
//!
//! ```text
//! cargo build --locked --release -p link-cli --example load
//! target/release/examples/load [--clients 8,32] [--rounds 6] [--secs 3] [--out FILE]
//! ```

use clap::Parser;
use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::runtime_process::{RuntimeProcess, RuntimeSpec};
use link_protocol::plugin::{Mode, Profile};
use link_report::load::{
    CountSamples, KindCpu, KindFailure, KindRate, LoadKind, LoadSamples, ProcessCpu, RoundSamples,
    BARE_BWRAP, SAMPLES_VERSION,
};
use serde_json::json;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(about = "Throughput under load of Mini and full Link, confined, with the bwrap floor")]
struct Args {
    /// Client counts, each measured in its own rounds.
    #[arg(long, value_delimiter = ',', default_value = "8,32",
          value_parser = clap::value_parser!(u32).range(1..))]
    clients: Vec<u32>,
    /// Rounds per client count (at least 2, for an interval).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(2..))]
    rounds: u32,
    /// Seconds each kind runs in each round.
    #[arg(long, default_value_t = 3.0)]
    secs: f64,
    /// Where to write the samples (JSON); `-` is stdout.
    #[arg(long, default_value = "-")]
    out: PathBuf,
}

const KINDS: [LoadKind; 5] = LoadKind::ALL;

/// The message a kind's turn sends (none for the floor).
fn message(kind: LoadKind) -> &'static str {
    match kind {
        LoadKind::MiniPlain | LoadKind::LinkPlain => "hello",
        LoadKind::LinkWrite => "write f.txt: x",
        LoadKind::LinkRun => "run: true",
        LoadKind::BareBwrap => "",
    }
}

/// A runtime under load: its socket, token and agents `c0`, `c1`, ..., and its processes
/// (the host and each plugin), whose CPU time each sample reads.
struct Target {
    socket: PathBuf,
    token: String,
    processes: Vec<(String, i32)>,
}

impl Target {
    /// Each process's CPU time so far, with that of the children it has reaped (the
    /// sandbox plugin's commands), in clock ticks.
    fn cpu(&self) -> Vec<u64> {
        self.processes
            .iter()
            .map(|(_, pid)| {
                procfs::process::Process::new(*pid)
                    .and_then(|p| p.stat())
                    .map(|s| s.utime + s.stime + s.cutime.max(0) as u64 + s.cstime.max(0) as u64)
                    .unwrap_or(0)
            })
            .collect()
    }
}

fn main() {
    let args = Args::parse();
    let Args {
        clients,
        rounds,
        secs,
        out,
    } = args;
    assert!(
        secs.is_finite() && secs > 0.0,
        "--secs must be a positive number of seconds"
    );
    // The examples live in `<profile>/examples`, as a test's executable in `<profile>/deps`.
    let programs = link_harness_conformance::runtime_process::test_programs();
    assert!(
        programs.join("link").is_file(),
        "build first: cargo build --locked --release --workspace --bins --examples"
    );
    let most = *clients.iter().max().expect("at least one client count") as usize;
    let (mini_root, link_root) = (StateRoot::create().unwrap(), StateRoot::create().unwrap());
    let up = |profile: Profile, root: &StateRoot| {
        RuntimeSpec::new(programs.clone(), profile, Mode::Confined)
            .up_in(root.path())
            .unwrap_or_else(|f| panic!("{f}"))
    };
    let (mut mini, mut link) = (up(Profile::Mini, &mini_root), up(Profile::Link, &link_root));
    let (mini_target, link_target) = (target(&mini, most), target(&link, most));
    let window = Duration::from_secs_f64(secs);
    eprintln!("load: clients {clients:?}, {rounds} rounds of {secs} s per kind, confined");
    let mut counts = Vec::new();
    for &c in &clients {
        let n = c as usize;
        // A short unmeasured sample of each first: caches, connections, the agents' logs.
        for kind in KINDS {
            let _ = sample(kind, &mini_target, &link_target, n, window / 3);
        }
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
        let mut samples = Vec::new();
        for round in 0..rounds as usize {
            let order = order(round);
            let mut r = RoundSamples {
                round: round as u32,
                order: order.iter().map(|&i| KINDS[i]).collect(),
                rates: Vec::new(),
                failed: Vec::new(),
            };
            for i in order {
                let kind = KINDS[i];
                match sample(kind, &mini_target, &link_target, n, window) {
                    Ok(s) => {
                        r.rates.push(KindRate {
                            kind,
                            turns_per_s: s.per_sec,
                        });
                        cpu[i] = s.cpu_ms;
                    }
                    Err(error) => {
                        eprintln!("  round {round}: {} failed: {error}", kind.label());
                        r.failed.push(KindFailure { kind, error });
                    }
                }
            }
            let rates: Vec<String> = r
                .rates
                .iter()
                .map(|k| format!("{} {:.1}/s", k.kind, k.turns_per_s))
                .collect();
            eprintln!(
                "load: {c} clients, round {}/{rounds}: {}",
                round + 1,
                rates.join(", ")
            );
            samples.push(r);
        }
        let cpu = KINDS
            .iter()
            .zip(&cpu)
            .map(|(&kind, ms)| KindCpu {
                kind,
                processes: process_names(kind, &mini_target, &link_target)
                    .into_iter()
                    .zip(ms)
                    .map(|(process, &ms_per_turn)| ProcessCpu {
                        process,
                        ms_per_turn,
                    })
                    .collect(),
            })
            .collect();
        counts.push(CountSamples {
            clients: c,
            rounds: samples,
            cpu,
        });
    }
    mini.down();
    link.down();
    let samples = LoadSamples {
        samples_version: SAMPLES_VERSION,
        rounds,
        secs,
        counts,
    };
    let text = serde_json::to_string_pretty(&samples).expect("the samples serialize") + "\n";
    if out.as_os_str() == "-" {
        print!("{text}");
    } else {
        std::fs::write(&out, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
    }
}

/// The processes whose CPU time a kind's sample reads, by name.
fn process_names(kind: LoadKind, mini: &Target, link: &Target) -> Vec<String> {
    match kind {
        LoadKind::BareBwrap => FLOOR_PROCESSES.map(String::from).to_vec(),
        LoadKind::MiniPlain => names(mini),
        _ => names(link),
    }
}

fn names(t: &Target) -> Vec<String> {
    t.processes.iter().map(|(n, _)| n.clone()).collect()
}

/// The order of the kinds in round `round`: rotated each round, reversed every other one,
/// so each kind comes first, last, before and after each other one alike.
fn order(round: usize) -> Vec<usize> {
    let mut o: Vec<usize> = (0..KINDS.len())
        .map(|i| (i + round) % KINDS.len())
        .collect();
    if round % 2 == 1 {
        o.reverse();
    }
    o
}

/// The runtime's socket and token, with `agents` agents made.
fn target(rt: &RuntimeProcess, agents: usize) -> Target {
    for n in 0..agents {
        rt.create_agent(&format!("c{n}"));
    }
    let mut processes = vec![("link (host)".to_owned(), rt.host_pid())];
    processes.extend(rt.plugin_pids());
    Target {
        socket: rt.layout().connection_socket(),
        token: rt.token().to_owned(),
        processes,
    }
}

/// One sample of `kind` with `clients` clients for `window`.
fn sample(
    kind: LoadKind,
    mini: &Target,
    link: &Target,
    clients: usize,
    window: Duration,
) -> Result<Sample, String> {
    match kind {
        LoadKind::BareBwrap => floor(clients, window),
        LoadKind::MiniPlain => turns(mini, kind, clients, window),
        _ => turns(link, kind, clients, window),
    }
}

/// Turns per second that `clients` clients got from `to` with `kind`'s message within
/// `window`, each on its own agent, one turn after the other. Turns in flight at the end
/// are finished but not counted.
fn turns(to: &Target, kind: LoadKind, clients: usize, window: Duration) -> Result<Sample, String> {
    let before = to.cpu();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let end = Instant::now() + window;
    let body = json!({ "message": message(kind) });
    let done: Vec<Result<usize, String>> = rt.block_on(async {
        let tasks: Vec<_> = (0..clients)
            .map(|n| {
                let (socket, token, body) = (to.socket.clone(), to.token.clone(), body.clone());
                tokio::spawn(async move {
                    let path = format!("/v1/agents/c{n}/turns");
                    let mut turns = 0;
                    while Instant::now() < end {
                        let r = link_protocol::http::json(
                            &socket,
                            "POST",
                            &path,
                            Some(&token),
                            Some(&body),
                        )
                        .await
                        .map_err(|e| e.to_string())?;
                        if r.status != 200 {
                            return Err(format!("HTTP {}: {}", r.status, r.json()));
                        }
                        if Instant::now() <= end {
                            turns += 1;
                        }
                    }
                    Ok(turns)
                })
            })
            .collect();
        let mut done = Vec::new();
        for t in tasks {
            done.push(t.await.expect("a client task"));
        }
        done
    });
    let turns = total(done)?;
    let cpu_ms = to
        .cpu()
        .into_iter()
        .zip(before)
        .map(|(a, b)| per_turn(a, b, turns))
        .collect();
    Ok(Sample {
        per_sec: turns as f64 / window.as_secs_f64(),
        cpu_ms,
    })
}

/// The floor's processes: the bare bwrap runs (reaped by this program) and this program's
/// own spawning of them.
const FLOOR_PROCESSES: [&str; 2] = ["bwrap (reaped)", "load (spawning)"];

/// Bare bubblewrap runs per second that `clients` parallel loops got within `window`, each
/// loop one run after the other, counted like turns. Runs in flight at the end are finished
/// but not counted.
fn floor(clients: usize, window: Duration) -> Result<Sample, String> {
    let own = || {
        procfs::process::Process::myself()
            .and_then(|p| p.stat())
            .map(|s| {
                (
                    s.cutime.max(0) as u64 + s.cstime.max(0) as u64,
                    s.utime + s.stime,
                )
            })
            .unwrap_or((0, 0))
    };
    let before = own();
    let end = Instant::now() + window;
    let done: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let loops: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(move || {
                    let mut runs = 0;
                    while Instant::now() < end {
                        let out = Command::new("bwrap")
                            .args(BARE_BWRAP)
                            .stdin(Stdio::null())
                            .stdout(Stdio::null())
                            .output()
                            .map_err(|e| format!("cannot run bwrap: {e}"))?;
                        if !out.status.success() {
                            return Err(format!(
                                "bwrap {}: {}",
                                out.status,
                                String::from_utf8_lossy(&out.stderr).trim()
                            ));
                        }
                        if Instant::now() <= end {
                            runs += 1;
                        }
                    }
                    Ok(runs)
                })
            })
            .collect();
        loops
            .into_iter()
            .map(|l| l.join().expect("a floor loop"))
            .collect()
    });
    let runs = total(done)?;
    let after = own();
    Ok(Sample {
        per_sec: runs as f64 / window.as_secs_f64(),
        cpu_ms: vec![
            per_turn(after.0, before.0, runs),
            per_turn(after.1, before.1, runs),
        ],
    })
}

/// Every client's count, or the first client's error.
fn total(done: Vec<Result<usize, String>>) -> Result<usize, String> {
    Ok(done
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?
        .iter()
        .sum())
}

/// CPU milliseconds per turn from clock ticks before and after.
fn per_turn(after: u64, before: u64, turns: usize) -> f64 {
    let ticks = procfs::ticks_per_second() as f64;
    after.saturating_sub(before) as f64 * 1000.0 / ticks / turns.max(1) as f64
}

/// One sample: turns per second, and each process's CPU milliseconds per turn (the turns in
/// flight at the window's end count in the time, not in the turns: a slight overstatement).
struct Sample {
    per_sec: f64,
    cpu_ms: Vec<f64>,
}
