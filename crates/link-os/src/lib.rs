//! OS helpers without tokio, for the host, the monitor plugin and the testing kit alike.
//!
//! [`sample`] reads a process tree from `/proc` through `procfs`: the descendants of a
//! process, each one's RSS, CPU time and state as `link-report`'s records
//! ([`ProcessSample`](link_report::ProcessSample), [`SampleRound`](link_report::SampleRound)),
//! and the scheduler's own count of a process's CPU time.

pub mod sample;
