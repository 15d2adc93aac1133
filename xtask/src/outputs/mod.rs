//! The spec's locked release build, and whether what `target/release` holds is it.
//!
//! What the build commands are and the programs they leave (`release`) is fixed by the spec;
//! whether each program there is current (`fresh`) is asked of the files as they are. Callers
//! name both through this module.

mod fresh;
mod release;

pub use fresh::{allow_stale_caveat, ready, verify, Problem};
pub use release::{
    build, build_commands, command_text, expected_outputs, hash_programs, load_build_command,
    program_outputs, Program, Workspace, LOAD,
};
