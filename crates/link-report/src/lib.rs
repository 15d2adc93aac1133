//! The report vocabulary, shared by the runtime runner that writes reports and the xtask that
//! reads them: which runtime ran ([`Profile`]), how ([`Mode`]), and the records
//! ([`records`]). Serde only, so reading a report needs none of the runtime's dependencies.

pub mod records;

pub use records::*;

use serde::{Deserialize, Serialize};

/// How the runtime runs its plugins and tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Plugins under Landlock; tool commands in bubblewrap + Landlock.
    #[default]
    Confined,
    /// Explicitly unconfined; protected run and file tools are disabled.
    Diagnostic,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Confined => "confined",
            Mode::Diagnostic => "diagnostic",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "confined" => Ok(Mode::Confined),
            "diagnostic" => Ok(Mode::Diagnostic),
            other => Err(format!(
                "unknown mode `{other}`: use `confined` or `diagnostic`"
            )),
        }
    }
}

/// Which runtime: the minimal one or full Link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    Mini,
    Link,
}

impl Profile {
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Mini => "mini",
            Profile::Link => "link",
        }
    }

    /// The plugins this profile runs, in the host's start order (it stops them in reverse).
    pub const fn plugins(self) -> &'static [&'static str] {
        match self {
            Profile::Mini => &[
                "link-plugin-measure",
                "link-plugin-model",
                "link-mini-harness",
                "link-mini-connection",
            ],
            Profile::Link => &[
                "link-plugin-measure",
                "link-plugin-model",
                "link-plugin-secret",
                "link-plugin-auth",
                "link-plugin-file-store",
                "link-plugin-agent",
                "link-plugin-sandbox",
                "link-plugin-link-run",
                "link-plugin-file-tool",
                "link-plugin-link-code",
                "link-plugin-link-harness",
                "link-plugin-link-scheduler",
            ],
        }
    }
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mini" => Ok(Profile::Mini),
            "link" => Ok(Profile::Link),
            other => Err(format!("unknown profile `{other}`: use `mini` or `link`")),
        }
    }
}


impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
