//! For the scenarios' tests: a server that accepts connections and never
//! answers, so every request waits out its client's timeout.

use std::net::SocketAddr;

/// Listens on a free loopback port, accepting and holding every connection
/// without reading or writing, until the test's runtime ends.
pub async fn silent_server() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    addr
}
