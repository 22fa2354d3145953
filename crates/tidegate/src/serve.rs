//! `tidegate serve`: run what [`preflight::prepare`] checked and bound,
//! serve until SIGINT/SIGTERM, then stop accepting and give in-flight work a
//! bounded time to finish.
//!
//! A listener that stops or fails on its own (or panics) is a failure of
//! the whole process: the others are drained and `serve` returns an error,
//! so the process exits non-zero and a supervisor (systemd, Kubernetes)
//! sees it — never a clean-looking exit 0 with a port missing.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use thiserror::Error;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::Config;
use crate::http::{self, Readiness};
use crate::preflight::{self, PreflightError, Prepared};
use crate::stats::{self, StatsSources};

/// Why `serve` stopped with an error.
#[derive(Debug, Error)]
pub enum ServeError {
    /// The configuration cannot be served (exit code 2).
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// A listener failed or stopped while serving (exit code 1).
    #[error("listener [{listener}] {what}; the process stopped")]
    ListenerFailed {
        /// Its section.
        listener: &'static str,
        /// What happened.
        what: String,
    },
}

/// The running listeners: each task ends with its name and how it ended.
type Listeners = JoinSet<(&'static str, Result<(), String>)>;

/// Spawns a bound listener's serve loop, marking it ready.
fn start<F, E>(tasks: &mut Listeners, readiness: &Readiness, name: &'static str, serving: F)
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display,
{
    readiness.set_listener(name, true);
    let readiness = readiness.clone();
    tasks.spawn(async move {
        let r = serving.await.map_err(|e| e.to_string());
        readiness.set_listener(name, false);
        (name, r)
    });
}

/// The answer under `/v0/` on a node without a `[kv]` section.
async fn kv_off() -> (axum::http::StatusCode, &'static str) {
    (
        axum::http::StatusCode::NOT_FOUND,
        "the key-value store is off on this node: it runs when the configuration has a [kv] section\n",
    )
}

/// Checks and binds `config`, then serves until a shutdown signal.
pub async fn serve(config: Config, file: Option<&Path>) -> Result<(), ServeError> {
    let prepared = preflight::prepare(config, file)?;
    run(prepared).await
}

async fn run(p: Prepared) -> Result<(), ServeError> {
    let Prepared {
        config,
        hub,
        sinks,
        s2s_ports,
        http,
        wire,
        sockperf,
        forward,
        s2s,
        kv,
        kafka_source,
        cluster,
    } = p;
    let shutdown = CancellationToken::new();
    let grace = Duration::from_millis(config.hub.shutdown_grace_ms);
    let readiness = Readiness::default();
    for sink in &sinks {
        readiness.add_sink(sink.clone());
    }
    if let Some(store) = &kv {
        let engine = store.engine().clone();
        readiness.add_check("kv", move || {
            engine
                .storage_failed()
                .then(|| "storage refuses writes (full disk or I/O error); restart".to_owned())
        });
    }
    // Kept to stop the KV cleanly: its background replica writes, its journal.
    let kv_store = kv.clone();
    let mut tasks: Listeners = JoinSet::new();

    let backbone = cluster.as_ref().map(|n| n.backbone.clone());
    if let Some(b) = backbone.clone() {
        // A node whose backbone cannot reach a broker delivers nothing of
        // the cluster-wide topics: out of the load balancer until it can.
        readiness.add_check("cluster", move || {
            match tidegate_hub::Sink::health(b.sink()) {
                tidegate_hub::SinkHealth::Ready => None,
                tidegate_hub::SinkHealth::NotReady(why) => Some(format!("backbone: {why}")),
            }
        });
    }
    let cluster_stats = cluster.as_ref().map(|n| stats::ClusterSource {
        node: preflight::node_name(&config),
        backbone: n.backbone.clone(),
        metrics: n.metrics.clone(),
    });
    if let Some(node) = cluster {
        let tidegate_kafka::backbone::ClusterNode {
            reader,
            heartbeat,
            writer,
            ..
        } = node;
        // Not one of the listeners: it goes on while they drain, and
        // `KafkaBackbone::flush` stops it once nothing publishes any more.
        tokio::spawn(writer.run());
        let (token, c) = (shutdown.clone(), config.cluster.clone());
        let hub = hub.clone();
        start(&mut tasks, &readiness, "cluster", async move {
            if let Some(c) = c {
                tidegate_kafka::backbone::ensure_topic_until(&c, token.clone().cancelled_owned())
                    .await;
            }
            tokio::join!(
                reader.run(hub, token.clone().cancelled_owned()),
                heartbeat.run(token.cancelled_owned()),
            );
            Ok::<(), String>(())
        });
    }
    if let Some(source) = kafka_source {
        let fut = source.run(hub.clone(), shutdown.clone().cancelled_owned(), grace);
        start(&mut tasks, &readiness, "kafka-source", fut);
    }
    let raw_port = s2s.as_ref().map(|s| s.local_addr().port());
    if let Some(s) = s2s {
        start(
            &mut tasks,
            &readiness,
            "s2s",
            s.run(hub.clone(), shutdown.clone()),
        );
    }
    if let Some(s) = wire {
        start(
            &mut tasks,
            &readiness,
            "wire",
            s.run(hub.clone(), shutdown.clone()),
        );
    }
    if let Some(s) = sockperf {
        start(
            &mut tasks,
            &readiness,
            "sockperf",
            s.run(hub.clone(), shutdown.clone()),
        );
    }
    if let Some(s) = forward {
        start(
            &mut tasks,
            &readiness,
            "forward",
            s.run(hub.clone(), shutdown.clone()),
        );
    }
    // Push is served on [http]; its context is kept for $sys.stats. Its
    // sessions close when shutdown starts (their clients reconnect
    // elsewhere at once), so a connected push client does not hold the
    // [http] drain for the whole grace.
    let push = (http.is_some() && config.push.enabled).then(|| {
        tidegate_push::PushContext::with_shutdown(
            hub.clone(),
            config.push.clone(),
            shutdown.child_token(),
        )
    });
    if let Some(l) = http {
        let port = l.local_addr().port();
        let http_secure = config.http.listener.tls.is_some();
        let app = http::routes::router(hub.clone(), readiness.clone()).merge(
            tidegate_s2s::http::router_with_ports(s2s_ports, port, http_secure, raw_port),
        );
        let app = match kv {
            Some(store) => {
                // A range stream whose client takes nothing for as long as
                // a whole request may take is cut off (0: the default).
                let mut limits = tidegate_kv::api::RangeLimits::default();
                if config.http.request_timeout_ms > 0 {
                    limits.send_timeout =
                        std::time::Duration::from_millis(config.http.request_timeout_ms);
                }
                app.merge(tidegate_kv::api::router_with(store, limits))
            }
            // Said plainly: a bare 404 reads like a missing key.
            None => app.route("/v0/{*rest}", axum::routing::any(kv_off)),
        };
        let app = match &push {
            Some(ctx) => app.merge(tidegate_push::router_with_context(ctx.clone())),
            None => app,
        };
        let app = http::limits::with_limits(app, &config.http, hub.budget().clone());
        let (hub, token) = (hub.clone(), shutdown.clone());
        start(&mut tasks, &readiness, "http", async move {
            l.run(&hub, token, grace, move |conn| {
                http::server::serve_connection(conn, app.clone())
            })
            .await
        });
    }
    let stats = stats::spawn(
        StatsSources {
            hub: hub.clone(),
            sinks,
            push: push.map(stats::push_sessions),
            cluster: cluster_stats,
        },
        shutdown.clone(),
    );
    info!(version = env!("CARGO_PKG_VERSION"), "tidegate serving");
    let result = supervise(&mut tasks, &readiness, &shutdown, grace, shutdown_signal()).await;
    if let Some(store) = &kv_store {
        // Copies beyond a write's quorum still in flight reach their
        // replica or leave a hint (each within the replica timeout), and
        // the journal is synced whatever `[kv] sync` says.
        store.shutdown(grace).await;
    }
    let _ = stats.await;
    hub.close();
    // The sinks and the backbone (what was published last still reaches
    // the other nodes) at the same time, within one grace: in turn they
    // added up past systemd's stop timeout.
    let backbone_flush = async {
        if let Some(b) = &backbone {
            let _ = tokio::time::timeout(grace, b.flush(grace)).await;
        }
    };
    tokio::join!(hub.flush_sinks(grace), backbone_flush);
    info!("tidegate stopped");
    result
}

/// Waits for `stop` or for a listener to end on its own, then cancels
/// `shutdown` and drains every listener for up to `grace`. A listener that
/// ended on its own is an error, whatever the others do.
async fn supervise(
    tasks: &mut Listeners,
    readiness: &Readiness,
    shutdown: &CancellationToken,
    grace: Duration,
    stop: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let mut failure = None;
    tokio::select! {
        _ = stop => info!("shutdown signal received: no longer accepting"),
        Some(done) = tasks.join_next() => {
            let (listener, what) = match done {
                Ok((name, Err(e))) => (name, format!("failed: {e}")),
                Ok((name, Ok(()))) => (name, "stopped on its own".to_owned()),
                Err(e) => ("?", format!("task ended abnormally: {e}")),
            };
            error!(listener, %what, "listener down; draining the others and exiting non-zero");
            failure = Some(ServeError::ListenerFailed { listener, what });
        }
    }
    readiness.set_stopping();
    shutdown.cancel();

    let drained = tokio::time::timeout(grace + Duration::from_secs(1), async {
        while let Some(r) = tasks.join_next().await {
            if let Ok((name, Err(e))) = r {
                warn!(listener = name, error = %e, "listener ended with an error during shutdown");
            }
        }
    })
    .await;
    if drained.is_err() {
        warn!(
            ?grace,
            "in-flight work did not finish within the grace period; abandoning it"
        );
        tasks.abort_all();
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn serving_until(token: CancellationToken) -> Result<(), String> {
        token.cancelled().await;
        Ok(())
    }

    #[tokio::test]
    async fn a_listener_that_fails_stops_the_others_and_is_an_error() {
        let (mut tasks, readiness, shutdown) = (
            Listeners::new(),
            Readiness::default(),
            CancellationToken::new(),
        );
        start(
            &mut tasks,
            &readiness,
            "forward",
            serving_until(shutdown.clone()),
        );
        start(&mut tasks, &readiness, "s2s", async {
            Err::<(), _>("tls.cert = \"/x\": No such file or directory".to_owned())
        });
        let r = supervise(
            &mut tasks,
            &readiness,
            &shutdown,
            Duration::from_secs(1),
            std::future::pending(),
        )
        .await;
        let e = r.unwrap_err().to_string();
        assert!(e.contains("[s2s]") && e.contains("/x"), "{e}");
        assert!(
            shutdown.is_cancelled(),
            "the other listeners were not told to stop"
        );
        assert!(tasks.is_empty(), "a listener was left running");
        assert!(!readiness.report().ready);
    }

    #[tokio::test]
    async fn a_listener_that_stops_on_its_own_is_an_error_too_and_a_signal_is_not() {
        let (mut tasks, readiness, shutdown) = (
            Listeners::new(),
            Readiness::default(),
            CancellationToken::new(),
        );
        start(&mut tasks, &readiness, "wire", async {
            Ok::<(), String>(())
        });
        let r = supervise(
            &mut tasks,
            &readiness,
            &shutdown,
            Duration::from_secs(1),
            std::future::pending(),
        )
        .await;
        assert!(r.unwrap_err().to_string().contains("stopped on its own"));

        let (mut tasks, shutdown) = (Listeners::new(), CancellationToken::new());
        start(
            &mut tasks,
            &readiness,
            "wire",
            serving_until(shutdown.clone()),
        );
        let r = supervise(
            &mut tasks,
            &readiness,
            &shutdown,
            Duration::from_secs(1),
            async {},
        )
        .await;
        assert!(r.is_ok());
    }
}
