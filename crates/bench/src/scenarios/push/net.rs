//! Client sockets spread over 127.0.0.0/8: thousands of sessions from one
//! source address would share one ephemeral port range, so client `i`
//! binds its own loopback address before connecting (any 127.x.y.z
//! reaches a server listening on 127.0.0.1).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use tokio::net::{TcpSocket, TcpStream};

/// The source address of client `i`: 127.a.b.c with every byte in
/// 1..=250, so 15.6 million clients before one repeats.
pub fn source_ip(i: usize) -> Ipv4Addr {
    let n = i % (250 * 250 * 250);
    Ipv4Addr::new(
        127,
        (n / 62_500) as u8 + 1,
        ((n / 250) % 250) as u8 + 1,
        (n % 250) as u8 + 1,
    )
}

/// Connects to `server` from client `i`'s own loopback address (when the
/// server is on loopback), with Nagle off.
pub async fn connect(server: SocketAddr, i: usize) -> std::io::Result<TcpStream> {
    let sock = TcpSocket::new_v4()?;
    if server.ip().is_loopback() {
        sock.bind(SocketAddr::new(IpAddr::V4(source_ip(i)), 0))?;
    }
    let s = sock.connect(server).await?;
    s.set_nodelay(true)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_get_distinct_loopback_addresses() {
        assert_eq!(source_ip(0), Ipv4Addr::new(127, 1, 1, 1));
        assert_eq!(source_ip(251), Ipv4Addr::new(127, 1, 2, 2));
        let all: std::collections::HashSet<_> = (0..100_000).map(source_ip).collect();
        assert_eq!(all.len(), 100_000);
        assert!(all.iter().all(|a| a.is_loopback()));
    }
}
