//! `tidegate bench echo` (skeleton: filled in by the echo scenario's author).

/// Parameters of the echo scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct EchoArgs {}
