//! [`PeerDirectory`]: which NiFi node the next connection goes to.
//!
//! As NiFi's client does: discovery (`GET /nifi-api/site-to-site`) on the
//! first configured URL that answers gives the input port's id, the RAW
//! port and whether RAW needs TLS; the peer list (RAW `REQUEST_PEER_LIST`,
//! or `GET /nifi-api/site-to-site/peers` for HTTP) gives every node with
//! its queued FlowFile count. The list is fetched again every
//! `peer_refresh_ms`, or at once after a connection failed.
//!
//! A send goes preferably to the node with the fewest FlowFiles queued:
//! each peer's weight is `total - its count + 1`, so with equal counts the
//! choice is uniform and a node holding everything is still chosen now and
//! then (NiFi's `PeerSelector` works the same way: it spreads by the
//! counts' complement).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::{debug, warn};

use super::config::{resolve, NifiUrl, S2sSinkConfig, Transport};
use crate::client::{discover_with, http_peers, ClientError, ClientOptions, DynStream, RawClient};
use crate::codec::{PeerInfo, ResponseCode};
use crate::tls::ClientTls;

/// One NiFi node as the peer list names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Host name to connect to.
    pub host: String,
    /// RAW or HTTP port, by the transport in use.
    pub port: u16,
    /// The port speaks TLS.
    pub secure: bool,
    /// FlowFiles queued on the node when the list was fetched.
    pub flow_files: u64,
}

/// What discovery and the peer list said.
#[derive(Debug, Clone)]
pub struct Site {
    /// The input port's id on this NiFi.
    pub port_id: String,
    /// The nodes.
    pub peers: Vec<Peer>,
    fetched: Instant,
}

/// The peers of the configured NiFi, fetched and refreshed on demand.
#[derive(Debug)]
pub struct PeerDirectory {
    urls: Vec<NifiUrl>,
    port: String,
    transport: Transport,
    timeout: Duration,
    refresh: Duration,
    tls: Option<ClientTls>,
    site: Mutex<Option<Site>>,
    seed: AtomicU64,
}

/// Weights of `counts` for choosing where to send: fewer queued, more weight.
pub fn weights(counts: &[u64]) -> Vec<u64> {
    let total: u64 = counts.iter().sum();
    counts
        .iter()
        .map(|c| total.saturating_sub(*c).saturating_add(1))
        .collect()
}

/// Index chosen by `weights` for the random number `r`.
fn choose(weights: &[u64], r: u64) -> usize {
    let total: u64 = weights.iter().sum::<u64>().max(1);
    let mut x = r % total;
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    weights.len().saturating_sub(1)
}

fn peer(p: &PeerInfo) -> Option<Peer> {
    Some(Peer {
        host: p.host.clone(),
        port: u16::try_from(p.port).ok()?,
        secure: p.secure,
        flow_files: u64::try_from(p.flow_file_count).unwrap_or(0),
    })
}

impl PeerDirectory {
    /// A directory for `config` (already validated into `urls`).
    pub fn new(config: &S2sSinkConfig, urls: Vec<NifiUrl>, tls: Option<ClientTls>) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1;
        PeerDirectory {
            urls,
            port: config.port.clone(),
            transport: config.transport,
            timeout: config.timeout(),
            refresh: Duration::from_millis(config.peer_refresh_ms),
            tls,
            site: Mutex::new(None),
            seed: AtomicU64::new(seed),
        }
    }

    /// The client TLS settings, if configured.
    pub fn tls(&self) -> Option<&ClientTls> {
        self.tls.as_ref()
    }

    /// xorshift64*: enough to spread connections, no dependency.
    fn random(&self) -> u64 {
        let mut x = self.seed.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.seed.store(x, Ordering::Relaxed);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Forgets the peer list: the next [`Self::pick`] fetches it again.
    pub fn invalidate(&self) {
        if let Some(s) = self.site.lock().as_mut() {
            s.fetched = Instant::now() - self.refresh;
        }
    }

    /// The site as last fetched, if any (tests, probe).
    pub fn site(&self) -> Option<Site> {
        self.site.lock().clone()
    }

    /// A peer to send to and the port id there, fetching the peer list
    /// first when there is none or it is older than `peer_refresh_ms`. A
    /// failed refresh keeps using the old list if there is one.
    pub async fn pick(&self) -> Result<(Peer, String), ClientError> {
        let stale = match self.site.lock().as_ref() {
            Some(s) => s.fetched.elapsed() >= self.refresh,
            None => true,
        };
        if stale {
            match self.fetch_any().await {
                Ok(site) => *self.site.lock() = Some(site),
                Err(e) => {
                    let mut cur = self.site.lock();
                    match cur.as_mut() {
                        // Try again after the next failure, not at once.
                        Some(s) => s.fetched = Instant::now(),
                        None => return Err(e),
                    }
                }
            }
        }
        let site = self.site.lock().clone().ok_or_else(|| {
            ClientError::Protocol("no peer list from any configured NiFi URL".into())
        })?;
        let counts: Vec<u64> = site.peers.iter().map(|p| p.flow_files).collect();
        let i = choose(&weights(&counts), self.random());
        Ok((site.peers[i].clone(), site.port_id))
    }

    /// Discovery and the peer list from the first URL that answers.
    pub async fn fetch_any(&self) -> Result<Site, ClientError> {
        let mut last = None;
        for url in &self.urls {
            match self.fetch(url).await {
                Ok(site) => return Ok(site),
                Err(e) => {
                    warn!(host = %url.host, port = url.port, error = %e, "s2s sink: NiFi did not answer discovery");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| ClientError::Protocol("no NiFi URL configured".into())))
    }

    async fn fetch(&self, url: &NifiUrl) -> Result<Site, ClientError> {
        let addr = url.resolve().await?;
        let tls = if url.secure { self.tls.as_ref() } else { None };
        let d = discover_with(addr, tls, self.timeout).await?;
        let port_id = d
            .input_ports
            .iter()
            .find(|(name, id)| *name == self.port || *id == self.port)
            .map(|(_, id)| id.clone())
            .ok_or_else(|| {
                ClientError::Refused(
                    ResponseCode::UnknownPort,
                    format!("NiFi has no input port named or identified {:?}", self.port),
                )
            })?;
        let peers = match self.transport {
            Transport::Raw => {
                let raw = d.raw_port.ok_or_else(|| {
                    ClientError::Protocol(
                        "NiFi has no RAW Site-to-Site port (nifi.remote.input.socket.port)".into(),
                    )
                })?;
                let list = self.raw_peer_list(&url.host, raw, d.secure).await;
                let listed: Vec<Peer> = list
                    .as_deref()
                    .unwrap_or_default()
                    .iter()
                    .filter_map(peer)
                    .collect();
                if listed.is_empty() {
                    debug!(error = ?list.err(), "s2s sink: no RAW peer list; using the discovery host");
                    vec![Peer {
                        host: url.host.clone(),
                        port: raw,
                        secure: d.secure,
                        flow_files: 0,
                    }]
                } else {
                    listed
                }
            }
            Transport::Http => {
                let listed: Vec<Peer> = http_peers(addr, tls, self.timeout)
                    .await
                    .unwrap_or_default()
                    .iter()
                    .filter_map(peer)
                    // The URL's scheme says whether the web port is https.
                    .map(|p| Peer {
                        secure: p.secure || url.secure,
                        ..p
                    })
                    .collect();
                if listed.is_empty() {
                    vec![Peer {
                        host: url.host.clone(),
                        port: url.port,
                        secure: url.secure,
                        flow_files: 0,
                    }]
                } else {
                    listed
                }
            }
        };
        Ok(Site {
            port_id,
            peers,
            fetched: Instant::now(),
        })
    }

    /// `REQUEST_PEER_LIST` on a RAW connection without a port.
    async fn raw_peer_list(
        &self,
        host: &str,
        port: u16,
        secure: bool,
    ) -> Result<Vec<PeerInfo>, ClientError> {
        let mut c = self.raw_connect(host, port, secure, None, false).await?;
        let peers = c.peer_list().await;
        c.shutdown().await;
        peers
    }

    /// A RAW connection to `host:port`, TLS when `secure`, handshaken for
    /// `port_id` when given.
    pub async fn raw_connect(
        &self,
        host: &str,
        port: u16,
        secure: bool,
        port_id: Option<&str>,
        gzip: bool,
    ) -> Result<RawClient<DynStream>, ClientError> {
        let addr = resolve(host, port).await?;
        let opts = ClientOptions {
            gzip,
            timeout: self.timeout,
            batch_count: None,
        };
        let connect = async {
            match (secure, &self.tls) {
                (false, _) => RawClient::connect_dyn(addr, port_id, opts).await,
                (true, Some(tls)) => tls.connect(addr, port_id, opts).await,
                (true, None) => Err(ClientError::Protocol(
                    "NiFi's RAW port is secure: configure [sinks.s2s.tls]".into(),
                )),
            }
        };
        tokio::time::timeout(self.timeout, connect)
            .await
            .map_err(|_| {
                ClientError::Frame(crate::frame_io::FrameError::Timeout("a RAW connection"))
            })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewer_queued_flowfiles_weigh_more() {
        assert_eq!(weights(&[0, 0]), vec![1, 1]);
        assert_eq!(weights(&[10, 0]), vec![1, 11]);
        assert_eq!(weights(&[5]), vec![1]);
    }

    #[test]
    fn choices_follow_the_weights() {
        let w = weights(&[90, 10]);
        let (mut a, mut b) = (0, 0);
        let dir_seed = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
        for _ in 0..10_000 {
            let mut x = dir_seed.load(Ordering::Relaxed);
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            dir_seed.store(x, Ordering::Relaxed);
            match choose(&w, x.wrapping_mul(0x2545_F491_4F6C_DD1D)) {
                0 => a += 1,
                _ => b += 1,
            }
        }
        // Weights 11 : 91 — the emptier node gets about 89 % of the picks.
        assert!(b > a * 5, "{a} vs {b}");
        assert_eq!(choose(&[0, 0, 5], 3), 2);
    }
}
