//! One module per scenario; [`Scenario`] is the `tidegate bench <scenario>`
//! enum. Adding a scenario: a module with `XArgs` (clap, flattening
//! [`crate::CommonArgs`]) and `async fn run(&XArgs)`, plus one variant here.

pub mod conns;
pub mod echo;
pub mod forward;
pub mod kv;
pub mod push;
pub mod s2s;

/// The scenarios `tidegate bench` knows.
#[derive(Debug, clap::Subcommand)]
pub enum Scenario {
    /// Seed 002: fixed-rate echo over the wire protocol (AsyncTCP vs netperf).
    Echo(echo::EchoArgs),
    /// Seed 004: Fluentd Forward load (PackedForward batches with acks).
    Forward(forward::ForwardArgs),
    /// Seed 000: NiFi Site-to-Site clients doing transactions.
    S2s(s2s::S2sArgs),
    /// Seed 003: fixed-rate HTTP load on the KV API (wrk2's method), with
    /// an nginx anchor.
    Kv(kv::KvArgs),
    /// Seed 001: push fan-out — users x subscriptions over topics,
    /// delivery latency, beside the npm socket.io server (`--anchor`).
    Push(push::PushArgs),
    /// Memory per connection: N idle, partial or trickling connections to
    /// one listener, and what the server does with them.
    Conns(conns::ConnsArgs),
}

impl Scenario {
    /// Runs the chosen scenario to completion.
    pub async fn run(&self) -> anyhow::Result<()> {
        match self {
            Scenario::Echo(a) => echo::run(a).await,
            Scenario::Forward(a) => forward::run(a).await,
            Scenario::S2s(a) => s2s::run(a).await,
            Scenario::Conns(a) => conns::run(a).await,
            Scenario::Push(a) => push::run(a).await,
            Scenario::Kv(a) => kv::run(a).await,
        }
    }
}
