//! Which thread forks a plugin: the runtime's, or one of the host's spawner threads, which run
//! under the commands' seccomp filter so that every plugin they fork inherits it
//! (`link_confine::host::PluginFilter::Inherited`) instead of loading a copy of its
//! own, which costs the kernel a check and a JIT of every program per plugin.
//!
//! There are two spawner threads: a fork waits for its child's exec (capabilities, Landlock,
//! then the exec itself), so plugins forked one after another start one after another; two
//! threads overlap those waits (start-up of full Link 0.87–0.89× one thread's, on 2 cores),
//! and the runtime's thread prepares the next command meanwhile. The first takes the filter
//! and starts the second, which inherits it: one load of the filter, not two.
//!
//! As root the plugins that enter a view of their own (issue 42: every Landlock-confined
//! one) cannot be forked under that filter, which refuses the view's namespace and mount
//! calls: a second pair of spawner threads, without it, forks them (`Forker::Unfiltered`), and
//! each loads the filter itself after its view.
//!
//! The spawner threads live as long as the host and never return: a plugin's parent-death
//! signal (`crate::confine::die_with_host`) follows the thread that forked it, not the process,
//! so a thread that ended would take its plugins with it.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::OnceLock;
use tokio::process::{Child, Command};

/// The thread a plugin is forked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forker {
    /// The runtime's: an unconfined (diagnostic) plugin, or one that loads a filter of its own.
    Runtime,
    /// A spawner thread, under the commands' filter.
    Filtered,
    /// A spawner thread without it: a plugin that loads its filter itself after calls that
    /// filter refuses (as root, a plugin entering its own view: issue 42), forked off the
    /// runtime's thread so that its fork and exec overlap the next command's preparation.
    Unfiltered,
}

type Job = (Command, mpsc::Sender<io::Result<Child>>);

fn gone() -> io::Error {
    io::Error::other("the host's spawner thread is gone")
}

/// A plugin being forked; [`Forking::wait`] gives its child.
pub struct Forking(mpsc::Receiver<io::Result<Child>>);

impl Forking {
    /// Blocks until the fork and exec are done: the caller serves nothing meanwhile, so the
    /// plugin cannot call the router before the host has admitted its pid.
    pub fn wait(self) -> io::Result<Child> {
        self.0.recv().unwrap_or_else(|_| Err(gone()))
    }
}

/// Forks `cmd` on `forker`; call from within the host's runtime. A plugin meant for the
/// filtered thread is never forked elsewhere: where that thread could not start or take the
/// filter, its spawn fails with the reason.
pub fn spawn(mut cmd: Command, forker: Forker) -> Forking {
    let (reply, forking) = mpsc::channel();
    match forker {
        Forker::Runtime => {
            let _ = reply.send(cmd.spawn());
        }
        Forker::Filtered => hand(filtered(), cmd, reply),
        Forker::Unfiltered => hand(unfiltered(), cmd, reply),
    }
    Forking(forking)
}

/// Hands `cmd` to a spawner thread's queue, or answers `reply` with why there is none.
fn hand(
    queue: Result<&'static mpsc::Sender<Job>, &'static String>,
    cmd: Command,
    reply: mpsc::Sender<io::Result<Child>>,
) {
    match queue {
        Ok(jobs) => {
            if let Err(mpsc::SendError((_, reply))) = jobs.send((cmd, reply)) {
                let _ = reply.send(Err(gone()));
            }
        }
        Err(e) => {
            let _ = reply.send(Err(io::Error::other(e.clone())));
        }
    }
}

/// The queue of the next spawner thread in turn; both start on first use.
fn filtered() -> Result<&'static mpsc::Sender<Job>, &'static String> {
    static JOBS: OnceLock<Result<[mpsc::Sender<Job>; 2], String>> = OnceLock::new();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let both = JOBS.get_or_init(start_filtered).as_ref()?;
    Ok(&both[NEXT.fetch_add(1, Ordering::Relaxed) % both.len()])
}

/// The queue of the next unfiltered spawner thread in turn; both start on first use.
fn unfiltered() -> Result<&'static mpsc::Sender<Job>, &'static String> {
    static JOBS: OnceLock<Result<[mpsc::Sender<Job>; 2], String>> = OnceLock::new();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let both = JOBS.get_or_init(|| {
        let runtime = tokio::runtime::Handle::current();
        let mut senders = Vec::new();
        for _ in 0..2 {
            let (jobs, queue) = mpsc::channel::<Job>();
            let runtime = runtime.clone();
            std::thread::Builder::new()
                .name("link-spawner".into())
                .spawn(move || serve(runtime, queue))
                .map_err(|e| format!("starting the host's spawner thread: {e}"))?;
            senders.push(jobs);
        }
        let [a, b]: [mpsc::Sender<Job>; 2] = senders.try_into().expect("two");
        Ok([a, b])
    });
    let both = both.as_ref()?;
    Ok(&both[NEXT.fetch_add(1, Ordering::Relaxed) % both.len()])
}

/// Starts the first spawner thread, which takes the filter and then starts the second: a
/// thread inherits the filter of the thread that starts it (the kernel shares it), so the
/// filter is checked and compiled by the kernel once, not once per thread.
fn start_filtered() -> Result<[mpsc::Sender<Job>; 2], String> {
    let (ready, started) = mpsc::channel();
    let runtime = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name("link-spawner".into())
        .spawn(move || {
            if let Err(e) = link_confine::host::filter_this_thread() {
                let _ = ready.send(Err(format!(
                    "the host's spawner thread cannot take the plugins' seccomp filter: {e}"
                )));
                park_forever();
            }
            let (first, queue) = mpsc::channel::<Job>();
            let (second, second_queue) = mpsc::channel::<Job>();
            let second_runtime = runtime.clone();
            let started_second = std::thread::Builder::new()
                .name("link-spawner".into())
                .spawn(move || serve(second_runtime, second_queue));
            let _ = ready.send(
                started_second
                    .map(|_| [first, second])
                    .map_err(|e| format!("starting the host's second spawner thread: {e}")),
            );
            serve(runtime, queue)
        })
        .map_err(|e| format!("starting the host's spawner thread: {e}"))?;
    started.recv().unwrap_or_else(|_| Err(gone().to_string()))
}

/// Forks what comes in, then lives on: see the module's documentation.
fn serve(runtime: tokio::runtime::Handle, queue: mpsc::Receiver<Job>) -> ! {
    // tokio's child reaper registers with the host's runtime.
    let _runtime = runtime.enter();
    for (mut cmd, reply) in queue {
        let _ = reply.send(cmd.spawn());
    }
    park_forever()
}

fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}
