//! Reading a process tree from `/proc` through `procfs`.

use link_report::records::{ProcessSample, SampleRound};
use std::collections::HashMap;

/// Nanoseconds since the Unix epoch.
pub fn unix_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// The pids of the processes whose parent is `parent` now, zombies included.
pub fn children(parent: i32) -> Vec<i32> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.flatten()
        .filter_map(|p| p.stat().ok())
        .filter(|s| s.ppid == parent)
        .map(|s| s.pid)
        .collect()
}

/// The pids of every live process whose ancestry includes `root` (not `root` itself).
pub fn descendants(root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    if let Ok(all) = procfs::process::all_processes() {
        for p in all.flatten() {
            if let Ok(stat) = p.stat() {
                children.entry(stat.ppid).or_default().push(stat.pid);
            }
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
            out.push(child);
            stack.push(child);
        }
    }
    out.sort_unstable();
    out
}

/// One process's RSS, CPU time and state; `None` once it is gone.
pub fn sample_process(pid: i32) -> Option<ProcessSample> {
    let stat = procfs::process::Process::new(pid).ok()?.stat().ok()?;
    let ticks = procfs::ticks_per_second().max(1);
    Some(ProcessSample {
        pid,
        ppid: stat.ppid,
        name: stat.comm.clone(),
        rss_bytes: stat.rss * procfs::page_size(),
        cpu_ns: (stat.utime + stat.stime) * 1_000_000_000 / ticks,
        state: stat.state.to_string(),
    })
}

/// The CPU time `pid` has used so far, over all its threads, in nanoseconds: the scheduler's
/// own count (`/proc/PID/task/*/schedstat`), not utime+stime rounded to clock ticks, which is
/// too coarse for a start-up of a few milliseconds. `None` once it is gone or where the
/// kernel keeps no such count.
pub fn cpu_run_ns(pid: i32) -> Option<u64> {
    let tasks = procfs::process::Process::new(pid).ok()?.tasks().ok()?;
    let mut total = None;
    for task in tasks.flatten() {
        // A thread that ended meanwhile took its time with it.
        if let Ok(s) = task.schedstat() {
            *total.get_or_insert(0) += s.sum_exec_runtime;
        }
    }
    total
}

/// Samples `pids` (processes that vanished meanwhile are left out).
pub fn sample_round(index: u64, pids: &[i32]) -> SampleRound {
    SampleRound {
        index,
        unix_ns: unix_ns(),
        processes: pids.iter().filter_map(|&p| sample_process(p)).collect(),
    }
}

#[cfg(test)]
mod tests {
    /// CPU used by any thread counts, to the nanosecond; a process that is gone has none.
    #[test]
    fn cpu_time_counts_every_thread_and_a_gone_process_has_none() {
        let me = std::process::id() as i32;
        let before = super::cpu_run_ns(me).expect("this process's CPU time");
        // Spins until this process has used 20 ms more (however slowly a loaded machine
        // gives it the CPU), then counts while the spinning thread is still alive.
        let spin = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                let now = super::cpu_run_ns(me).expect("CPU time with the thread");
                if now >= before + 20_000_000 || std::time::Instant::now() > deadline {
                    return now;
                }
                for _ in 0..10_000 {
                    std::hint::black_box(std::time::Instant::now());
                }
            }
        });
        let during = spin.join().unwrap();
        assert!(during >= before + 20_000_000, "{before} -> {during}");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert_eq!(super::cpu_run_ns(pid), None);
    }

    #[test]
    fn samples_self_and_finds_children() {
        let me = std::process::id() as i32;
        let s = super::sample_process(me).unwrap();
        assert!(s.rss_bytes > 0);
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(super::descendants(me).contains(&(child.id() as i32)));
        assert!(super::children(me).contains(&(child.id() as i32)));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!crate::process::running(child.id() as i32));
    }
}
