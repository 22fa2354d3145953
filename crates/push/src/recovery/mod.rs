//! Connection state recovery (Socket.IO ≥ 4.6 semantics, and the same for
//! `/ws`): every event a session sends carries an offset; a session whose
//! transport is lost is *parked* for `[push] recovery_window_ms` — its
//! subscriptions stay in place — and a client that comes back with the
//! session's id (Socket.IO's `pid`) and its last offset takes the session
//! over and is sent every event after that offset, exactly once and in
//! order, from the hub's bounded per-topic history
//! ([`tidegate_hub::history`]). Past the window, or when the history no
//! longer holds what the client missed, it gets a clean "not recovered" and
//! starts afresh.
//!
//! An offset is the message's hub-wide history sequence: with recovery on,
//! the hub fans out in sequence order under the history's lock, so every
//! session receives its messages in that order, the same event carries the
//! same offset in every session (its encoding is shared), and a parked
//! session keeps nothing of its own. Each subscription remembers the
//! sequence it started at ([`Since`]), so a replay gives a topic's messages
//! only from when the session wanted them.
//!
//! Here: the registry of recoverable sessions by id ([`RecoveryRegistry`]),
//! the handle through which a live or parked session is asked to hand its
//! state over, the parked task ([`park`]), and the replay bound.

pub mod cluster;
pub mod park;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tidegate_hub::HubMetrics;
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::engineio::handshake::new_sid;

pub use tidegate_hub::history::Since;
use tidegate_hub::{History, NotKept, SharedMessage};

use crate::session::engine::OUTBOX_HARD_LIMIT;

/// Most messages one recovery replays; past it the client is answered "not
/// recovered". The replay goes into the session's outbox at once, behind
/// the CONNECT answer, and must fit under [`OUTBOX_HARD_LIMIT`] (a binary
/// event takes two packets), or the session would close itself.
pub const MAX_REPLAY: usize = OUTBOX_HARD_LIMIT / 2 - 64;

/// Most backbone messages one cluster recovery may read (all partitions
/// together, matching or not), `/ws` or Socket.IO: a client further behind
/// is refused and starts over.
pub const MAX_CLUSTER_REPLAY: usize = 100_000;

/// The history's next sequence, for a subscription made now (0 without a
/// history).
pub fn now(history: Option<&Arc<History>>) -> u64 {
    history.map_or(0, |h| h.next_seq())
}

/// The messages after `offset` that `since` wanted, in order, and the
/// sequence live delivery goes on from.
pub fn replay(
    history: &History,
    offset: u64,
    since: &Since,
) -> Result<(Vec<SharedMessage>, u64), NotKept> {
    history.replay(offset, MAX_REPLAY, since)
}

/// How long a reconnecting client waits for the old session to hand its
/// state over (it is answered within one wake-up of that session's task).
pub const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// The protocol a recoverable session speaks: only a client of the same
/// one can take it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `/ws`.
    Json,
    /// Socket.IO.
    SocketIo,
}

/// Who may take a session over, fixed when it is registered: a client of
/// the same protocol whose token names the same subject (`sub`; none with
/// auth off). Checked *before* the owner is asked for its state, so a
/// refused takeover leaves the session alone (asking closes its transport).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The session's protocol.
    pub protocol: Protocol,
    /// Its token's subject.
    pub subject: Option<String>,
}

impl Claim {
    /// A claim of `protocol` for the subject of `grants`.
    pub fn new(protocol: Protocol, grants: &crate::auth::Grants) -> Self {
        Claim {
            protocol,
            subject: grants.subject().map(str::to_owned),
        }
    }
}

/// Why [`RecoveryRegistry::take`] handed no state over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotTaken {
    /// No such session (never, expired, ended), or it did not answer in
    /// time (or before the server began shutting down), or another
    /// reconnect is taking it over.
    Unknown,
    /// The session belongs to another subject or protocol; it was left
    /// alone.
    OtherOwner,
}

/// Where a session that owns recoverable state is asked to give it up.
#[derive(Debug)]
pub struct RecoveryHandle {
    requested: Notify,
    reply: Mutex<Option<oneshot::Sender<App>>>,
    claim: Claim,
}

impl RecoveryHandle {
    fn new(claim: Claim) -> Self {
        RecoveryHandle {
            requested: Notify::new(),
            reply: Mutex::new(None),
            claim,
        }
    }
}

impl RecoveryHandle {
    /// Resolves when a reconnecting client asks for this session's state.
    pub async fn requested(&self) {
        self.requested.notified().await
    }

    /// Where to send the state, once requested (None if the asker is gone
    /// or nobody asked).
    pub fn take_reply(&self) -> Option<oneshot::Sender<App>> {
        self.reply.lock().take()
    }
}

/// The registration of one recoverable session; dropping it (the session
/// ended for good) forgets the id.
#[derive(Debug)]
pub struct Ticket {
    pid: String,
    handle: Arc<RecoveryHandle>,
    registry: Arc<RecoveryRegistry>,
}

impl Ticket {
    /// The session id a client recovers with (Socket.IO's `pid`).
    pub fn pid(&self) -> &str {
        &self.pid
    }

    /// The handle its owner listens on.
    pub fn handle(&self) -> &Arc<RecoveryHandle> {
        &self.handle
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut m = self.registry.map.lock();
        if m.get(&self.pid)
            .is_some_and(|h| Arc::ptr_eq(h, &self.handle))
        {
            m.remove(&self.pid);
        }
    }
}

/// Recoverable sessions (live and parked) by id, and recovery counters
/// (exported as `tidegate_push_parked_sessions`,
/// `tidegate_push_recovered_total`, `tidegate_push_not_recovered_total`).
#[derive(Debug, Default)]
pub struct RecoveryRegistry {
    map: Mutex<HashMap<String, Arc<RecoveryHandle>>>,
    pub(crate) parked: Gauge,
    recovered: Counter,
    recovered_from_backbone: Counter,
    not_recovered: Counter,
}

impl RecoveryRegistry {
    /// Reports the counters in `/metrics`.
    pub fn register_metrics(&self, m: &HubMetrics) {
        m.register(
            "push_parked_sessions",
            "Push sessions whose transport was lost, waiting to be recovered",
            self.parked.clone(),
        );
        m.register(
            "push_recovered",
            "Reconnects that recovered their session (connection state recovery)",
            self.recovered.clone(),
        );
        m.register(
            "push_recovered_from_backbone",
            "Of the recovered reconnects, those of a session another node served, recovered from the cluster backbone",
            self.recovered_from_backbone.clone(),
        );
        m.register(
            "push_not_recovered",
            "Reconnects that asked for recovery and started afresh (window or history exceeded)",
            self.not_recovered.clone(),
        );
    }

    /// Registers a new recoverable session that `claim` may take over,
    /// unless `max` are registered.
    pub fn register(self: &Arc<Self>, max: usize, claim: Claim) -> Option<Ticket> {
        let mut m = self.map.lock();
        if m.len() >= max {
            return None;
        }
        let pid = new_sid();
        let handle = Arc::new(RecoveryHandle::new(claim));
        m.insert(pid.clone(), handle.clone());
        Some(Ticket {
            pid,
            handle,
            registry: self.clone(),
        })
    }

    /// Registers a session under the id `pid` it had on another node (a
    /// recovery there), unless `max` are registered or `pid` is taken here.
    pub fn register_as(self: &Arc<Self>, pid: &str, max: usize, claim: Claim) -> Option<Ticket> {
        let mut m = self.map.lock();
        if m.len() >= max || m.contains_key(pid) {
            return None;
        }
        let handle = Arc::new(RecoveryHandle::new(claim));
        m.insert(pid.to_owned(), handle.clone());
        Some(Ticket {
            pid: pid.to_owned(),
            handle,
            registry: self.clone(),
        })
    }

    /// Asks the session `pid` (live or parked) for its state, on behalf of
    /// a client whose claim is `claim`; a session registered with another
    /// claim is not asked (and so not disturbed).
    ///
    /// Given up ([`NotTaken::Unknown`]) once `shutdown` is cancelled: the
    /// asking session's task answers nothing else meanwhile, its own close
    /// included, and the owner may take up to [`TAKEOVER_TIMEOUT`] — longer
    /// than a session's last writes may take at shutdown
    /// ([`crate::shutdown::FLUSH_WAIT`]). State the owner hands over after
    /// that is dropped with the asker's channel; it was going with the
    /// process, and dropping it tells the other nodes nothing, so in
    /// cluster mode the client can still recover it elsewhere.
    pub async fn take(
        &self,
        pid: &str,
        claim: &Claim,
        shutdown: &CancellationToken,
    ) -> Result<App, NotTaken> {
        // Asked during shutdown (the session picked the packet over the
        // cancel): do not disturb the owner, whose client is likely the
        // one asking.
        if shutdown.is_cancelled() {
            return Err(NotTaken::Unknown);
        }
        let h = self.map.lock().get(pid).cloned().ok_or(NotTaken::Unknown)?;
        if h.claim != *claim {
            return Err(NotTaken::OtherOwner);
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut slot = h.reply.lock();
            if slot.as_ref().is_some_and(|s| !s.is_closed()) {
                // Another reconnect is already taking it over.
                return Err(NotTaken::Unknown);
            }
            *slot = Some(tx);
        }
        h.requested.notify_one();
        tokio::select! {
            // State handed over at the same moment as the cancel is taken.
            biased;
            r = tokio::time::timeout(TAKEOVER_TIMEOUT, rx) => {
                r.ok().and_then(Result::ok).ok_or(NotTaken::Unknown)
            }
            _ = shutdown.cancelled() => Err(NotTaken::Unknown),
        }
    }

    /// Registered sessions (live and parked).
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// True when none is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sessions parked now.
    pub fn parked(&self) -> usize {
        self.parked.get().max(0) as usize
    }

    /// Reconnects that recovered their session so far.
    pub fn recovered(&self) -> u64 {
        self.recovered.get()
    }

    /// Reconnects that asked for recovery and started afresh.
    pub fn not_recovered(&self) -> u64 {
        self.not_recovered.get()
    }

    /// Counts a recovery of a session another node served (besides
    /// [`RecoveryRegistry::count`]).
    pub fn count_from_backbone(&self) {
        self.recovered_from_backbone.inc();
    }

    /// Reconnects recovered from the backbone so far.
    pub fn recovered_from_backbone(&self) -> u64 {
        self.recovered_from_backbone.get()
    }

    /// Counts one recovery attempt's outcome.
    pub fn count(&self, recovered: bool) {
        if recovered {
            self.recovered.inc();
        } else {
            self.not_recovered.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// Asked once the server is shutting down, the owner is not disturbed:
    /// it is not notified, and no reply slot waits for its state.
    #[tokio::test]
    async fn a_take_asked_during_shutdown_leaves_the_owner_alone() {
        let registry = Arc::new(RecoveryRegistry::default());
        let claim = Claim {
            protocol: Protocol::SocketIo,
            subject: None,
        };
        let ticket = registry.register(10, claim.clone()).unwrap();
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let taken = registry.take(ticket.pid(), &claim, &shutdown).await;
        assert_eq!(taken.err(), Some(NotTaken::Unknown));
        assert!(ticket.handle().take_reply().is_none(), "no reply slot set");
        assert!(
            ticket.handle().requested().now_or_never().is_none(),
            "the owner was not asked"
        );
    }
}
