//! Everything that can be wrong with a configuration, found before the
//! first port opens: Kafka settings accepted by librdkafka, the S2S sink's
//! URLs and TLS files, every listener's
//! TLS files loaded, every route's sink present, S2S port topics valid, and
//! then every listener bound. `tidegate serve` runs this and only then
//! serves; `tidegate config --check` runs exactly this and stops;
//! `--probe` also asks each sink's servers what they have.
//!
//! A failure leaves nothing half-open: listeners bound before the failing
//! one are dropped (closed) with the error.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tidegate_forward::ForwardServer;
use tidegate_hub::{Hub, InflightBudget, NullSink, RouteTable, Sink};
use tidegate_kafka::backbone::ClusterNode;
use tidegate_kafka::{KafkaSink, KafkaSource};
use tidegate_listener::{load_tls, Listener, ListenerError};
use tidegate_s2s::sink::S2sSink;
use tidegate_s2s::{S2sPorts, S2sServer};
use tidegate_wire::server::WireServer;
use tidegate_wire::sockperf::SockperfServer;

use crate::config::Config;

/// Why a configuration cannot be served (exit code 2).
#[derive(Debug, Error)]
#[error("config file {file}: {message}")]
pub struct PreflightError {
    /// The configuration file (`<defaults>` when none).
    pub file: String,
    /// What is wrong, naming the section and key.
    pub message: String,
}

/// A configuration checked and its listeners bound; nothing accepts yet
/// (the kernel queues connections until the servers run).
pub struct Prepared {
    /// The configuration.
    pub config: Config,
    /// The hub, with its routes and budget.
    pub hub: Hub,
    /// Every sink routes may use, the null sink first.
    pub sinks: Vec<Arc<dyn Sink>>,
    /// S2S ports shared by the RAW listener and the HTTP transport.
    pub s2s_ports: S2sPorts,
    /// `[http]`, bound.
    pub http: Option<Listener>,
    /// `[wire]`, bound.
    pub wire: Option<WireServer>,
    /// `[sockperf]`, bound.
    pub sockperf: Option<SockperfServer>,
    /// `[forward]`, bound.
    pub forward: Option<ForwardServer>,
    /// `[s2s]`, bound.
    pub s2s: Option<S2sServer>,
    /// `[kv]`: the store, its engine open (served on `[http]`).
    pub kv: Option<tidegate_kv::KvStore>,
    /// `[sources.kafka]`: the consumer, not yet subscribed.
    pub kafka_source: Option<KafkaSource>,
    /// `[cluster]`: the backbone, installed in the hub, and its reader.
    pub cluster: Option<ClusterNode>,
}

/// Checks `config` and binds its listeners. Must run inside a tokio runtime.
pub fn prepare(config: Config, file: Option<&Path>) -> Result<Prepared, PreflightError> {
    let fail = |message: String| PreflightError {
        file: file.map_or("<defaults>".into(), |p| p.display().to_string()),
        message,
    };
    let listener_err = |e: ListenerError| fail(e.to_string());

    if let Some(k) = &config.sinks.kafka {
        tidegate_kafka::validate(k).map_err(|e| fail(e.to_string()))?;
    }
    if let Some(s) = &config.sinks.s2s {
        s.validate().map_err(|e| fail(e.to_string()))?;
    }
    if let Some(k) = &config.sources.kafka {
        tidegate_kafka::source::validate_source(k).map_err(&fail)?;
    }
    // A record's topic is the prefix and its tag: a prefix that makes every
    // such topic one the hub refuses would refuse every record.
    let prefix = &config.forward.topic_prefix;
    tidegate_hub::topic::validate_publish_topic(&format!("{prefix}tag")).map_err(|e| {
        fail(format!(
            "[forward] topic_prefix = {prefix:?}: records would be refused (tag \"tag\" gives {e})"
        ))
    })?;
    // Every TLS file, before any port opens.
    for (section, settings) in config.listeners() {
        load_tls(section, &settings).map_err(listener_err)?;
    }

    let mut sinks: Vec<Arc<dyn Sink>> = vec![Arc::new(NullSink)];
    let kafka = match &config.sinks.kafka {
        Some(k) => {
            let sink = Arc::new(KafkaSink::new(k.clone()).map_err(|e| fail(e.to_string()))?);
            sinks.push(sink.clone());
            Some(sink)
        }
        None => None,
    };
    let s2s_sink = match &config.sinks.s2s {
        Some(s) => {
            let sink = Arc::new(S2sSink::new(s.clone()).map_err(|e| fail(e.to_string()))?);
            sinks.push(sink.clone());
            Some(sink)
        }
        None => None,
    };
    let routes = RouteTable::build(&config.routes, &sinks).map_err(|e| fail(e.to_string()))?;
    let hub = Hub::with_budget(routes, InflightBudget::new(config.hub.max_inflight_bytes));
    if let Some(k) = &kafka {
        k.register_metrics(hub.metrics());
    }
    if let Some(s) = &s2s_sink {
        s.register_metrics(hub.metrics());
    }
    let kafka_source = match &config.sources.kafka {
        Some(k) => {
            let source = KafkaSource::new(k.clone()).map_err(|e| fail(e.to_string()))?;
            source.register_metrics(hub.metrics());
            Some(source)
        }
        None => None,
    };
    let cluster = match &config.cluster {
        Some(c) => {
            Some(ClusterNode::new(c, &node_name(&config), &hub).map_err(|e| fail(e.to_string()))?)
        }
        None => None,
    };
    let s2s_ports = S2sPorts::new(config.s2s.clone(), hub.clone())
        .map_err(|e| fail(format!("[[s2s.input_ports]] / [[s2s.output_ports]]: {e}")))?;

    // The KV engine opens (and its data_dir is created) before any port.
    let kv = match &config.kv {
        Some(k) => {
            if !config.http.listener.enabled {
                return Err(fail(
                    "[kv] is served on [http]: set [http] enabled = true".into(),
                ));
            }
            let store = tidegate_kv::KvStore::open(k, Some(hub.clone()))
                .map_err(|e| fail(e.to_string()))?;
            Some(store)
        }
        None => None,
    };

    // Bind in order; an error drops (closes) what was bound before it.
    let http = if config.http.listener.enabled {
        Some(Listener::bind("http", config.http.listener.settings()).map_err(listener_err)?)
    } else {
        None
    };
    let wire = if config.wire.listener.enabled {
        Some(WireServer::bind(config.wire.clone()).map_err(listener_err)?)
    } else {
        None
    };
    let sockperf = if config.sockperf.listener.enabled {
        Some(SockperfServer::bind(config.sockperf.clone()).map_err(listener_err)?)
    } else {
        None
    };
    let forward = if config.forward.listener.enabled {
        Some(ForwardServer::bind(config.forward.clone()).map_err(listener_err)?)
    } else {
        None
    };
    let s2s = if config.s2s.listener.enabled {
        Some(
            S2sServer::bind(config.s2s.clone())
                .map_err(listener_err)?
                .with_ports(s2s_ports.clone()),
        )
    } else {
        None
    };
    Ok(Prepared {
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
    })
}

/// `[cluster] node`, or `<hostname>-<[http] port>` when it is empty.
pub fn node_name(config: &Config) -> String {
    match &config.cluster {
        Some(c) if !c.node.is_empty() => c.node.clone(),
        _ => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "tidegate".to_owned());
            format!("{host}-{}", config.http.listener.listen.port())
        }
    }
}

/// What `config --check` / `--probe` prints on success.
pub fn summary(p: &Prepared) -> String {
    let mut out = String::from("configuration ok\n");
    for (section, settings) in p.config.listeners() {
        out.push_str(&format!(
            "  [{section}] listen = {} tls = {} max_connections = {}\n",
            settings.listen,
            settings.tls.is_some(),
            settings.max_connections
        ));
    }
    for r in &p.config.routes {
        out.push_str(&format!("  route {} -> {}\n", r.topics, r.sink));
    }
    if let Some(k) = &p.config.sources.kafka {
        out.push_str(&format!(
            "  [sources.kafka] group_id = {} topics = {:?} -> hub topics {}<kafka topic>\n",
            k.group_id,
            k.subscription(),
            k.topic_prefix
        ));
    }
    if let Some(c) = &p.config.cluster {
        out.push_str(&format!(
            "  [cluster] node = {} backbone topic = {} cluster-wide = {:?}\n",
            node_name(&p.config),
            c.topic,
            c.topics
        ));
    }
    if let Some(k) = &p.config.kv {
        let cluster = if k.nodes.is_empty() {
            "one node".to_owned()
        } else {
            format!(
                "{} nodes, self = {}, cluster_secret {}",
                k.nodes.len(),
                k.self_url.as_deref().unwrap_or("(unset)"),
                if k.cluster_secret.is_some() {
                    "set"
                } else {
                    "unset"
                }
            )
        };
        out.push_str(&format!(
            "  [kv] on [http] data_dir = {} sync = {} {cluster}\n",
            k.data_dir.display(),
            k.sync
        ));
    }
    out.push_str(&format!(
        "  [hub] max_inflight_bytes = {}\n",
        p.config.hub.max_inflight_bytes
    ));
    out
}

/// Connects to each configured sink's servers and says what it found.
pub async fn probe(p: &Prepared, timeout: Duration) -> Result<String, String> {
    let mut out = String::new();
    if let Some(k) = &p.config.sinks.kafka {
        let report = tidegate_kafka::probe(k, timeout)
            .await
            .map_err(|e| format!("probe failed: {e}"))?;
        out.push_str(&format!("[sinks.kafka] probe:\n{report}\n"));
    }
    if let Some(s) = &p.config.sinks.s2s {
        let report = tidegate_s2s::sink::probe(s, timeout)
            .await
            .map_err(|e| format!("[sinks.s2s] probe failed: {e}"))?;
        out.push_str(&format!("[sinks.s2s] probe:\n{report}"));
    }
    if p.config.sinks.kafka.is_none() && p.config.sinks.s2s.is_none() {
        out.push_str("  no sink to probe\n");
    }
    Ok(out)
}
