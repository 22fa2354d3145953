//! `tidegate bench forward` (skeleton: filled in by the forward scenario's author).

/// Parameters of the forward scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct ForwardArgs {}
