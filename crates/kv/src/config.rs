//! `[kv]`: where data lives, how hard each write is pushed to disk, which
//! nodes form the cluster and how they authenticate each other. KV is on
//! when the section exists. [`KvConfig::validate`] checks that the pieces
//! fit; its errors name the key.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::KvError;

/// Default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = "data/kv";
/// Default fsync interval of the `interval_ms:N` policy.
pub const DEFAULT_SYNC_INTERVAL_MS: u64 = 1_000;
/// How long a tombstone is kept before it may be purged: 10 days
/// (Cassandra's `gc_grace_seconds`). A replica that was away longer than
/// this may bring a deleted value back.
pub const DEFAULT_TOMBSTONE_GRACE_MS: u64 = 10 * 24 * 3600 * 1000;
/// How long a coordinator waits for `ack` replicas before answering 504.
pub const DEFAULT_REPLICA_TIMEOUT_MS: u64 = 1_000;
/// Default time between two anti-entropy passes: 10 minutes. A pass
/// compares one hash tree per peer (a scan of the local data, shared by
/// all peers) and streams only the differing ranges.
pub const DEFAULT_ANTI_ENTROPY_INTERVAL_MS: u64 = 10 * 60 * 1000;
/// Largest accepted `cache_mb` (1 TiB): beyond it a typo, not a size.
const MAX_CACHE_MB: u64 = 1024 * 1024;
/// Default size of the engine's block cache, MiB.
pub const DEFAULT_CACHE_MB: u64 = 32;
/// Default bound on the bytes of one replica's pending hints: 1 GiB.
/// Enough for a long outage of small writes (100,000 hints of 10 KiB) and
/// for a few values of the default `[http] max_body_bytes` (256 MiB), so
/// the largest value a client may write can still be hinted; small enough
/// that the hints for every peer together (a coordinator keeps them per
/// peer) stay a fraction of a data disk, and that a returning replica
/// takes them in seconds over a LAN. A replica that missed more than this
/// is better served by anti-entropy, which streams only what differs.
pub const DEFAULT_MAX_HINT_BYTES_PER_NODE: u64 = 1024 * 1024 * 1024;
/// Largest key (`id`) accepted, bytes. fjall allows 64 KiB; a key also
/// travels in URLs, so it is kept well below what proxies accept.
pub const MAX_KEY_BYTES: usize = 4 * 1024;

/// When a write reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// `fdatasync` before answering each write: nothing answered is lost,
    /// even on power loss.
    Always,
    /// Every write is handed to the OS before it is answered (survives
    /// kill -9) and the journal is `fdatasync`ed every N ms (a power loss
    /// loses at most the last N ms).
    IntervalMs(u64),
    /// Writes stay in the process's journal buffer until it fills or the
    /// process stops cleanly: kill -9 loses the recent writes.
    None,
}

impl Default for SyncPolicy {
    fn default() -> Self {
        SyncPolicy::IntervalMs(DEFAULT_SYNC_INTERVAL_MS)
    }
}

impl fmt::Display for SyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncPolicy::Always => f.write_str("always"),
            SyncPolicy::IntervalMs(n) => write!(f, "interval_ms:{n}"),
            SyncPolicy::None => f.write_str("none"),
        }
    }
}

impl std::str::FromStr for SyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(SyncPolicy::Always),
            "none" => Ok(SyncPolicy::None),
            _ => match s.strip_prefix("interval_ms:").map(str::parse::<u64>) {
                Some(Ok(n)) if n > 0 => Ok(SyncPolicy::IntervalMs(n)),
                _ => Err(format!(
                    "{s:?}: expected \"always\", \"none\" or \"interval_ms:N\" with N > 0"
                )),
            },
        }
    }
}

impl Serialize for SyncPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SyncPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// `[kv]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvConfig {
    /// The engine's directory; created (again) on start when missing.
    pub data_dir: PathBuf,
    /// This node, written exactly as in `nodes`. Required when `nodes`
    /// is not empty.
    #[serde(rename = "self", skip_serializing_if = "Option::is_none")]
    pub self_url: Option<String>,
    /// The whole cluster as `http://host:port` URLs, the same list on every
    /// node. Empty: a single node (this one).
    pub nodes: Vec<String>,
    /// `"always"`, `"interval_ms:N"` (default `interval_ms:1000`) or `"none"`.
    pub sync: SyncPolicy,
    /// Tombstones older than this are purged.
    pub tombstone_grace_ms: u64,
    /// How long a coordinator waits for `ack` replicas (then 504).
    pub replica_timeout_ms: u64,
    /// Shared secret of the HMAC on internal requests; required with more
    /// than one node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_secret: Option<String>,
    /// Time between two anti-entropy passes (Merkle-tree comparison with
    /// every peer); 0 turns anti-entropy off. Must be shorter than
    /// `tombstone_grace_ms`, so a tombstone reaches every live replica
    /// before any replica may purge it.
    pub anti_entropy_interval_ms: u64,
    /// Send replica reads and writes per peer in batches (one signed
    /// request for whatever queued meanwhile) instead of one request each.
    pub replica_batching: bool,
    /// Let every async worker write the journal at once, instead of one at a
    /// time with concurrent writes handed to the blocking pool
    /// ([`crate::storage_slot`]). A little faster on a node that serves KV
    /// only, but fjall holds its journal lock across an fsync when it
    /// flushes a memtable, and the workers waiting on that lock stall every
    /// request of the process (push, wire, Forward, GETs) meanwhile.
    pub inline_writes: bool,
    /// Let every async worker read the engine at once, instead of one at a
    /// time with concurrent reads handed to the blocking pool
    /// ([`crate::storage_slot`]). A little faster under a read load, but
    /// lsm-tree holds the version lock every read takes across an fsync
    /// after each flush and compaction, and the workers waiting on it stall
    /// every request of the process meanwhile.
    pub inline_reads: bool,
    /// MiB of the engine's block cache (decoded table blocks kept in
    /// memory). A write reads the stored version first (last-write-wins),
    /// so overwrites of keys not in the cache read from the files.
    pub cache_mb: u64,
    /// Most bytes of hints kept for one replica (each hint counts its key
    /// and its stored record); a hint past it is dropped and counted.
    /// 0 keeps no hints.
    pub max_hint_bytes_per_node: u64,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            self_url: None,
            nodes: Vec::new(),
            sync: SyncPolicy::default(),
            tombstone_grace_ms: DEFAULT_TOMBSTONE_GRACE_MS,
            replica_timeout_ms: DEFAULT_REPLICA_TIMEOUT_MS,
            cluster_secret: None,
            anti_entropy_interval_ms: DEFAULT_ANTI_ENTROPY_INTERVAL_MS,
            replica_batching: true,
            inline_writes: false,
            inline_reads: false,
            cache_mb: DEFAULT_CACHE_MB,
            max_hint_bytes_per_node: DEFAULT_MAX_HINT_BYTES_PER_NODE,
        }
    }
}

impl KvConfig {
    /// Checks that the keys fit together; the error names the key.
    pub fn validate(&self) -> Result<(), KvError> {
        let bad = |key, message: String| Err(KvError::Config { key, message });
        if self.replica_timeout_ms == 0 {
            return bad("replica_timeout_ms", "must be > 0".into());
        }
        if self.cache_mb == 0 || self.cache_mb > MAX_CACHE_MB {
            return bad("cache_mb", format!("must be between 1 and {MAX_CACHE_MB}"));
        }
        if self.tombstone_grace_ms == 0 {
            return bad("tombstone_grace_ms", "must be > 0".into());
        }
        for n in &self.nodes {
            if let Err(e) = parse_node_url(n) {
                return bad("nodes", format!("{n:?}: {e}"));
            }
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if self.nodes[..i].contains(n) {
                return bad("nodes", format!("{n:?} is listed twice"));
            }
        }
        match &self.self_url {
            None if !self.nodes.is_empty() => {
                return bad("self", "required when `nodes` is set".into())
            }
            Some(s) if !self.nodes.is_empty() && !self.nodes.contains(s) => {
                return bad("self", format!("{s:?} is not one of `nodes`"))
            }
            _ => {}
        }
        let secret_empty = self.cluster_secret.as_deref().is_none_or(str::is_empty);
        if self.nodes.len() > 1 && secret_empty {
            return bad(
                "cluster_secret",
                "required with more than one node (internal writes are signed with it)".into(),
            );
        }
        if self.nodes.len() > 1
            && self.anti_entropy_interval_ms != 0
            && self.anti_entropy_interval_ms >= self.tombstone_grace_ms
        {
            return bad(
                "anti_entropy_interval_ms",
                format!(
                    "{} must be shorter than tombstone_grace_ms ({}): a tombstone purged \
                     before a pass carried it to every replica lets anti-entropy bring the \
                     deleted value back (0 turns anti-entropy off)",
                    self.anti_entropy_interval_ms, self.tombstone_grace_ms
                ),
            );
        }
        Ok(())
    }
}

/// Checks an `http://host:port` node URL and returns its authority.
pub fn parse_node_url(url: &str) -> Result<&str, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("expected http://host:port")?;
    let (host, port) = rest.rsplit_once(':').ok_or("expected http://host:port")?;
    if host.is_empty() || rest.contains('/') {
        return Err("expected http://host:port (no path)".into());
    }
    port.parse::<u16>()
        .map_err(|_| format!("port {port:?} is not a number"))?;
    Ok(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_policy_round_trips_and_refuses_nonsense() {
        for s in ["always", "none", "interval_ms:250"] {
            assert_eq!(s.parse::<SyncPolicy>().unwrap().to_string(), s);
        }
        for s in [
            "sometimes",
            "interval_ms:",
            "interval_ms:0",
            "interval_ms:x",
        ] {
            assert!(s.parse::<SyncPolicy>().is_err(), "{s}");
        }
    }

    #[test]
    fn validation_names_the_key() {
        let mut c = KvConfig {
            nodes: vec!["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()],
            ..KvConfig::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("[kv] self"));
        c.self_url = Some("http://127.0.0.1:3".into());
        assert!(c.validate().unwrap_err().to_string().contains("[kv] self"));
        c.self_url = Some("http://127.0.0.1:2".into());
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("[kv] cluster_secret"), "{e}");
        c.cluster_secret = Some("s".into());
        c.validate().unwrap();
        c.tombstone_grace_ms = c.anti_entropy_interval_ms;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("[kv] anti_entropy_interval_ms"), "{e}");
        c.anti_entropy_interval_ms = 0;
        c.validate().unwrap();
        c.nodes.push("localhost:9".into());
        assert!(c.validate().unwrap_err().to_string().contains("[kv] nodes"));
    }
}
