//! Helpers shared by the tests of every Tidegate crate (never a dependency
//! of the binary).
//!
//! [`free_addrs`]: loopback ports for a server a test starts later, often
//! in another process (a `tidegate serve` child, a Kafka broker, a
//! receiver process). A port picked with `bind(0)` and released lies in
//! Linux's ephemeral range (32768 and up), where the kernel also takes the
//! source ports of outgoing connections: while the test was starting its
//! server, a connection of a test running beside it could take that port,
//! and the server's bind failed with "Address already in use" (seen in CI).
//! These ports come from below that range, and one process never hands the
//! same port out twice.

#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::net::{SocketAddr, TcpListener};
use std::ops::Range;
use std::sync::Mutex;

/// Where test ports are picked: below Linux's default ephemeral range
/// (32768 and up) and clear of Tidegate's defaults (8080, 9998, 10000,
/// 11111, 24224). [`test_ports`] narrows it when the machine's range
/// starts lower.
pub const TEST_PORTS: Range<u16> = 12_000..24_000;

/// [`TEST_PORTS`], ending where this machine's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`) starts, if that is lower;
/// all of it when the file cannot be read or leaves fewer than 1,000
/// ports (nothing better to pick from then).
pub fn test_ports() -> Range<u16> {
    let first_ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok());
    match first_ephemeral {
        Some(first) if (TEST_PORTS.start + 1_000..TEST_PORTS.end).contains(&first) => {
            TEST_PORTS.start..first
        }
        _ => TEST_PORTS,
    }
}

/// Every port this process handed out: never one twice, whatever each
/// test does with its ports meanwhile (with one `bind(0)` per port, the OS
/// sometimes gave one port twice, and a cluster test got a node list naming
/// one address twice).
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A free loopback address (see [`free_addrs`]).
pub fn free_addr() -> SocketAddr {
    free_addrs(1)[0]
}

/// `n` distinct free loopback addresses from [`test_ports`]: each bound to
/// check it is free, all held until every one is picked, then released
/// for the caller's server to bind.
///
/// # Panics
/// When no free port is found in 100,000 tries.
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut held: Vec<TcpListener> = Vec::with_capacity(n);
    let range = test_ports();
    let span = u64::from(range.end - range.start);
    let mut tries = 0u32;
    while held.len() < n {
        tries += 1;
        assert!(tries < 100_000, "no free test port left in {range:?}");
        // A random start for every pick, so that test processes running at
        // the same moment rarely try the same ports.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(tries);
        let port = range.start + (h.finish() % span) as u16;
        if handed_out.contains(&port) {
            continue;
        }
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            handed_out.insert(port);
            held.push(l);
        }
    }
    held.iter()
        .map(|l| l.local_addr().expect("a bound listener has an address"))
        .collect()
}

/// [`free_addrs`] as an array, for `let [http, wire] = free_ports();`.
pub fn free_ports<const N: usize>() -> [SocketAddr; N] {
    free_addrs(N)
        .try_into()
        .expect("free_addrs returns N addresses")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_below_the_ephemeral_range_and_bindable() {
        let a = free_addrs(50);
        let b: [SocketAddr; 50] = free_ports();
        let all: BTreeSet<u16> = a.iter().chain(&b).map(|a| a.port()).collect();
        assert_eq!(all.len(), 100, "a port was handed out twice");
        for addr in a.iter().chain(&b) {
            assert!(test_ports().contains(&addr.port()), "{addr}");
            assert!(addr.ip().is_loopback());
            TcpListener::bind(addr).expect("released for the caller");
        }
    }
}
