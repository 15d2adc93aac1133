//! Turns: how the runtimes of one process keep out of a scenario run's way.
//!
//! A scenario run records every descendant of the runner as a process of the run, fails its
//! `no_orphans` check on any that remain and kills them, and makes the process a child
//! subreaper whose reaper collects zombie children. Nothing else of the kit may have a runtime
//! up meanwhile. So a [`run_scenario`](crate::run_scenario) holds the [`exclusive`] turn from
//! before its probes until after its orphan check, and every [`RuntimeProcess`] holds a
//! [`shared`] turn from before its host is spawned until after it is stopped and reaped.
//! Runtimes share their turns with each other (tests that each start one still run in
//! parallel, and a test may hold two); a scenario waits until none is up, and a runtime waits
//! for a scenario run to finish. Waiting runtimes are not held back by a waiting scenario, so
//! a thread that already holds a shared turn can take another without deadlocking.
//!
//! The turn is not reentrant across kinds: a thread holding the exclusive turn that starts a
//! runtime marks its spec [`within`](super::RuntimeSpec::within) that turn (the scenario's own
//! host), and that runtime takes no shared turn.
//!
//! [`RuntimeProcess`]: super::RuntimeProcess

use std::sync::{Condvar, Mutex, MutexGuard};

/// Who holds the turns now.
#[derive(Debug, Default)]
struct Holders {
    shared: usize,
    exclusive: bool,
}

static HOLDERS: Mutex<Holders> = Mutex::new(Holders {
    shared: 0,
    exclusive: false,
});
static CHANGED: Condvar = Condvar::new();

fn holders() -> MutexGuard<'static, Holders> {
    // The counts are updated in one step each, so a poisoned lock still holds valid ones.
    HOLDERS.lock().unwrap_or_else(|e| e.into_inner())
}

fn wait_while(mut busy: impl FnMut(&Holders) -> bool) -> MutexGuard<'static, Holders> {
    let mut h = holders();
    while busy(&h) {
        h = CHANGED.wait(h).unwrap_or_else(|e| e.into_inner());
    }
    h
}

/// The exclusive turn (a scenario run); released on drop, also while unwinding.
#[derive(Debug)]
#[must_use = "the turn ends when it is dropped"]
pub struct Exclusive(());

/// A shared turn (one runtime); released on drop, also while unwinding.
#[derive(Debug)]
#[must_use = "the turn ends when it is dropped"]
pub struct Shared(());

/// Waits until no runtime and no other scenario run of this process is up, then holds the
/// process alone until the guard is dropped.
pub fn exclusive() -> Exclusive {
    let mut h = wait_while(|h| h.exclusive || h.shared > 0);
    h.exclusive = true;
    Exclusive(())
}

/// Waits until no scenario run of this process is going on, then keeps one out until the
/// guard is dropped.
pub fn shared() -> Shared {
    let mut h = wait_while(|h| h.exclusive);
    h.shared += 1;
    Shared(())
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        holders().exclusive = false;
        CHANGED.notify_all();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        holders().shared -= 1;
        CHANGED.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    // One test, so the process-wide turns are not shared with another test of this module.
    #[test]
    fn shared_turns_overlap_and_exclude_the_exclusive_one() {
        let a = shared();
        let b = shared();
        let (tx, rx) = mpsc::channel();
        let inside = std::sync::Arc::new(AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&inside);
        let scenario = std::thread::spawn(move || {
            let turn = exclusive();
            flag.store(true, Ordering::SeqCst);
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            flag.store(false, Ordering::SeqCst);
            drop(turn);
        });
        // A third shared turn while the scenario waits: no deadlock.
        let c = shared();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        drop((a, b, c));
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the exclusive turn once no runtime is up");
        let d = shared();
        assert!(
            !inside.load(Ordering::SeqCst),
            "a shared turn overlapped the exclusive one"
        );
        drop(d);
        scenario.join().unwrap();
        let h = holders();
        assert_eq!((h.shared, h.exclusive), (0, false));
    }
}
