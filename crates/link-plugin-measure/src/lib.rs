//! The shared records of the runtime report, and process sampling from `/proc`.
//!
//! [`records`] (from `link-report`) is the one definition of the report JSON and its
//! vocabulary ([`Profile`], [`Mode`], [`CheckName`], [`Status`]): the runtime runner writes it,
//! the monitor plugin fills its samples, `runtime report` adds its trace section and the xtask
//! reads it back. [`sample`] reads a process tree through `procfs`. The monitor plugin
//! binary (`link-plugin-measure`) serves the `monitor.*` routes ([`link_protocol::routes::host`])
//! and friends.

pub mod sample;

pub use link_report::records;
pub use link_report::records::*;
pub use link_report::{Mode, Profile};
