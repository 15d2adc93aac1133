//! The sandbox probe of one confined start (`link-plugin-sandbox probe`): the kept answer
//! when [`crate::probe_cache`] has one for this machine as it is, else the probe's own,
//! awaited before `ready`. An answer other than `enforced` refuses confined mode with the
//! probe's reason.

use crate::confine::die_with_host;
use crate::shared::{SandboxStatus, Shared};
use anyhow::{bail, Context, Result};
use link_report::probe::{SandboxProbe, SandboxStatus as ProbeVerdict};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Grace between SIGTERM and SIGKILL for a probe asked to stop: it ends and reaps its own
/// sandbox in that time.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The sandbox probe of one start: the kept answer when [`crate::probe_cache`] has one for this
/// machine as it is now (the probe then still runs, and is awaited after `ready`), else the
/// probe's own answer, awaited before `ready`.
pub struct Probe {
    /// `None` once it finished: a finished future must not be polled again.
    run: Option<std::pin::Pin<Box<dyn std::future::Future<Output = Result<SandboxStatus>> + Send>>>,
    /// Asks the probe process to stop ([`Probe::stop`]).
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    programs: PathBuf,
    key: Option<crate::probe_cache::Key>,
    cached: Option<SandboxStatus>,
}

impl Probe {
    /// `held`: whether this host made the agents' cgroups, or why not, which the probe then
    /// says (`link_confine::cgroup::ENV_AGENT_CGROUPS`).
    pub fn start(programs: &Path, held: Result<(), String>) -> Probe {
        let key = crate::probe_cache::Key::now(programs);
        let cached = key
            .as_ref()
            .and_then(|k| crate::probe_cache::lookup(programs, k));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        // Behind a kept answer the probe starts once the runtime is ready (first poll), so it
        // takes no CPU from the start itself; else it runs while the plugins start.
        // It then also runs at the lowest priority (nice 19, which bwrap and the helper
        // inherit): it confirms what start-up already went on with, and must not slow the
        // first turns while it does.
        let run: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>> = match cached {
            Some(_) => {
                let programs = programs.to_owned();
                Box::pin(async move {
                    let mut stopped = stopped;
                    if stopped.try_recv().is_ok() {
                        bail!("stopped before the sandbox probe started");
                    }
                    let child = spawn_probe(&programs, Priority::Background, &held);
                    sandbox_probe(child, stopped).await
                })
            }
            None => Box::pin(sandbox_probe(
                spawn_probe(programs, Priority::Normal, &held),
                stopped,
            )),
        };
        Probe {
            run: Some(run),
            stop: Some(stop),
            programs: programs.to_owned(),
            key,
            cached,
        }
    }

    /// The probe's own answer, once; pending forever after that.
    async fn finish(&mut self) -> Result<SandboxStatus> {
        let Some(run) = self.run.as_mut() else {
            return std::future::pending().await;
        };
        let found = run.await;
        self.run = None;
        found
    }

    /// What start-up goes on with: the kept answer, or the probe's (kept for next time).
    pub async fn answer(&mut self) -> Result<SandboxStatus> {
        if let Some(cached) = &self.cached {
            return Ok(SandboxStatus {
                probe: "cached".into(),
                ..cached.clone()
            });
        }
        let found = self.finish().await?;
        if let Some(key) = &self.key {
            crate::probe_cache::keep(&self.programs, key, &found);
        }
        Ok(found)
    }

    /// Resolves only when the probe that ran behind a kept answer disagrees with it: the
    /// reason to stop. A confirmed answer says so in `link status`.
    pub async fn confirm(&mut self, shared: &Shared) -> String {
        if self.cached.is_none() {
            return std::future::pending().await;
        }
        match self.finish().await {
            Ok(found) => {
                *shared.sandbox.lock().expect("lock") = Some(SandboxStatus {
                    probe: "cached, confirmed".into(),
                    ..found
                });
                std::future::pending().await
            }
            Err(e) => {
                if let Some(key) = &self.key {
                    crate::probe_cache::forget(&self.programs, key);
                }
                format!("{e:#}; the kept probe answer no longer holds (it was removed)")
            }
        }
    }

    /// Stops a probe still running and waits until its process is gone: it ends and reaps
    /// its own sandbox on SIGTERM, so nothing of it is left to the host (past
    /// [`STOP_GRACE`] it is killed, and what it leaves is the host's to reap).
    pub async fn stop(&mut self) {
        let Some(run) = self.run.take() else {
            return;
        };
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = run.await;
    }
}

/// How the probe competes for the CPU.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Priority {
    /// Start-up waits for it.
    Normal,
    /// Nobody waits for it: nice 19.
    Background,
}

/// Starts `link-plugin-sandbox probe`.
fn spawn_probe(
    programs: &Path,
    priority: Priority,
    held: &Result<(), String>,
) -> Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(programs.join("link-plugin-sandbox"));
    let said = match held {
        Ok(()) => "held",
        Err(why) => why,
    };
    cmd.env(link_confine::cgroup::ENV_AGENT_CGROUPS, said);
    cmd.arg("probe")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    die_with_host(&mut cmd);
    if priority == Priority::Background {
        // SAFETY: one system call on this child alone; nothing is allocated.
        unsafe {
            cmd.pre_exec(|| Ok(rustix::process::setpriority_process(None, 19)?));
        }
    }
    cmd.spawn().context("running link-plugin-sandbox probe")
}

/// The answer of the probe `child`; an answer other than `enforced` refuses confined mode
/// with the probe's reason. Returns what `link status` shows of it. Once `stop` fires, the
/// probe is stopped instead ([`stop_probe`]).
async fn sandbox_probe(
    child: Result<tokio::process::Child>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<SandboxStatus> {
    let mut child = child?;
    let mut stdout = child.stdout.take().expect("piped");
    let finished = {
        let read = async {
            let mut out = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut stdout, &mut out)
                .await
                .map(|_| out)
        };
        let exited = async { tokio::join!(read, child.wait()) };
        tokio::select! {
            done = exited => Some(done),
            _ = &mut stop => None,
        }
    };
    let Some((out, status)) = finished else {
        stop_probe(&mut child).await;
        bail!("the sandbox probe was stopped");
    };
    let (out, status) = (
        out.context("reading the sandbox probe's answer")?,
        status.context("waiting for the sandbox probe")?,
    );
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap_or_default();
    let answer = SandboxProbe::read(&report);
    if status.success() {
        // The figures `link status` shows as the probe wrote them; what is decided on is typed.
        return Ok(SandboxStatus {
            identity: report["identity"].clone(),
            seccomp: report["seccomp"].clone(),
            limits: report["limits"].clone(),
            bounds: answer.map(|a| a.bounds).unwrap_or_default(),
            probe: "ran".into(),
        });
    }
    let (said, reason) = match &answer {
        Some(a) => (
            a.status,
            a.reason.clone().unwrap_or_else(|| "no reason given".into()),
        ),
        None => (
            ProbeVerdict::Broken,
            "its answer is not the probe's JSON".into(),
        ),
    };
    bail!(
        "confined mode is unavailable: the sandbox probe says {said} ({reason}); fix that (`cargo xtask doctor`), or run unconfined, explicitly, with --mode diagnostic"
    )
}

/// SIGTERM, then [`STOP_GRACE`] for the probe to end and reap its sandbox, then SIGKILL.
async fn stop_probe(child: &mut tokio::process::Child) {
    // Not yet waited for, so the pid is still the probe's.
    if let Some(pid) = child
        .id()
        .and_then(|p| rustix::process::Pid::from_raw(p as i32))
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    if tokio::time::timeout(STOP_GRACE, child.wait())
        .await
        .is_err()
    {
        link_protocol::errln!(
            "link: the sandbox probe did not stop within {STOP_GRACE:?}; killing it"
        );
        let _ = child.kill().await;
    }
}
