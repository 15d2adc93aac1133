//! Stopping and verifying: `link down` (then SIGTERM, then SIGKILL of the host's process
//! group) until every recorded host and plugin process is gone, and afterwards no descendant
//! of the runner that the run started left (orphans adopted by the subreaper are reaped and
//! named).

use super::judge;
use super::report::{Recorder, Timer};
use super::scope::Scope;
use super::startup::log_tail;
use super::text::{ms, one_line};
use crate::reaper::{self, ProcInfo, Reaped};
use crate::runtime_process::RuntimeProcess;
use link_report::{CheckName, PhaseName, ProcessIdentity};
use std::time::{Duration, Instant};

/// The `shutdown` phase (with `host_exit` within it) and the `processes_stopped` check.
pub(super) fn run(rec: &mut Recorder<'_>, host: &mut RuntimeProcess, scale: u32) {
    let limit = Duration::from_secs(60 * scale as u64);
    // A host already collected may have had its pid reused: nothing to watch then.
    let watch = match host.try_wait() {
        Ok(None) => HostExit::watch(host.host_pid(), limit),
        _ => HostExit(None),
    };
    let t = Timer::start();
    let down = host.run(&["down"], Duration::from_secs(120 * scale as u64));
    let mut problems = Vec::new();
    match &down {
        Ok(out) if out.status.success() => {}
        Ok(out) => problems.push(format!(
            "link down failed ({}): {}",
            out.status,
            one_line(&String::from_utf8_lossy(&out.stderr))
        )),
        Err(e) => problems.push(format!("link down: {e}")),
    }
    let mut status = host.wait_timeout(limit);
    if status.is_none() {
        problems.push(format!(
            "link up still running {} after link down; sent SIGTERM",
            ms(limit)
        ));
        host.terminate();
        status = host.wait_timeout(limit);
    }
    if status.is_none() {
        problems.push("link up ignored SIGTERM; killed its process group".into());
        host.kill_group();
        status = host.try_wait().ok().flatten();
    }
    let ended = Instant::now();
    let took = rec.end_phase_at(PhaseName::Shutdown, 0, t, ended);
    // The host's own exit time means something only when `link down` alone stopped it. The
    // watcher reads the clock once it is scheduled after the exit, which under load can be
    // after the runner collected the host: the exit was no later than that.
    if let (Some(exited), true) = (watch.exited(), problems.is_empty()) {
        rec.phase_until(PhaseName::HostExit, 0, t, exited.min(ended));
    }
    match status {
        Some(s) if s.success() => {}
        Some(s) => problems.push(format!("link up exited with {s}")),
        None => problems.push("link up could not be collected".into()),
    }
    let runtime: Vec<(i32, u64, String)> = rec
        .processes()
        .iter()
        .filter(|p| !p.role.starts_with("helper") && p.role != "cli")
        .map(|p| {
            (
                p.pid,
                p.start_time_ticks,
                format!("{} (pid {})", p.role, p.pid),
            )
        })
        .collect();
    reaper::wait_until(Duration::from_secs(10), || {
        runtime
            .iter()
            .all(|(pid, start, _)| !reaper::is_alive(*pid, *start))
    });
    let alive: Vec<&str> = runtime
        .iter()
        .filter(|(pid, start, _)| reaper::is_alive(*pid, *start))
        .map(|(_, _, name)| name.as_str())
        .collect();
    if !alive.is_empty() {
        problems.push(format!("still running: {}", alive.join(", ")));
    }
    if problems.is_empty() {
        rec.pass(
            CheckName::ProcessesStopped,
            format!(
                "link down stopped the runtime in {}; link up exited 0; all {} recorded host and plugin processes are gone",
                ms(took),
                runtime.len()
            ),
        );
    } else {
        let detail = format!("{}; {}", problems.join("; "), log_tail(host));
        rec.fail(CheckName::ProcessesStopped, detail);
    }
}

/// The `no_orphans` check: nothing recorded and no descendant the run started remains, and
/// every child the runner adopted is reaped, zombies included (a zombie left when the runner
/// exits goes to its parent, which in a container may never reap it); what still runs is
/// killed. Processes that were there before the run are not its own ([`Scope`]).
///
/// [`Scope`]: super::scope::Scope
pub(super) fn verify_no_orphans(rec: &mut Recorder<'_>, scale: u32) {
    let scope = rec.scope();
    let recorded: Vec<(i32, u64)> = rec
        .processes()
        .iter()
        .map(|p| (p.pid, p.start_time_ticks))
        .collect();
    reaper::wait_until(Duration::from_secs(10 * scale as u64), || {
        settled(scope, &scope.leftovers(&recorded))
    });
    let left = scope.leftovers(&recorded);
    for p in &left {
        reaper::kill_exact(p.pid, p.start_time_ticks);
    }
    if !left.is_empty() {
        reaper::wait_until(Duration::from_secs(10), || settled(scope, &left));
    }
    let unreaped = scope.unreaped();
    let reaped = adopted(scope.reaped(), rec.processes());
    let me = std::process::id() as i32;
    // The verdict is recorded; shutdown goes on either way.
    let _ = rec.judge(
        CheckName::NoOrphans,
        judge::no_orphans(recorded.len(), &reaped, &left, &unreaped, me),
    );
}

/// One reaping pass, then whether none of `procs` is alive and no zombie of the run is left:
/// the reaper collects each only after its grace, so a bare liveness check would stop early.
fn settled(scope: &Scope, procs: &[ProcInfo]) -> bool {
    reaper::global().reap_orphans();
    procs
        .iter()
        .all(|p| !reaper::is_alive(p.pid, p.start_time_ticks))
        && scope.unreaped().is_empty()
}

/// Each reaped orphan named by the program the run recorded at its pid and start time, or by
/// the kernel's (15-character) name of it when the run did not record it.
fn adopted(reaped: Vec<Reaped>, recorded: &[ProcessIdentity]) -> Vec<judge::Adopted> {
    reaped
        .into_iter()
        .map(|r| {
            let known = recorded
                .iter()
                .find(|p| (p.pid, p.start_time_ticks) == (r.pid, r.start_time_ticks));
            judge::Adopted {
                program: known.map_or(r.comm, |p| p.role.clone()),
                pid: r.pid,
                status: r.status,
            }
        })
        .collect()
}

/// A thread waiting on the host's pidfd: the moment the host exits, before anyone collects
/// it, however `link down` and the runner's own wait are scheduled.
struct HostExit(Option<std::thread::JoinHandle<Option<Instant>>>);

impl HostExit {
    /// Starts watching `pid` (a child of this runner not yet collected, so the pidfd is the
    /// host's) for up to `limit`; without a pidfd there is nothing to watch.
    fn watch(pid: i32, limit: Duration) -> HostExit {
        let Ok(Some(fd)) = link_os::process::pidfd(pid) else {
            return HostExit(None);
        };
        HostExit(Some(std::thread::spawn(move || {
            link_os::process::wait(&fd, limit).then(Instant::now)
        })))
    }

    /// When the host exited, if it did while watched.
    fn exited(self) -> Option<Instant> {
        self.0?.join().ok().flatten()
    }
}
