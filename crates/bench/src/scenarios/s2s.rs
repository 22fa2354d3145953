//! `tidegate bench s2s` (skeleton: filled in by the s2s scenario's author).

/// Parameters of the s2s scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct S2sArgs {}
