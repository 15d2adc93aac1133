//! `link-plugin-sandbox`: the sandbox plugin (no subcommand, started by the host), the
//! capability probe and a one-off confined `exec` for people, and the in-sandbox helper.

use anyhow::Context;
use clap::{Parser, Subcommand};
use link_plugin_sandbox::{helper, policy::Policy, run, service::Service};
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
        /// Host directory bound read-write at /workspace.
        #[arg(long)]
        workspace: PathBuf,
        /// Host directory bound read-write at /home/agent (an empty tmpfs otherwise).
        #[arg(long)]
        home: Option<PathBuf>,
        /// Time limit in seconds; the whole process tree is killed past it (exit 124).
        #[arg(long, default_value_t = 60)]
        timeout: u64,
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
    // The helper runs before every confined command: parsed by hand, without clap, to start fast.
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref()
        == Some(std::ffi::OsStr::new(
            link_plugin_sandbox::policy::LANDLOCK_EXEC,
        ))
    {
        match helper::parse_args(args) {
            Ok(a) => helper::landlock_exec(a.status_fd, a.rw, a.command),
            Err(e) => {
                eprintln!("link-plugin-sandbox landlock-exec: {e}");
                std::process::exit(helper::EXIT_SETUP);
            }
        }
    }
    let cli = Cli::parse();
    match cli.cmd {
        Some(Cmd::ProbeInside { port, name }) => helper::probe_inside(port, &name),
        Some(Cmd::Probe) => probe(),
        Some(Cmd::Exec {
            workspace,
            home,
            timeout,
            command,
        }) => exec(workspace, home, timeout, command),
        None if std::env::var_os(link_protocol::plugin::ENV_PLUGIN).is_some() => plugin(),
        None => anyhow::bail!(
            "no subcommand: use `probe` or `exec`; the plugin mode is started by `link up`"
        ),
    }
}

fn self_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("cannot locate this program (needed inside the sandbox)")
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn probe() -> anyhow::Result<()> {
    let report = link_plugin_sandbox::probe_blocking(&self_exe()?);
    println!("{}", serde_json::to_string_pretty(&report)?);
    std::process::exit(report.status.exit_code());
}

fn exec(
    workspace: PathBuf,
    home: Option<PathBuf>,
    timeout: u64,
    command: Vec<OsString>,
) -> anyhow::Result<()> {
    let bwrap = which::which("bwrap").map_err(|_| {
        anyhow::anyhow!(
            "bubblewrap (`bwrap`) is not on PATH: install it (apt-get install bubblewrap); \
             nothing runs unconfined"
        )
    });
    let bwrap = match bwrap {
        Ok(b) => b,
        Err(e) => fail(e),
    };
    let canonical = |p: PathBuf, what: &str| {
        p.canonicalize()
            .with_context(|| format!("{what} {} must be an existing directory", p.display()))
    };
    let workspace = canonical(workspace, "--workspace").unwrap_or_else(|e| fail(e));
    let home = home.map(|h| canonical(h, "--home").unwrap_or_else(|e| fail(e)));
    let spec = run::Spec {
        bwrap,
        policy: Policy::new(workspace, home, self_exe()?),
        argv: command,
        env: Policy::env(|k| std::env::var_os(k), &[]).map_err(anyhow::Error::msg)?,
        timeout: Duration::from_secs(timeout),
        output: run::Output::Inherit,
    };
    let _ = run::become_subreaper();
    let outcome = match runtime()?.block_on(run::run(&spec)) {
        Ok(o) => o,
        Err(run::RunError::Bwrap { stderr, code }) => fail(anyhow::anyhow!(
            "{}",
            link_plugin_sandbox::probe::diagnose_bwrap(&stderr, code).1
        )),
        Err(e) => fail(e.into()),
    };
    if outcome.timed_out {
        eprintln!("link-plugin-sandbox: killed after the {timeout}s time limit");
        std::process::exit(124);
    }
    std::process::exit(
        outcome
            .exit_code
            .unwrap_or(128 + outcome.signal.unwrap_or(9)),
    );
}

/// The sandbox could not run the command: say why and exit 125 (nothing ran).
fn fail(e: anyhow::Error) -> ! {
    eprintln!("link-plugin-sandbox: {e:#}");
    std::process::exit(helper::EXIT_SETUP);
}

fn plugin() -> anyhow::Result<()> {
    link_protocol::plugin::init_logging();
    let env = link_protocol::plugin::PluginEnv::from_env().map_err(anyhow::Error::msg)?;
    run::become_subreaper().context("prctl(PR_SET_CHILD_SUBREAPER)")?;
    let bwrap = which::which("bwrap").ok();
    if bwrap.is_none() {
        tracing::warn!("bwrap is not on PATH: every sandbox.exec will be refused as unavailable");
    }
    let service = std::sync::Arc::new(Service {
        layout: env.layout(),
        mode: env.mode,
        helper: self_exe()?,
        bwrap,
    });
    let handler = link_protocol::server::handler(move |req| {
        let service = service.clone();
        async move { service.handle(req).await }
    });
    runtime()?.block_on(link_protocol::plugin::serve_plugin(
        &env,
        &[link_protocol::routes::SANDBOX_EXEC],
        link_protocol::server::Peers::Parent,
        handler,
    ))?;
    Ok(())
}
