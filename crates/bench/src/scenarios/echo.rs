//! `tidegate bench echo` (skeleton: filled in by the echo scenario's author).

use crate::CommonArgs;

/// Parameters of the echo scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct EchoArgs {
    /// Target and output options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs the scenario and prints its report.
pub async fn run(args: &EchoArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("the echo scenario is not built yet")
}
