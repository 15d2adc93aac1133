//! What a host that died left on a state root: its plugins still running, its sandboxes, its
//! pids file, its control key and its sockets. `up` clears them before it starts, `down` when
//! no host answers; both hold the state root's lock (`state_lock`), so the host that left
//! them is dead.

use anyhow::{bail, Context, Result};
use link_os::process::start_time;
use link_protocol::layout::StateLayout;
use link_protocol::pids::PidsFile;
use std::time::Duration;

/// How long `up` waits for a previous run's surviving plugins to die once SIGKILLed.
const SURVIVOR_WAIT: Duration = Duration::from_secs(10);

/// What a host that died left on `layout`: its plugins still running (ended first, as they
/// may serve the sockets), its sandboxes, its pids file and sockets. `up` clears them before
/// it starts, `down` when no host answers; the caller holds the lock (`state_lock`).
pub fn clean_after_dead_host(layout: &StateLayout) -> Result<()> {
    kill_survivors(layout)?;
    // The dead host's key opens nothing now; `up` writes a new one anyway.
    let _ = std::fs::remove_file(layout.control_key_file());
    remove_stale_sockets(layout)
}

/// Plugins a killed host left running, from its pids file: each whose start time still
/// matches (a reused pid is never touched) is SIGKILLed, and so is every bwrap naming this
/// state root (a sandbox the host's death left behind, `link_confine::leftovers`);
/// `up` waits until all are gone. Called with the lock held, so the host that wrote the file
/// is dead.
fn kill_survivors(layout: &StateLayout) -> Result<()> {
    let path = layout.pids_file();
    let recorded = PidsFile::read(layout)
        .with_context(|| format!("reading {}; remove it if it is damaged", path.display()))?;
    let Some(recorded) = recorded else {
        return Ok(());
    };
    let me = std::process::id() as i32;
    let mut survivors: Vec<_> = recorded
        .plugins
        .iter()
        .filter(|p| p.pid > 1 && p.pid != me && start_time(p.pid) == Some(p.start_time))
        .map(|p| (p.name.clone(), p.pid, p.start_time))
        .collect();
    for (name, pid, _) in &survivors {
        link_protocol::errln!(
            "link: killing {name} (pid {pid}), left running by the previous `link up` (pid {}) on this state",
            recorded.host
        );
        if let Some(pid) = rustix::process::Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    for (pid, start) in link_confine::leftovers::kill_bwraps_of(layout.root()) {
        link_protocol::errln!(
            "link: killing bwrap (pid {pid}), a sandbox of the previous `link up` (pid {}) on this state",
            recorded.host
        );
        survivors.push(("bwrap".to_owned(), pid, start));
    }
    let deadline = std::time::Instant::now() + SURVIVOR_WAIT;
    loop {
        let alive: Vec<_> = survivors
            .iter()
            .filter(|(_, pid, start)| start_time(*pid) == Some(*start))
            .map(|(name, pid, _)| format!("{name} (pid {pid})"))
            .collect();
        if alive.is_empty() {
            break;
        }
        if std::time::Instant::now() > deadline {
            bail!(
                "a previous run's plugins survive SIGKILL for {SURVIVOR_WAIT:?}: {}; not starting a second set on this state",
                alive.join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))
}

/// Sockets left by a crashed run: nobody holds the lock, so nobody serves them.
fn remove_stale_sockets(layout: &StateLayout) -> Result<()> {
    for socket in layout.all_sockets() {
        if socket.exists() {
            link_protocol::errln!(
                "link: removing stale socket {} from a previous run",
                socket.display()
            );
            std::fs::remove_file(&socket)
                .with_context(|| format!("removing {}", socket.display()))?;
        }
    }
    Ok(())
}
