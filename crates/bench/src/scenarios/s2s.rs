//! `tidegate bench s2s` (skeleton: filled in by the s2s scenario's author).

use crate::CommonArgs;

/// Parameters of the s2s scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct S2sArgs {
    /// Target and output options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs the scenario and prints its report.
pub async fn run(args: &S2sArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("the s2s scenario is not built yet")
}
