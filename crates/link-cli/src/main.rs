//! `link`: the Link host and its command-line verbs.
//!
//! `link up` is the host: it takes the state root's lock, starts the profile's plugins all at
//! once (each with an isolated HOME under the state root, confined in `confined` mode),
//! waits for every one to be ready, serves control requests on `run/host.sock`, and for full Link
//! runs the router (`run/router.sock`, grants from `link_protocol::manifest`, enforced in [`router`]) and the HTTP endpoint. It
//! stops everything in reverse order on `link down`, SIGTERM, SIGINT or when a plugin dies.
//! The other verbs are small clients of the host and of the connection service.

mod caller;
mod commands;
mod confine;
mod control;
mod endpoint;
mod health;
mod host;
mod leftovers;
mod own_namespaces;
mod plugins;
mod probe_cache;
mod router;
mod routing;
mod schedule_grant;
mod shared;
mod spawner;
mod start_probe;
mod state_lock;
mod verified;

use clap::{Parser, Subcommand};
use link_protocol::plugin::{Mode, Profile};
use link_protocol::routes::agent::IdempotencyKey;
use std::path::PathBuf;

/// Whether this host was built with its test hooks (the `test-hooks` feature, which
/// `ci/test.sh` turns on): `host.debug_call`, a shorter router deadline, and the
/// [`link_protocol::plugin::TEST_VARIABLES`] passed to plugins. The locked release build
/// (`cargo xtask build`) has none, and no environment can switch them on there.
const TEST_HOOKS_BUILT: bool = cfg!(feature = "test-hooks");

/// The test hooks are on: built in, and asked for with `LNK_TEST_HOOKS=1`.
fn test_hooks_on() -> bool {
    TEST_HOOKS_BUILT && link_protocol::plugin::test_hooks_asked()
}

/// `--version`: a build with test hooks says so ([`link_protocol::TEST_HOOKS_MARK`]).
const VERSION: &str = if TEST_HOOKS_BUILT {
    concat!(env!("CARGO_PKG_VERSION"), " (test hooks built in)")
} else {
    env!("CARGO_PKG_VERSION")
};

#[derive(Parser)]
#[command(
    name = "link",
    version = VERSION,
    about = "Run AI agents on this machine: the Link host"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a runtime in the foreground; prints `ready <connection socket>` when up.
    Up(UpArgs),
    /// Stop the runtime running on a state root and wait until all of it is gone.
    Down {
        #[arg(long)]
        state: PathBuf,
    },
    /// Print the running runtime's profile, mode and plugins as JSON.
    Status {
        #[arg(long)]
        state: PathBuf,
    },
    /// Manage bearer tokens for the connection service.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Full Link: store or delete the key sent to the remote model (LNK_MODEL_REMOTE_URL),
    /// kept by the secret plugin.
    ModelKey {
        #[command(subcommand)]
        command: ModelKeyCommand,
    },
    /// Create, list and delete agents through the connection service (JSON replies).
    Agent {
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Run one turn through the connection service and print the reply as JSON.
    Turn {
        #[command(flatten)]
        client: ClientArgs,
        agent: String,
        message: String,
        /// Names the turn (sent as `Idempotency-Key`): run again with the same key, a turn
        /// already stored is answered from what was stored, not run twice.
        #[arg(long, value_name = "KEY", value_parser = |k: &str| IdempotencyKey::parse(k))]
        idempotency_key: Option<IdempotencyKey>,
    },
}

/// The state root and bearer token of a verb that speaks to the connection service.
#[derive(clap::Args)]
struct ClientArgs {
    #[arg(long)]
    state: PathBuf,
    /// Bearer token; defaults to $LNK_TOKEN. Get one with `link token create --state DIR`.
    #[arg(long, env = "LNK_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(Subcommand)]
enum AgentCommand {
    /// Create an agent named NAME (its id).
    Create {
        #[command(flatten)]
        client: ClientArgs,
        name: String,
        /// The model its turns use (one the runtime serves: link-local, or the remote's);
        /// defaults to the runtime's (`link up --model`).
        #[arg(long)]
        model: Option<link_protocol::model::Model>,
    },
    /// List the agents.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete the agent ID and its conversation.
    Delete {
        #[command(flatten)]
        client: ClientArgs,
        id: String,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Print a new bearer token (valid until revoked); only its sha256 is stored. The state
    /// root must be one `link up` has prepared.
    Create {
        #[arg(long)]
        state: PathBuf,
    },
    /// Revoke a token: both connection services refuse it from the next request on.
    Revoke {
        #[arg(long)]
        state: PathBuf,
        token: String,
    },
}

#[derive(Subcommand)]
enum ModelKeyCommand {
    /// Store the key read from standard input (one line); the running model uses it from its
    /// next forwarded request.
    Set {
        #[arg(long)]
        state: PathBuf,
    },
    /// Delete the stored key; prints {"deleted": true|false}.
    Delete {
        #[arg(long)]
        state: PathBuf,
    },
}

/// Options of `link up`.
#[derive(clap::Args, Debug, Clone)]
pub struct UpArgs {
    #[arg(long, value_parser = parse_profile)]
    pub profile: Profile,
    #[arg(long)]
    pub state: PathBuf,
    #[arg(long, default_value = "confined", value_parser = parse_mode)]
    pub mode: Mode,
    /// Where the plugin programs are; defaults to the directory of `link` itself.
    #[arg(long)]
    pub programs: Option<PathBuf>,
    /// Seconds between the monitor's samples.
    #[arg(long, default_value = "1")]
    pub monitor_interval: f64,
    /// The model of an agent created without one (`link agent create --model`), and of an
    /// agent stored before agents had a model. Models other than link-local are forwarded to
    /// LNK_MODEL_REMOTE_URL.
    #[arg(long, default_value = link_protocol::model::LOCAL)]
    pub model: link_protocol::model::Model,
}

fn parse_profile(s: &str) -> Result<Profile, String> {
    s.parse()
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up(args) => host::up(args),
        Command::Down { state } => commands::down(&state),
        Command::Status { state } => commands::status(&state),
        Command::Token {
            command: TokenCommand::Create { state },
        } => commands::token_create(&state),
        Command::Token {
            command: TokenCommand::Revoke { state, token },
        } => commands::token_revoke(&state, &token),
        Command::ModelKey { command } => match command {
            ModelKeyCommand::Set { state } => commands::model_key_set(&state),
            ModelKeyCommand::Delete { state } => commands::model_key_delete(&state),
        },
        Command::Agent { command } => match command {
            AgentCommand::Create {
                client,
                name,
                model,
            } => commands::agent_create(&client.state, client.token, &name, model),
            AgentCommand::List { client } => commands::agent_list(&client.state, client.token),
            AgentCommand::Delete { client, id } => {
                commands::agent_delete(&client.state, client.token, &id)
            }
        },
        Command::Turn {
            client,
            agent,
            message,
            idempotency_key,
        } => commands::turn(
            &client.state,
            client.token,
            &agent,
            &message,
            idempotency_key.as_ref(),
        ),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            link_protocol::errln!("link: {}", error_text(&e));
            std::process::exit(1);
        }
    }
}

/// An error as `link` says it: its causes, then what to do where one is a full disk (which
/// the causes name only as "No space left on device").
fn error_text(e: &anyhow::Error) -> String {
    let full = e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::StorageFull)
    });
    if full {
        format!("{e:#}; the file system is full: free space on it and run this again")
    } else {
        format!("{e:#}")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_version_says_whether_test_hooks_are_built_in() {
        let says = super::VERSION.contains(link_protocol::TEST_HOOKS_MARK);
        assert_eq!(says, super::TEST_HOOKS_BUILT, "{}", super::VERSION);
    }
}
