//! The load benchmark's samples: what `target/release/examples/load` (the measuring program)
//! writes and `cargo xtask load` reads, one type on both sides, so neither parses the other's
//! text. Throughputs and CPU times only; the figures (medians, ratios, intervals, goals) are
//! the xtask's.

use serde::{Deserialize, Serialize};

/// Bumped whenever a field of the samples changes meaning or disappears.
pub const SAMPLES_VERSION: u32 = 1;

/// The argv (after `bwrap`) of a bare bubblewrap run of `/bin/true`: the physical floor of a
/// command confined in a fresh bubblewrap sandbox. Its one owner: `cargo xtask bench-sandbox`
/// times it one at a time, the load benchmark runs it in CLIENTS parallel loops.
pub const BARE_BWRAP: [&str; 10] = [
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--unshare-all",
    "--die-with-parent",
    "/bin/true",
];

vocabulary! {
    /// What one sample runs: a turn sent to Mini or full Link, or the floor.
    pub enum LoadKind ("load kind") {
        /// Mini's plain turn `hello`: every ratio's denominator.
        MiniPlain = "mini_plain",
        /// Full Link's plain turn `hello`.
        LinkPlain = "link_plain",
        /// Full Link's `write f.txt: x` (the file tool).
        LinkWrite = "link_write",
        /// Full Link's `run: true` (a confined command).
        LinkRun = "link_run",
        /// No runtime: a bare bubblewrap run ([`BARE_BWRAP`]) per command, counted like turns.
        BareBwrap = "bare_bwrap",
    }
}

impl LoadKind {
    /// As a person reads it in a table.
    pub fn label(self) -> &'static str {
        match self {
            LoadKind::MiniPlain => "Mini plain",
            LoadKind::LinkPlain => "Link plain",
            LoadKind::LinkWrite => "Link write",
            LoadKind::LinkRun => "Link run: true",
            LoadKind::BareBwrap => "bare bwrap (floor)",
        }
    }
}

/// Everything one run of the measuring program sampled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LoadSamples {
    pub samples_version: u32,
    /// Rounds per client count, and each kind's seconds per round.
    pub rounds: u32,
    pub secs: f64,
    /// One per client count, in the order asked.
    pub counts: Vec<CountSamples>,
}

/// One client count's rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CountSamples {
    pub clients: u32,
    pub rounds: Vec<RoundSamples>,
    /// Per kind, each process's CPU milliseconds per turn in the last round that measured it.
    pub cpu: Vec<KindCpu>,
}

/// One round: each kind measured once, in `order`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RoundSamples {
    pub round: u32,
    pub order: Vec<LoadKind>,
    /// The kinds that finished their window.
    pub rates: Vec<KindRate>,
    /// The kinds that failed (a turn answered with an error, a bwrap that failed): the round
    /// counts for no figure.
    pub failed: Vec<KindFailure>,
}

impl RoundSamples {
    /// `kind`'s turns per second in this round, if it has one.
    pub fn rate(&self, kind: LoadKind) -> Option<f64> {
        self.rates
            .iter()
            .find(|r| r.kind == kind)
            .map(|r| r.turns_per_s)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KindRate {
    pub kind: LoadKind,
    /// Turns (or bare bwrap runs) finished within the window, per second.
    pub turns_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KindFailure {
    pub kind: LoadKind,
    pub error: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct KindCpu {
    pub kind: LoadKind,
    pub processes: Vec<ProcessCpu>,
}

/// One process's CPU time per turn (user and system, with that of the children it reaped:
/// the sandbox plugin's commands). Turns in flight at the window's end count in the time, not
/// in the turns: a slight overstatement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProcessCpu {
    pub process: String,
    pub ms_per_turn: f64,
}
