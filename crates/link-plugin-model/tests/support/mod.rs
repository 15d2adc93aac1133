//! What the model service's test files share: the built program and its plugin name.

/// The model program cargo built for these tests.
pub const EXE: &str = env!("CARGO_BIN_EXE_link-plugin-model");
/// Its name in the plugin manifest, which the contract's environment is derived from.
pub const NAME: &str = "link-plugin-model";
