//! The UDP heartbeat on the listener's port: any datagram is answered with
//! a single `0x00` byte to its sender (Fluentd's `heartbeat_type udp`),
//! if the listener's `allow` list lets that sender connect (others get no
//! answer: the heartbeat must not tell them the service is there).

use std::sync::Arc;

use tidegate_hub::ListenerMetrics;
use tidegate_listener::ListenerSettings;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

/// Answers heartbeats on `socket` until `shutdown`.
pub async fn answer_heartbeats(
    socket: Arc<UdpSocket>,
    settings: ListenerSettings,
    metrics: ListenerMetrics,
    shutdown: CancellationToken,
) {
    let mut buf = [0u8; 1024];
    loop {
        let r = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = socket.recv_from(&mut buf) => r,
        };
        match r {
            Ok((_, peer)) if !settings.allows(peer.ip()) => {}
            Ok((_, peer)) => {
                if socket.send_to(b"\0", peer).await.is_err() {
                    metrics.error("udp_heartbeat");
                }
            }
            Err(_) => metrics.error("udp_heartbeat"),
        }
    }
}
