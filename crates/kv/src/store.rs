//! The coordinator: a client request to any node is served by fanning out
//! to the key's `from` replicas (rendezvous order) concurrently and
//! answering once `ack` of them succeeded, or 504 when that cannot happen
//! within `[kv] replica_timeout_ms`. This node takes part only when it is
//! one of the replicas: a non-owner never answers from its own data.
//!
//! Writes are stamped here (a per-process strictly increasing clock in
//! ns), so every replica stores the same record and resolves
//! last-write-wins the same way. Replica writes that are still running when
//! the quorum is reached keep running to completion in the background.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use tidegate_hub::Hub;

use crate::client::ReplicaClient;
use crate::config::KvConfig;
use crate::engine::{now_ns, Engine};
use crate::error::KvError;
use crate::record::Record;
use crate::ring::Ring;
use crate::watch;

/// The KV store of this process: the local engine and the way to its peers.
#[derive(Clone)]
pub struct KvStore {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Arc<Engine>,
    ring: Ring,
    client: ReplicaClient,
    secret: Option<Bytes>,
    replica_timeout: Duration,
    last_stamp: AtomicU64,
    hub: Option<Hub>,
}

impl KvStore {
    /// Validates `config` and opens the engine; `hub` (when given) receives
    /// every accepted write. Must run inside a tokio runtime.
    pub fn open(config: &KvConfig, hub: Option<Hub>) -> Result<Self, KvError> {
        config.validate()?;
        let engine = Arc::new(Engine::open(&config.data_dir, config.sync)?);
        engine.start_maintenance(Duration::from_millis(config.tombstone_grace_ms));
        let ring = match &config.self_url {
            Some(me) if !config.nodes.is_empty() => {
                let i = config.nodes.iter().position(|n| n == me).unwrap_or(0);
                Ring::new(config.nodes.clone(), i)
            }
            _ => Ring::new(vec![config.self_url.clone().unwrap_or_default()], 0),
        };
        let secret = config
            .cluster_secret
            .as_ref()
            .filter(|s| !s.is_empty())
            .map(|s| Bytes::copy_from_slice(s.as_bytes()));
        Ok(KvStore {
            inner: Arc::new(Inner {
                engine,
                ring,
                client: ReplicaClient::new(secret.clone().unwrap_or_default()),
                secret,
                replica_timeout: Duration::from_millis(config.replica_timeout_ms),
                last_stamp: AtomicU64::new(0),
                hub,
            }),
        })
    }

    /// Number of nodes in the cluster.
    pub fn cluster_size(&self) -> usize {
        self.inner.ring.len()
    }

    /// The secret internal requests are signed with, if configured.
    pub fn secret(&self) -> Option<&[u8]> {
        self.inner.secret.as_deref()
    }

    /// The local engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.inner.engine
    }

    /// A timestamp later than every one this process gave before: the
    /// wall clock in ns, or one more than the last stamp when the clock has
    /// not moved (or went back).
    fn stamp(&self) -> u64 {
        let now = now_ns();
        let last = &self.inner.last_stamp;
        let mut cur = last.load(Ordering::Acquire);
        loop {
            let next = now.max(cur + 1);
            match last.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return next,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Reads this node's own version of `key` (internal requests).
    pub async fn local_get(&self, key: Bytes) -> Result<Option<Record>, KvError> {
        let engine = self.inner.engine.clone();
        blocking(move || engine.get(&key)).await
    }

    /// Applies a stamped record locally (internal requests).
    pub async fn local_apply(&self, key: Bytes, record: Record) -> Result<bool, KvError> {
        let engine = self.inner.engine.clone();
        blocking(move || engine.apply(&key, &record)).await
    }

    /// A client GET: the newest version among the first `ack` replicas of
    /// `from` that answer; `None` for absent or deleted.
    pub async fn get(&self, key: Bytes, ack: usize, from: usize) -> Result<Option<Bytes>, KvError> {
        let mut pending: FuturesUnordered<_> = self
            .inner
            .ring
            .replicas(&key, from)
            .into_iter()
            .map(|node| {
                let (store, key) = (self.clone(), key.clone());
                async move {
                    if node == store.inner.ring.self_index() {
                        store.local_get(key).await.map_err(|e| e.to_string())
                    } else {
                        let url = store.inner.ring.url(node);
                        store
                            .inner
                            .client
                            .get(url, &key)
                            .await
                            .map_err(|e| e.to_string())
                    }
                }
            })
            .collect();
        let mut newest: Option<Record> = None;
        let mut got = 0;
        let gather = async {
            while let Some(answer) = pending.next().await {
                match answer {
                    Ok(r) => {
                        got += 1;
                        if let Some(r) = r {
                            if newest.as_ref().is_none_or(|n| r.supersedes(n)) {
                                newest = Some(r);
                            }
                        }
                        if got >= ack {
                            return;
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "kv: replica read failed"),
                }
            }
        };
        let _ = tokio::time::timeout(self.inner.replica_timeout, gather).await;
        if got < ack {
            return Err(KvError::NotEnoughReplicas { got, needed: ack });
        }
        Ok(newest.filter(|r| !r.tombstone).map(|r| r.value))
    }

    /// A client PUT (`Some(value)`) or DELETE (`None`): stamps the write,
    /// sends it to the `from` replicas and returns once `ack` stored it.
    pub async fn write(
        &self,
        key: Bytes,
        value: Option<Bytes>,
        ack: usize,
        from: usize,
    ) -> Result<(), KvError> {
        let ts = self.stamp();
        let record = match value {
            Some(v) => Record::value(ts, v),
            None => Record::tombstone(ts),
        };
        let mut pending: FuturesUnordered<_> = self
            .inner
            .ring
            .replicas(&key, from)
            .into_iter()
            .map(|node| {
                let (store, key, record) = (self.clone(), key.clone(), record.clone());
                // Spawned, so a replica write still running when the quorum
                // is reached (or the client went away) completes anyway.
                tokio::spawn(async move {
                    if node == store.inner.ring.self_index() {
                        store
                            .local_apply(key, record)
                            .await
                            .map(drop)
                            .map_err(|e| e.to_string())
                    } else {
                        let url = store.inner.ring.url(node);
                        let sent = store.inner.client.put(url, &key, &record);
                        match tokio::time::timeout(store.inner.replica_timeout, sent).await {
                            Ok(r) => r.map_err(|e| e.to_string()),
                            Err(_) => Err(format!("{url}: no answer in time")),
                        }
                    }
                })
            })
            .collect();
        let mut got = 0;
        let gather = async {
            while let Some(answer) = pending.next().await {
                match answer {
                    Ok(Ok(())) => {
                        got += 1;
                        if got >= ack {
                            return;
                        }
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "kv: replica write failed"),
                    Err(e) => tracing::warn!(error = %e, "kv: replica write task failed"),
                }
            }
        };
        let _ = tokio::time::timeout(self.inner.replica_timeout, gather).await;
        if got < ack {
            return Err(KvError::NotEnoughReplicas { got, needed: ack });
        }
        if let Some(hub) = &self.inner.hub {
            watch::publish(hub, &key, &record).await;
        }
        Ok(())
    }
}

/// Runs a blocking storage call on tokio's blocking pool, so disk waits
/// (an fsync under `sync = "always"`, a cold read) never stall the async
/// workers that serve other connections.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, KvError> + Send + 'static,
) -> Result<T, KvError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| KvError::Task(e.to_string()))?
}
