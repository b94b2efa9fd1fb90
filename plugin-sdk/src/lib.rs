//! The Rust guest crate for Ferrobase plugins. The WIT contract and bindings arrive with the plugin issue.
