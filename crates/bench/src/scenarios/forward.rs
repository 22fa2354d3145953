//! `tidegate bench forward` (skeleton: filled in by the forward scenario's author).

use crate::CommonArgs;

/// Parameters of the forward scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct ForwardArgs {
    /// Target and output options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs the scenario and prints its report.
pub async fn run(args: &ForwardArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("the forward scenario is not built yet")
}
