//! xtask: not built yet.
fn main() {}
