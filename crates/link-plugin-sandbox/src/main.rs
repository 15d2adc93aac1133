//! `link-plugin-sandbox`: the sandbox plugin (no subcommand, started by the host), the
//! capability probe and a one-off confined `exec` for people, and the probe's inside checks.
//! A thin program: the confinement itself is the `link-confine` library's.

mod service;

use anyhow::Context;
use clap::{Parser, Subcommand};
use link_confine::identity::{Identity, Slots};
use link_confine::policy::Policy;
use link_confine::{helper, limits, probe, run, view};
use link_protocol::routes::sandbox::ExecLimits;
use service::Service;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
#[command(version, about = "Bubblewrap + Landlock confinement for Link")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Prove confinement on this machine; prints JSON, exits 0 enforced, 2 unavailable, 1 broken.
    Probe,
    /// Run one command confined (for diagnosing a machine); exits with its status.
    Exec {
        /// Host directory bound read-write at /workspace. As root, its files are handed to the
        /// sandbox's dedicated identity (chown), which the command runs as.
        #[arg(long)]
        workspace: PathBuf,
        /// Host directory bound read-write at /home/agent (an empty tmpfs otherwise).
        #[arg(long)]
        home: Option<PathBuf>,
        /// Time limit in seconds; the whole process tree is killed past it (exit 124).
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        /// The workspace quota in bytes (the workspace and the home together; 4 GiB by default).
        #[arg(long)]
        workspace_bytes: Option<u64>,
        /// The workspace quota in entries (files, directories, links; 250,000 by default).
        #[arg(long)]
        workspace_entries: Option<u64>,
        #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
        command: Vec<OsString>,
    },
    /// Inside the sandbox: the probe's checks.
    #[command(hide = true)]
    ProbeInside {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        name: String,
    },
}

fn main() -> anyhow::Result<()> {
    let args: Vec<OsString> = std::env::args_os().collect();
    // `exec` is what people time: it is parsed by hand, without clap, and runs without an
    // async runtime, to start fast. Anything unusual (`--help`, a mistake) goes to clap below
    // for its messages.
    if args.get(1).and_then(|a| a.to_str()) == Some("exec") {
        if let Some(a) = ExecArgs::parse(&args[2..]) {
            exec(a)
        }
    }
    let cli = Cli::parse_from(args);
    match cli.cmd {
        Some(Cmd::ProbeInside { port, name }) => probe::inside::probe_inside(port, &name),
        Some(Cmd::Probe) => probe_and_exit(),
        Some(Cmd::Exec {
            workspace,
            home,
            timeout,
            workspace_bytes,
            workspace_entries,
            command,
        }) => exec(ExecArgs {
            workspace,
            home,
            timeout,
            limits: ExecLimits {
                workspace_bytes,
                workspace_entries,
                ..Default::default()
            },
            command,
        }),
        None if std::env::var_os(link_protocol::plugin::ENV_PLUGIN).is_some() => plugin(),
        None => anyhow::bail!(
            "no subcommand: use `probe` or `exec`; the plugin mode is started by `link up`"
        ),
    }
}

/// The arguments of `exec`.
struct ExecArgs {
    workspace: PathBuf,
    home: Option<PathBuf>,
    timeout: u64,
    limits: ExecLimits,
    command: Vec<OsString>,
}

impl ExecArgs {
    /// `[--workspace W] [--home H] [--timeout S] [--workspace-bytes N] [--workspace-entries N]
    /// [--] COMMAND...`, the options in any order before the command; `None` for anything else
    /// (clap then explains).
    fn parse(args: &[OsString]) -> Option<ExecArgs> {
        let (mut workspace, mut home, mut timeout) = (None, None, 60);
        let mut limits = ExecLimits::default();
        let number = |v: Option<&OsString>| v?.to_str()?.parse::<u64>().ok();
        let mut i = 0;
        while let Some(arg) = args.get(i) {
            let value = args.get(i + 1);
            match arg.to_str() {
                Some("--") => {
                    i += 1;
                    break;
                }
                Some("--workspace") => workspace = Some(PathBuf::from(value?)),
                Some("--home") => home = Some(PathBuf::from(value?)),
                Some("--timeout") => timeout = number(value)?,
                Some("--workspace-bytes") => limits.workspace_bytes = Some(number(value)?),
                Some("--workspace-entries") => limits.workspace_entries = Some(number(value)?),
                Some(s) if s.starts_with('-') => return None,
                _ => break,
            }
            i += 2;
        }
        let command = args[i..].to_vec();
        if command.is_empty() {
            return None;
        }
        Some(ExecArgs {
            workspace: workspace?,
            home,
            timeout,
            limits,
            command,
        })
    }
}

fn self_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("cannot locate this program (the probe runs it inside)")
}

fn probe_and_exit() -> anyhow::Result<()> {
    // A panic is an answer too: `broken`, naming it, on stdout where the answer is read.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let report = probe::ProbeReport::panicked(info);
        if let Ok(json) = serde_json::to_string_pretty(&report) {
            link_protocol::outln!("{json}");
        }
        default_hook(info);
    }));
    // The namespace's init outlives bwrap: as a subreaper, the probe reaps it itself.
    run::set_single_threaded();
    let _ = link_os::reaper::become_subreaper();
    run::stop_all_on_signals().context("handling SIGTERM and SIGINT")?;
    let report = probe::probe_blocking(&self_exe()?);
    run::reap_orphans();
    link_protocol::outln!("{}", serde_json::to_string_pretty(&report)?);
    std::process::exit(report.status.exit_code());
}

/// Runs one command confined and exits with its status (125 when nothing ran, 124 on the
/// time limit), after every process it started is gone. Stopped by SIGTERM or SIGINT, it
/// ends the command first, then dies of that signal, as a shell running it expects.
fn exec(a: ExecArgs) -> ! {
    run::set_single_threaded();
    let _ = link_os::reaper::become_subreaper();
    let code = match run::stop_all_on_signals() {
        Ok(()) => exec_status(a),
        Err(e) => fail(anyhow::anyhow!("cannot handle SIGTERM and SIGINT: {e}")),
    };
    run::reap_orphans();
    if let Some(signal) = run::stopped_by() {
        let name = match signal {
            libc::SIGINT => "SIGINT",
            _ => "SIGTERM",
        };
        link_protocol::errln!(
            "link-plugin-sandbox: stopped by {name}; nothing the command started is left running"
        );
        run::die_of(signal);
    }
    std::process::exit(code);
}

fn exec_status(a: ExecArgs) -> i32 {
    let Ok(bwrap) = which::which("bwrap") else {
        return fail(anyhow::anyhow!(
            "bubblewrap (`bwrap`) is not on PATH: install it (apt-get install bubblewrap); \
             nothing runs unconfined"
        ));
    };
    let canonical = |p: &PathBuf, what: &str| {
        p.canonicalize()
            .with_context(|| format!("{what} {} must be an existing directory", p.display()))
    };
    let workspace = match canonical(&a.workspace, "--workspace") {
        Ok(w) => w,
        Err(e) => return fail(e),
    };
    let home = match a.home.as_ref().map(|h| canonical(h, "--home")).transpose() {
        Ok(h) => h,
        Err(e) => return fail(e),
    };
    let env = match Policy::env(|k| std::env::var_os(k), &[]) {
        Ok(env) => env,
        Err(e) => return fail(anyhow::anyhow!(e)),
    };
    let identity = match Identity::for_slot(0) {
        Ok(i) => i,
        Err(e) => return fail(anyhow::anyhow!(e)),
    };
    if rustix::process::geteuid().is_root() {
        // Fewer mounts for bwrap to read back after each of its binds.
        let needed: Vec<&std::path::Path> = [&workspace, &bwrap]
            .into_iter()
            .chain(home.as_ref())
            .map(PathBuf::as_path)
            .collect();
        if let Err(e) = view::without_unused_mounts(&needed) {
            return fail(anyhow::anyhow!("cannot shed unused mounts: {e}"));
        }
    }
    let limits = match limits::Limits::with(&a.limits) {
        Ok(l) => l,
        Err(e) => return fail(anyhow::anyhow!(e)),
    };
    let spec = run::Spec {
        bwrap,
        owner: workspace.clone(),
        policy: Policy {
            limits,
            ..Policy::new(workspace, home, identity)
        },
        argv: a.command,
        env,
        timeout: Duration::from_secs(a.timeout),
        output: run::Output::Inherit,
        cgroup: None,
    };
    let outcome = match run::run_blocking(&spec) {
        Ok(o) => o,
        // Said by `exec`, with the signal: a bwrap that died of the same Ctrl-C is no fault.
        Err(_) if run::stopped_by().is_some() => return helper::EXIT_SETUP,
        Err(run::RunError::Bwrap { stderr, code }) => {
            let reason = probe::diagnose_bwrap(&stderr, code).1;
            return fail(anyhow::anyhow!("{reason}"));
        }
        Err(e) => return fail(e.into()),
    };
    if outcome.timed_out {
        link_protocol::errln!(
            "link-plugin-sandbox: killed after the {}s time limit",
            a.timeout
        );
        return 124;
    }
    if let Some(hit) = outcome.limit_hit {
        link_protocol::errln!("link-plugin-sandbox: {hit}");
    }
    outcome
        .exit_code
        .unwrap_or(128 + outcome.signal.unwrap_or(9))
}

/// The sandbox could not run the command: say why; exit 125 (nothing ran).
fn fail(e: anyhow::Error) -> i32 {
    link_protocol::errln!("link-plugin-sandbox: {e:#}");
    helper::EXIT_SETUP
}

fn plugin() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    link_os::reaper::become_subreaper().context("prctl(PR_SET_CHILD_SUBREAPER)")?;
    let bwrap = which::which("bwrap").ok();
    if bwrap.is_none() {
        tracing::warn!("bwrap is not on PATH: every sandbox.exec will be refused as unavailable");
    }
    let layout = env.layout();
    let slots = Slots::load(
        layout
            .data(link_protocol::routes::programs::SANDBOX)
            .join("identities.json"),
    )
    .map_err(anyhow::Error::msg)?;
    let service = std::sync::Arc::new(Service {
        layout,
        mode: env.mode,
        bwrap,
        slots: std::sync::Mutex::new(slots),
        cgroups: link_confine::cgroup::Cgroups::from_env()
            .map_err(anyhow::Error::msg)?
            .map(std::sync::Arc::new),
        running: Default::default(),
    });
    let service = link_protocol::server::Service::new(service)
        .on::<link_protocol::routes::sandbox::Exec, _, _>(Service::exec);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(link_protocol::plugin::serve_service(
        &env,
        link_protocol::server::Peers::Parent,
        service,
    ));
    // Stopping: kill the sandboxes still running; dropping the runtime waits for their
    // (blocking) runs, which reap them; then nothing may be left.
    run::stop_all();
    drop(runtime);
    run::reap_orphans();
    served?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Option<ExecArgs> {
        let args: Vec<OsString> = s.split(' ').map(OsString::from).collect();
        ExecArgs::parse(&args)
    }

    #[test]
    fn exec_arguments_by_hand_or_left_to_clap() {
        let a = parse("--timeout 5 --workspace /w -- sh -c --home").unwrap();
        assert_eq!((a.workspace, a.home, a.timeout), ("/w".into(), None, 5));
        assert_eq!(a.command, ["sh", "-c", "--home"]);
        let a = parse("--workspace /w --home /h true -x").unwrap();
        assert_eq!(a.home, Some("/h".into()));
        assert_eq!(
            (a.timeout, a.command),
            (60, vec!["true".into(), "-x".into()])
        );
        for clap_explains in [
            "--help",
            "--workspace=/w true",
            "--workspace /w",
            "--workspace /w --",
            "--timeout x --workspace /w true",
            "--home /h true",
        ] {
            assert!(parse(clap_explains).is_none(), "{clap_explains}");
        }
    }
}
