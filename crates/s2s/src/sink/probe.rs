//! [`probe`]: `tidegate config --probe` for `[sinks.s2s]` — discovery and
//! the peer list from the configured NiFi, reported in a few lines.

use std::time::Duration;

use super::config::S2sSinkConfig;
use super::peers::PeerDirectory;
use crate::tls::ClientTls;

/// Asks the configured NiFi for the input port and its peers.
pub async fn probe(config: &S2sSinkConfig, timeout: Duration) -> Result<String, String> {
    let urls = config.validate().map_err(|e| e.to_string())?;
    let tls = match &config.tls {
        Some(t) => Some(
            ClientTls::from_pem(&t.ca, &t.cert, &t.key)
                .map_err(|e| format!("[sinks.s2s.tls]: {e}"))?,
        ),
        None => None,
    };
    let probe_config = S2sSinkConfig {
        timeout_ms: timeout.as_millis().max(1) as u64,
        ..config.clone()
    };
    let dir = PeerDirectory::new(&probe_config, urls, tls);
    let site = dir.fetch_any().await.map_err(|e| e.to_string())?;
    let mut out = format!(
        "  input port {:?} has id {}\n  {} peer(s) for {:?}:\n",
        config.port,
        site.port_id,
        site.peers.len(),
        config.transport
    );
    for p in &site.peers {
        out.push_str(&format!(
            "    {}:{} secure = {} flowfiles queued = {}\n",
            p.host, p.port, p.secure, p.flow_files
        ));
    }
    Ok(out)
}
