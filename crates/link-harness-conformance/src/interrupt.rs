//! Ctrl-C and SIGTERM: a flag the scenario checks, so an interrupted run still stops the
//! runtime, removes its state root and writes its report.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

static SIGNAL: AtomicI32 = AtomicI32::new(0);
static INSTALLED: OnceLock<()> = OnceLock::new();

/// Installs SIGINT and SIGTERM handlers that set the flag (once per process).
pub fn install_handler() {
    INSTALLED.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("lnk-signals".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                rt.block_on(async move {
                    use tokio::signal::unix::{signal, SignalKind};
                    let (Ok(mut int), Ok(mut term)) = (
                        signal(SignalKind::interrupt()),
                        signal(SignalKind::terminate()),
                    ) else {
                        let _ = tx.send(Err("cannot install signal handlers".into()));
                        return;
                    };
                    let _ = tx.send(Ok(()));
                    loop {
                        let sig = tokio::select! {
                            _ = int.recv() => 2,
                            _ = term.recv() => 15,
                        };
                        if SIGNAL.swap(sig, Ordering::SeqCst) == 0 {
                            link_protocol::errln!(
                                "received {}: stopping the runtime and cleaning up",
                                name(sig)
                            );
                        }
                    }
                });
            });
        match spawned.map(|_| rx.recv_timeout(Duration::from_secs(10))) {
            Ok(Ok(Ok(()))) => {}
            other => link_protocol::errln!("warning: interrupt handler not installed: {other:?}"),
        }
    });
}

/// The signal that interrupted the run, if any.
pub fn interrupted() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// `SIGINT` / `SIGTERM`.
pub fn name(sig: i32) -> &'static str {
    match sig {
        2 => "SIGINT",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

/// Resolves once a signal has arrived.
pub async fn wait() -> i32 {
    loop {
        if let Some(sig) = interrupted() {
            return sig;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
