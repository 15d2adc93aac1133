//! `non_reaping_init PROGRAM [ARGS...]`: stands in for a container's main process that never
//! reaps, for `tests/runner.rs`.
//!
//! It makes itself a child subreaper, so whatever PROGRAM's process tree leaves behind when it
//! exits is re-parented here, as it would be to such a PID 1; it starts PROGRAM and waits for
//! that one pid only. Once PROGRAM exited it prints, one line each on stdout, every child it
//! was left with (`left: pid <pid> (<comm>) state <state>`), then kills and reaps them so the
//! test leaves nothing behind, and exits with PROGRAM's exit code (1 if it had none).

use rustix::process::getpid;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// How long processes PROGRAM left are given to finish exiting before they are listed: a
/// process killed just before PROGRAM exited may still be on its way to being a zombie.
const SETTLE: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: non_reaping_init PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    if let Err(e) = link_os::reaper::become_subreaper() {
        eprintln!("non_reaping_init: cannot become a child subreaper: {e}");
        return ExitCode::from(2);
    }
    let status = match Command::new(program).args(rest).status() {
        Ok(status) => status,
        Err(e) => {
            eprintln!("non_reaping_init: cannot start {program}: {e}");
            return ExitCode::from(2);
        }
    };
    let left = settled_children();
    for (pid, comm, state) in &left {
        println!("left: pid {pid} ({comm}) state {state}");
    }
    clean_up(&left);
    ExitCode::from(status.code().map_or(1, |c| c as u8))
}

/// (pid, comm, state) of every child of this process, once none is still running or
/// [`SETTLE`] passed.
fn settled_children() -> Vec<(i32, String, char)> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let children = children();
        let running = children.iter().any(|(_, _, state)| *state != 'Z');
        if !running || Instant::now() >= deadline {
            return children;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn children() -> Vec<(i32, String, char)> {
    let me = getpid().as_raw_nonzero().get();
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.flatten()
        .filter_map(|p| p.stat().ok())
        .filter(|s| s.ppid == me)
        .map(|s| (s.pid, s.comm, s.state))
        .collect()
}

/// Kills and reaps what was listed: the report is made, and the test must not leak them.
fn clean_up(left: &[(i32, String, char)]) {
    for (pid, _, _) in left {
        let Some(pid) = rustix::process::Pid::from_raw(*pid) else {
            continue;
        };
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
    }
}
