//! link-plugin-sandbox.
