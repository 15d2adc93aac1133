//! Turn latency over a long conversation (issue 11): one agent, N turns one after the other,
//! and the median turn time at the start, at the end and per tenth of the run, so a cost that
//! grows with the conversation's history shows as a trend. Figures, not assertions.
//!
//! The runtime is started the kit's one way (`RuntimeSpec`: a fresh state root, HOME isolated
//! inside it, `LNK_KEYCHAIN=off`) and stopped, its state root removed, on every way out.
//!
//! ```text
//! cargo build --locked --release --workspace --bins --examples
//! target/release/examples/soak [--profile mini|link] [--mode confined|diagnostic] [N]
//! ```

use clap::Parser;
use link_harness_conformance::runtime_process::{test_programs, RuntimeSpec};
use link_protocol::plugin::{Mode, Profile};
use serde_json::json;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(about = "Turn latency over a long conversation of one agent")]
struct Args {
    #[arg(long, default_value = "mini")]
    profile: Profile,
    #[arg(long, default_value = "confined")]
    mode: Mode,
    /// Turns (at least 20: the first and last ten are compared).
    #[arg(default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(20..))]
    turns: u32,
}

fn main() {
    let args = Args::parse();
    let programs = test_programs();
    assert!(
        programs.join("link").is_file(),
        "build first: cargo build --locked --release --workspace --bins --examples"
    );
    let rt = RuntimeSpec::new(programs, args.profile, args.mode)
        .up()
        .unwrap_or_else(|f| panic!("{f}"));
    rt.create_agent("soak");
    let socket = rt.layout().connection_socket();
    let token = rt.token().to_owned();
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut times = Vec::with_capacity(args.turns as usize);
    for i in 1..=args.turns {
        let body = json!({ "message": format!("turn {i}") });
        let started = Instant::now();
        let reply = client
            .block_on(link_protocol::http::json(
                &socket,
                "POST",
                "/v1/agents/soak/turns",
                Some(&token),
                Some(&body),
            ))
            .unwrap_or_else(|e| panic!("turn {i}: {e}"));
        times.push(started.elapsed());
        assert_eq!(reply.status, 200, "turn {i}: {}", reply.json());
    }
    print(&args, &times);
}

/// The first and last ten turns' medians (after five warm-up turns), then each tenth's.
fn print(args: &Args, times: &[Duration]) {
    let n = times.len();
    println!(
        "{} ({}), {n} turns: turns 6-15 median {:.2?}, turns {}-{n} median {:.2?}",
        args.profile.as_str(),
        args.mode.as_str(),
        median(&times[5..15]),
        n - 9,
        median(&times[n - 10..])
    );
    let tenth = (n / 10).max(1);
    for (k, part) in times.chunks(tenth).enumerate() {
        let first = k * tenth + 1;
        let last = first + part.len() - 1;
        println!("  turns {first}-{last}: median {:.2?}", median(part));
    }
}

fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}
