//! `tidegate serve`: build sinks and routes, bind every enabled listener
//! (failing fast, before serving anything), serve until SIGINT/SIGTERM, then
//! stop accepting and give in-flight work a bounded time to finish.

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tidegate_forward::ForwardServer;
use tidegate_hub::{Hub, NullSink, RouteTable, Sink};
use tidegate_kafka::KafkaSink;
use tidegate_s2s::{S2sPorts, S2sServer};
use tidegate_wire::server::WireServer;
use tidegate_wire::sockperf::SockperfServer;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::Config;

/// Why `serve` stopped with an error.
#[derive(Debug, Error)]
pub enum ServeError {
    /// The configuration cannot be used (exit code 2).
    #[error("{0}")]
    Config(String),
    /// A listener could not be bound.
    #[error("cannot bind [{section}] listen = {addr}: {source}")]
    Bind {
        /// Config section.
        section: &'static str,
        /// Address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A sink could not be started.
    #[error("cannot start sink {name}: {reason}")]
    Sink {
        /// Sink name.
        name: &'static str,
        /// Why.
        reason: String,
    },
}

fn bind_err(section: &'static str, addr: SocketAddr) -> impl FnOnce(std::io::Error) -> ServeError {
    move |source| ServeError::Bind {
        section,
        addr,
        source,
    }
}

/// The running listeners: each task ends with its name and how it ended.
type Listeners = JoinSet<(&'static str, Result<(), String>)>;

/// Spawns a bound listener's serve loop, logging where it listens.
fn start<F, E>(tasks: &mut Listeners, name: &'static str, addr: SocketAddr, serving: F)
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: std::fmt::Display,
{
    info!(listener = name, listen = %addr, "listening");
    tasks.spawn(async move { (name, serving.await.map_err(|e| e.to_string())) });
}

/// Runs the hub until a shutdown signal.
pub async fn serve(config: Config) -> Result<(), ServeError> {
    let mut sinks: Vec<Arc<dyn Sink>> = vec![Arc::new(NullSink)];
    let kafka = match &config.sinks.kafka {
        Some(k) => {
            let sink = Arc::new(KafkaSink::new(k.clone()).map_err(|e| ServeError::Sink {
                name: "kafka",
                reason: e.to_string(),
            })?);
            sinks.push(sink.clone());
            Some(sink)
        }
        None => None,
    };
    let routes =
        RouteTable::build(&config.routes, &sinks).map_err(|e| ServeError::Config(e.to_string()))?;
    let hub = Hub::new(routes);
    if let Some(k) = &kafka {
        k.register_metrics(hub.metrics());
    }

    let shutdown = CancellationToken::new();
    let mut tasks: Listeners = JoinSet::new();

    // One set of S2S ports shared by the RAW listener and the HTTP transport,
    // so an output port has one queue whichever transport drains it.
    let s2s_ports = S2sPorts::new(config.s2s.clone(), hub.clone())
        .map_err(|e| ServeError::Config(format!("[s2s] port topic: {e}")))?;

    // Bind everything first: a port in use stops start-up before anything serves.
    let raw_port = if config.s2s.enabled {
        let s = S2sServer::bind(config.s2s.clone())
            .await
            .map_err(bind_err("s2s", config.s2s.listen))?
            .with_ports(s2s_ports.clone());
        let port = s.local_addr().map(|a| a.port()).ok();
        start(
            &mut tasks,
            "s2s",
            config.s2s.listen,
            s.run(hub.clone(), shutdown.clone()),
        );
        port
    } else {
        None
    };
    if config.wire.enabled {
        let s = WireServer::bind(config.wire.clone())
            .await
            .map_err(bind_err("wire", config.wire.listen))?;
        start(
            &mut tasks,
            "wire",
            config.wire.listen,
            s.run(hub.clone(), shutdown.clone()),
        );
    }
    if config.sockperf.enabled {
        let s = SockperfServer::bind(config.sockperf.clone())
            .await
            .map_err(bind_err("sockperf", config.sockperf.listen))?;
        start(
            &mut tasks,
            "sockperf",
            config.sockperf.listen,
            s.run(hub.clone(), shutdown.clone()),
        );
    }
    if config.forward.enabled {
        let s = ForwardServer::bind(config.forward.clone())
            .await
            .map_err(bind_err("forward", config.forward.listen))?;
        start(
            &mut tasks,
            "forward",
            config.forward.listen,
            s.run(hub.clone(), shutdown.clone()),
        );
    }
    if config.http.enabled {
        let listener = tokio::net::TcpListener::bind(config.http.listen)
            .await
            .map_err(bind_err("http", config.http.listen))?;
        let http_port = listener
            .local_addr()
            .map(|a| a.port())
            .unwrap_or(config.http.listen.port());
        let app = crate::http::router(hub.clone()).merge(tidegate_s2s::http::router_with_ports(
            s2s_ports, http_port, raw_port,
        ));
        let t = shutdown.clone();
        let serving =
            axum::serve(listener, app).with_graceful_shutdown(async move { t.cancelled().await });
        start(
            &mut tasks,
            "http",
            config.http.listen,
            serving.into_future(),
        );
    }
    info!(version = env!("CARGO_PKG_VERSION"), "tidegate serving");

    // Serve until a signal, or until a listener dies on its own.
    tokio::select! {
        _ = shutdown_signal() => info!("shutdown signal received: no longer accepting"),
        Some(done) = tasks.join_next() => {
            match done {
                Ok((name, Err(e))) => error!(listener = name, error = %e, "listener failed; shutting down"),
                Ok((name, Ok(()))) => warn!(listener = name, "listener stopped; shutting down"),
                Err(e) => error!(error = %e, "listener task panicked; shutting down"),
            }
        }
    }
    shutdown.cancel();

    let grace = Duration::from_millis(config.hub.shutdown_grace_ms);
    let drained = tokio::time::timeout(grace, async {
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
    hub.close();
    hub.flush_sinks(grace).await;
    info!("tidegate stopped");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
