//! Runs only the `[sockperf]` echo listener, for quick latency experiments
//! without building the whole `tidegate` binary:
//! `cargo run --release -p tidegate-wire --example sockperf_echo -- 127.0.0.1:11111`.

use tidegate_hub::Hub;
use tidegate_wire::{SockperfConfig, SockperfServer};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:11111".into());
    let mut config = SockperfConfig::default();
    config.listener.listen = listen.parse().expect("host:port");
    let server = SockperfServer::bind(config).map_err(std::io::Error::other)?;
    eprintln!("sockperf echo on {}", server.local_addr());
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        s.cancel();
    });
    server.run(Hub::default(), stop).await
}
