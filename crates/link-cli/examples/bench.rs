//! Benchmarks a profile on this machine: time to `ready`, warm-turn latency over the socket
//! (full Link also with one confined `run: true`), and RSS per process, each as a median of
//! repeated runs, beside the time to spawn as many `/bin/true` processes as the profile
//! starts. Figures, not assertions. The runtime is started the kit's one way
//! (`link_harness_conformance::runtime_process::RuntimeSpec`): a fresh state root per run,
//! HOME isolated inside it, `LNK_KEYCHAIN=off`.
//!
//! ```text
//! cargo build --release --workspace
//! cargo run --release -p link-cli --example bench -- mini|link [RUNS] [TURNS]
//! ```

use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::runtime_process::{RuntimeProcess, RuntimeSpec};
use link_protocol::plugin::{Mode, Profile};
use std::process::Command;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let profile = args.next().unwrap_or_else(|| "mini".into());
    assert!(
        profile == "mini" || profile == "link",
        "PROFILE is mini or link"
    );
    let runs: usize = args
        .next()
        .map_or(15, |a| a.parse().expect("RUNS is a number"));
    let turns: usize = args
        .next()
        .map_or(200, |a| a.parse().expect("TURNS is a number"));
    // The examples live in `<profile>/examples`, as a test's executable in `<profile>/deps`.
    let programs = link_harness_conformance::runtime_process::test_programs();
    assert!(
        programs.join("link").is_file(),
        "build first: cargo build --release --workspace"
    );
    let spec = RuntimeSpec::new(
        programs,
        profile.parse::<Profile>().unwrap(),
        Mode::Confined,
    );

    let mut ready = Vec::new();
    let mut turn = Vec::new();
    let mut run_turn = Vec::new();
    let mut rss: Vec<(String, u64)> = Vec::new();
    for run in 0..runs {
        let root = StateRoot::create().unwrap_or_else(|e| panic!("{e}"));
        let start = Instant::now();
        let mut rt = spec
            .clone()
            .up_in(root.path())
            .unwrap_or_else(|f| panic!("{f}"));
        ready.push(start.elapsed());
        if run == 0 {
            turn = warm_turns(&rt, turns, "hello");
            if profile == "link" {
                run_turn = warm_turns(&rt, turns / 4, "run: true");
            }
            rss = plugin_rss(&rt);
        }
        rt.down();
    }
    let processes = rss.len();
    let spawn = (0..runs).map(|_| spawn_true(processes)).collect::<Vec<_>>();

    let (ready, spawn) = (median(&mut ready), median(&mut spawn.clone()));
    println!("profile {profile}: runs: {runs}, warm turns: {turns}");
    println!("ready ({processes} processes):          median {ready:?}");
    println!("spawn+wait {processes} x /bin/true:       median {spawn:?}");
    println!(
        "ratio ready / spawn:             {:.1}x",
        ready.as_secs_f64() / spawn.as_secs_f64()
    );
    println!(
        "warm turn over the socket:       median {:?}, p90 {:?}",
        median(&mut turn),
        percentile(&mut turn, 0.9)
    );
    if !run_turn.is_empty() {
        println!(
            "warm turn with `run: true`:      median {:?}, p90 {:?}",
            median(&mut run_turn),
            percentile(&mut run_turn, 0.9)
        );
    }
    let total: u64 = rss.iter().map(|(_, b)| b).sum();
    for (name, bytes) in &rss {
        println!("rss {name:<24} {:.2} MiB", *bytes as f64 / 1048576.0);
    }
    println!(
        "rss total                       {:.2} MiB",
        total as f64 / 1048576.0
    );
}

fn warm_turns(rt: &RuntimeProcess, turns: usize, message: &str) -> Vec<Duration> {
    let token = rt.create_token();
    let socket = rt.layout().connection_socket();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let create = serde_json::json!({"name": "bench"});
        link_protocol::http::json(&socket, "POST", "/v1/agents", Some(&token), Some(&create))
            .await
            .unwrap();
        let body = serde_json::json!({"message": message});
        let mut times = Vec::new();
        for i in 0..turns + 5 {
            let t = Instant::now();
            let r = link_protocol::http::json(
                &socket,
                "POST",
                "/v1/agents/bench/turns",
                Some(&token),
                Some(&body),
            )
            .await
            .unwrap();
            assert_eq!(r.status, 200, "{:?}", r.json());
            if i >= 5 {
                times.push(t.elapsed());
            }
        }
        times
    })
}

fn plugin_rss(rt: &RuntimeProcess) -> Vec<(String, u64)> {
    let mut all = vec![("link (host)".to_owned(), rt.host_pid())];
    all.extend(rt.plugin_pids());
    all.into_iter()
        .map(|(name, pid)| {
            let s = link_os::sample::sample_process(pid).unwrap();
            (name, s.rss_bytes)
        })
        .collect()
}

fn spawn_true(n: usize) -> Duration {
    let t = Instant::now();
    for _ in 0..n {
        Command::new("/bin/true").status().unwrap();
    }
    t.elapsed()
}

fn median(v: &mut [Duration]) -> Duration {
    percentile(v, 0.5)
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}
