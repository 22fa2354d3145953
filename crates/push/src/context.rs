//! What every push handler shares: the hub, `[push]`, the live sessions.

use std::sync::Arc;

use tidegate_hub::{History, Hub};
use tokio_util::sync::CancellationToken;

use crate::auth::{Grants, JwtError, JwtVerifier};
use crate::config::PushConfig;
use crate::recovery::cluster::{ClusterSessions, Update};
use crate::recovery::RecoveryRegistry;
use crate::session::load::LoadProbe;
use crate::session::SessionRegistry;
use crate::stats::PushStats;

/// Shared by the router's handlers and the session tasks.
#[derive(Debug)]
pub struct PushContext {
    /// The one hub.
    pub hub: Hub,
    /// `[push]`.
    pub config: PushConfig,
    /// Live Engine.IO sessions.
    pub sessions: SessionRegistry,
    /// The keys JWTs are checked against (`auth = "jwt"`).
    pub jwt: JwtVerifier,
    /// Recoverable sessions (live and parked), when recovery is on.
    pub recovery: Arc<RecoveryRegistry>,
    /// The hub's history recovering clients replay from (recovery on).
    pub history: Option<Arc<History>>,
    /// Recoverable sessions of the whole cluster (recovery on; filled only
    /// in cluster mode), for recovering a session another node served.
    pub cluster_sessions: Option<Arc<ClusterSessions>>,
    /// Sessions by transport and messages out, for `$sys.stats`.
    pub stats: PushStats,
    /// Whether the server is loaded (`busy_write_delay_ms` holds writes
    /// only then).
    pub load: Arc<LoadProbe>,
    /// Cancelled when the server starts shutting down: every session then
    /// writes what it holds, tells its client it is going away (so the
    /// client reconnects elsewhere at once instead of watching a frozen
    /// link until the listener's drain gives up), and new sessions are
    /// refused.
    pub shutdown: CancellationToken,
}

impl PushContext {
    /// A context for `hub` and `config` that is never told to shut down
    /// (its sessions end with their connections).
    pub fn new(hub: Hub, config: PushConfig) -> Arc<Self> {
        Self::with_shutdown(hub, config, CancellationToken::new())
    }

    /// A context whose sessions close, and which refuses new ones, once
    /// `shutdown` is cancelled (`tidegate serve` passes its own).
    pub fn with_shutdown(hub: Hub, config: PushConfig, shutdown: CancellationToken) -> Arc<Self> {
        // `PushConfig::check` refuses a key that does not parse before a
        // server starts; one that slips through verifies nothing.
        let jwt = JwtVerifier::new(config.jwt_secret.as_bytes(), &config.jwt_public_key)
            .unwrap_or_else(|_| JwtVerifier::new(b"", "").expect("no key always builds"));
        let recovery = Arc::new(RecoveryRegistry::default());
        recovery.register_metrics(hub.metrics());
        let history = config
            .recovery()
            .then(|| hub.enable_history(config.history_limits()));
        let cluster_sessions = config.recovery().then(|| {
            let sessions = Arc::new(ClusterSessions::new(config.cluster_sessions_bytes));
            let handler = sessions.clone();
            // One push server per hub: a second context (tests) keeps the
            // first's handler.
            let _ = hub.on_cluster_sessions(Arc::new(move |m| handler.handle(m)));
            hub.metrics().register(
                "push_cluster_sessions",
                "Recoverable session namespaces the cluster's nodes announced (cluster mode)",
                sessions.known.clone(),
            );
            sessions
        });
        let load = LoadProbe::new();
        if config.busy_write_delay_ms > 0 {
            load.register_metrics(hub.metrics());
            load.spawn();
        }
        Arc::new(PushContext {
            load,
            stats: PushStats::new(&hub),
            hub,
            config,
            sessions: SessionRegistry::default(),
            jwt,
            recovery,
            history,
            cluster_sessions,
            shutdown,
        })
    }

    /// Whether the server is shutting down (new sessions are refused).
    pub fn shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// A shutdown token of one session's own, cancelled with
    /// [`PushContext::shutdown`]. A session loop checks and awaits the
    /// shutdown on every round; tokio-util's token takes its node's mutex
    /// for each check and each poll, so on the one shared token every
    /// session's every round contended for one lock (5 % of the server's
    /// samples in a polling fan-out). A child has a node, and so a lock,
    /// of its own.
    pub fn session_shutdown(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    /// Whether events carry cluster offsets and sessions are announced to
    /// the other nodes: recovery on, in cluster mode.
    pub fn cluster_recovery(&self) -> bool {
        self.cluster_sessions.is_some() && self.hub.backbone().is_some()
    }

    /// Tells every node (this one too) about a change to a recoverable
    /// session. Never waits: with the backbone full (its broker down) the
    /// update is dropped, and the nodes see the gap in the session's
    /// update count and refuse to recover it rather than recover it
    /// partly ([`crate::recovery::cluster::Update::version`]) — until the
    /// session's next announcement, which then carries its whole state.
    /// False when it was dropped.
    pub fn announce_now(&self, update: Update) -> bool {
        match (self.cluster_recovery(), self.hub.backbone()) {
            (true, Some(b)) => b.try_send(Arc::new(update.to_message())).is_ok(),
            _ => true,
        }
    }

    /// What a connection presenting `token` may do (everything when auth
    /// is off).
    pub fn authorize(&self, token: Option<&str>) -> Result<Grants, JwtError> {
        crate::auth::authorize(&self.config, &self.jwt, token, crate::auth::now_s())
    }
}
