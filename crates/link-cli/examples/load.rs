//! Throughput under load: CLIENTS clients, each sending turns to an agent of its own, as
//! fast as the runtime answers. Mini's plain turn is the baseline; full Link's plain turn,
//! `write f.txt: x` (the file tool) and `run: true` (a confined command) are each divided by
//! it. Both runtimes stay up, confined, and take turns: every round times each of the four
//! for SECS seconds, in an order that changes from round to round, so a slow moment of the
//! machine falls on all of them alike; each round gives one ratio per kind, and the ratios of
//! the rounds give a geometric mean with a 95% interval (Student's t on the logarithms).
//! It also prints where a turn's CPU time went in the last round: each process's
//! milliseconds per turn (the sandbox plugin's with the commands it reaped). Figures, not
//! assertions; a failed turn is printed, and its round dropped.
//!
//! ```text
//! cargo build --release --workspace --bins --examples
//! target/release/examples/load [CLIENTS,...] [ROUNDS] [SECS]     # default 8,32 6 3
//! ```

use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::runtime_process::{RuntimeProcess, RuntimeSpec};
use link_protocol::plugin::{Mode, Profile};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What one sample sends, to which runtime.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    MiniPlain,
    LinkPlain,
    LinkWrite,
    LinkRun,
}

const KINDS: [Kind; 4] = [
    Kind::MiniPlain,
    Kind::LinkPlain,
    Kind::LinkWrite,
    Kind::LinkRun,
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::MiniPlain => "Mini plain",
            Kind::LinkPlain => "Link plain",
            Kind::LinkWrite => "Link write",
            Kind::LinkRun => "Link run: true",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Kind::MiniPlain | Kind::LinkPlain => "hello",
            Kind::LinkWrite => "write f.txt: x",
            Kind::LinkRun => "run: true",
        }
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
    let mut args = std::env::args().skip(1);
    let clients: Vec<usize> = args
        .next()
        .unwrap_or_else(|| "8,32".into())
        .split(',')
        .map(|c| {
            c.parse()
                .expect("CLIENTS is a comma-separated list of numbers")
        })
        .collect();
    let rounds: usize = args
        .next()
        .map_or(6, |a| a.parse().expect("ROUNDS is a number"));
    let secs: f64 = args
        .next()
        .map_or(3.0, |a| a.parse().expect("SECS is a number"));
    assert!(rounds >= 2, "ROUNDS must be at least 2 for an interval");
    // The examples live in `<profile>/examples`, as a test's executable in `<profile>/deps`.
    let programs = link_harness_conformance::runtime_process::test_programs();
    assert!(
        programs.join("link").is_file(),
        "build first: cargo build --release --workspace --bins --examples"
    );
    let most = *clients.iter().max().expect("at least one client count");
    let (mini_root, link_root) = (StateRoot::create().unwrap(), StateRoot::create().unwrap());
    let up = |profile: Profile, root: &StateRoot| {
        RuntimeSpec::new(programs.clone(), profile, Mode::Confined)
            .up_in(root.path())
            .unwrap_or_else(|f| panic!("{f}"))
    };
    let (mut mini, mut link) = (up(Profile::Mini, &mini_root), up(Profile::Link, &link_root));
    let (mini_target, link_target) = (target(&mini, most), target(&link, most));
    let window = Duration::from_secs_f64(secs);
    println!("load: clients {clients:?}, {rounds} rounds of {secs} s per kind, confined");
    for &c in &clients {
        // A short unmeasured sample of each first: caches, connections, the agents' logs.
        for kind in KINDS {
            let _ = sample(pick(kind, &mini_target, &link_target), kind, c, window / 3);
        }
        let mut throughput: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
        let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
        let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); KINDS.len()];
        for round in 0..rounds {
            let mut tp = [0.0; KINDS.len()];
            let mut failed = false;
            for i in order(round) {
                let kind = KINDS[i];
                match sample(pick(kind, &mini_target, &link_target), kind, c, window) {
                    Ok(s) => {
                        tp[i] = s.per_sec;
                        cpu[i] = s.cpu_ms;
                    }
                    Err(e) => {
                        println!("  round {round}: {} failed: {e}", kind.name());
                        failed = true;
                    }
                }
            }
            if failed {
                continue;
            }
            for i in 0..KINDS.len() {
                throughput[i].push(tp[i]);
                ratios[i].push(tp[i] / tp[0]);
            }
        }
        print_table(c, &throughput, &ratios);
        print_cpu(&cpu, &mini_target, &link_target);
    }
    mini.down();
    link.down();
}

fn pick<'a>(kind: Kind, mini: &'a Target, link: &'a Target) -> &'a Target {
    if kind == Kind::MiniPlain {
        mini
    } else {
        link
    }
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

/// Turns per second that `clients` clients got from `to` with `kind`'s message within
/// `window`, each on its own agent, one turn after the other. Turns in flight at the end
/// are finished but not counted.
fn sample(to: &Target, kind: Kind, clients: usize, window: Duration) -> Result<Sample, String> {
    let before = to.cpu();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let end = Instant::now() + window;
    let body = json!({ "message": kind.message() });
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
    let turns: usize = done
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?
        .iter()
        .sum();
    let ticks = procfs::ticks_per_second() as f64;
    let per_turn = |after: u64, before: u64| {
        after.saturating_sub(before) as f64 * 1000.0 / ticks / turns.max(1) as f64
    };
    let cpu_ms = to
        .cpu()
        .into_iter()
        .zip(before)
        .map(|(a, b)| per_turn(a, b))
        .collect();
    Ok(Sample {
        per_sec: turns as f64 / window.as_secs_f64(),
        cpu_ms,
    })
}

/// One sample: turns per second, and each process's CPU milliseconds per turn (the turns in
/// flight at the window's end count in the time, not in the turns: a slight overstatement).
struct Sample {
    per_sec: f64,
    cpu_ms: Vec<f64>,
}

fn print_table(clients: usize, throughput: &[Vec<f64>], ratios: &[Vec<f64>]) {
    let n = ratios[0].len();
    println!("\n{clients} clients ({n} rounds without a failure):");
    println!(
        "  {:<16} {:>12}   {:<28}",
        "kind", "turns/s", "÷ Mini plain (95% interval)"
    );
    for (i, kind) in KINDS.iter().enumerate() {
        let median = median(&throughput[i]);
        let ratio = match geometric_interval(&ratios[i]) {
            _ if i == 0 => "1 (baseline)".to_owned(),
            Some((mean, lo, hi)) => format!("{mean:.3} [{lo:.3}–{hi:.3}]"),
            None => "no interval (fewer than 2 rounds)".to_owned(),
        };
        println!("  {:<16} {:>12.1}   {ratio}", kind.name(), median);
    }
}

/// Where a turn's CPU time went in the last round: milliseconds per turn, per process.
fn print_cpu(cpu: &[Vec<f64>], mini: &Target, link: &Target) {
    println!("  CPU ms per turn, last round:");
    for (i, kind) in KINDS.iter().enumerate() {
        let to = pick(*kind, mini, link);
        let total: f64 = cpu[i].iter().sum();
        let parts: Vec<String> = to
            .processes
            .iter()
            .zip(&cpu[i])
            .filter(|(_, ms)| **ms >= 0.05)
            .map(|((name, _), ms)| format!("{} {ms:.2}", name.trim_start_matches("link-plugin-")))
            .collect();
        println!("  {:<16} {total:>6.2}: {}", kind.name(), parts.join(", "));
    }
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The geometric mean of `ratios` with its 95% interval: Student's t on the logarithms.
fn geometric_interval(ratios: &[f64]) -> Option<(f64, f64, f64)> {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let n = ratios.len();
    if n < 2 {
        return None;
    }
    let logs: Vec<f64> = ratios.iter().map(|r| r.ln()).collect();
    let mean = logs.iter().sum::<f64>() / n as f64;
    let var = logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let t = StudentsT::new(0.0, 1.0, (n - 1) as f64)
        .ok()?
        .inverse_cdf(0.975);
    let half = t * (var / n as f64).sqrt();
    Some((mean.exp(), (mean - half).exp(), (mean + half).exp()))
}
