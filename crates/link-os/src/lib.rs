//! OS helpers without tokio, for the host, the plugins, the testing kit and the xtask alike;
//! one module a concept.
//!
//! - [`process`]: one process by its pid or pidfd: a pidfd, waiting for its exit with a
//!   deadline (`wait`, `wait_pid`, `wait_child`, `wait_or_kill`), a signal that never hits a
//!   reused pid (`signal_checked`), its start time and whether it still runs.
//! - [`reaper`]: this process as a parent: the child subreaper, death with the parent and the
//!   descriptors a child inherits between fork and exec, and a look at its children that
//!   collects none.
//! - [`sample`] reads a process tree from `/proc` through `procfs`: the children and
//!   descendants of a process, each one's RSS, CPU time and state as `link-report`'s records
//!   ([`ProcessSample`](link_report::ProcessSample), [`SampleRound`](link_report::SampleRound)),
//!   and the scheduler's own count of a process's CPU time.

pub mod process;
pub mod reaper;
pub mod sample;
