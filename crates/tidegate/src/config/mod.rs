//! The effective configuration: the built-in defaults (every listener on
//! 127.0.0.1, nothing to configure), overridden by a TOML file. Each
//! protocol crate owns its own section type; this module assembles them,
//! expands `${VAR}` references ([`env`](mod@env)), refuses unknown keys
//! ([`unknown`]), checks that the pieces fit, and reports errors with the
//! file, the key and the reason. [`redact`] keeps secrets out of what
//! `tidegate config` prints.

pub mod env;
pub mod redact;
pub mod unknown;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tidegate_forward::ForwardConfig;
use tidegate_hub::RouteConfig;
use tidegate_kafka::backbone::ClusterConfig;
use tidegate_kafka::{KafkaConfig, KafkaSourceConfig};
use tidegate_kv::KvConfig;
use tidegate_listener::ListenerSettings;
use tidegate_s2s::sink::S2sSinkConfig;
use tidegate_s2s::S2sConfig;
use tidegate_wire::{SockperfConfig, WireConfig};

pub use crate::http::HttpConfig;

/// Default time given to in-flight work at shutdown, milliseconds.
pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 10_000;

/// The whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// `[hub]`: process-wide settings.
    pub hub: HubSection,
    /// `[http]`: metrics, dashboard, S2S discovery and HTTP transport.
    pub http: HttpConfig,
    /// `[wire]`
    pub wire: WireConfig,
    /// `[sockperf]`
    pub sockperf: SockperfConfig,
    /// `[forward]`
    pub forward: ForwardConfig,
    /// `[s2s]`
    pub s2s: S2sConfig,
    /// `[sinks.*]`
    pub sinks: SinksConfig,
    /// `[sources.*]`: sources that are not listeners (Kafka).
    pub sources: SourcesConfig,
    /// `[cluster]`: nodes sharing topics through a backbone; off when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterConfig>,
    /// `[[routes]]`
    pub routes: Vec<RouteConfig>,
    /// `[kv]`: the replicated key-value store, on `[http]` under `/v0/`;
    /// off when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvConfig>,
    /// `[push]`: Engine.IO / Socket.IO / `/ws` / `/v1/publish`, on `[http]`.
    pub push: tidegate_push::PushConfig,
}

/// Largest default in-flight byte budget: 2 GiB.
pub const MAX_DEFAULT_INFLIGHT_BYTES: usize = 2 << 30;
/// Default budget when the machine's memory cannot be read: 512 MiB.
pub const FALLBACK_INFLIGHT_BYTES: usize = 512 << 20;

/// `[hub]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HubSection {
    /// How long SIGINT/SIGTERM waits for in-flight work before exiting.
    pub shutdown_grace_ms: u64,
    /// Bytes read from clients and not yet acknowledged or dropped, all
    /// listeners together; when spent, readers stop reading. Default: a
    /// quarter of the machine's memory, at most 2 GiB.
    pub max_inflight_bytes: usize,
}

impl Default for HubSection {
    fn default() -> Self {
        HubSection {
            shutdown_grace_ms: DEFAULT_SHUTDOWN_GRACE_MS,
            max_inflight_bytes: default_inflight_bytes(),
        }
    }
}

/// A quarter of `MemTotal` from /proc/meminfo, at most 2 GiB.
fn default_inflight_bytes() -> usize {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
            .map(|kib| kib.saturating_mul(1024))
    });
    match total {
        Some(bytes) => (bytes / 4).min(MAX_DEFAULT_INFLIGHT_BYTES),
        None => FALLBACK_INFLIGHT_BYTES,
    }
}

/// `[sinks]`: every sink is optional and off until configured. The `null`
/// sink (acknowledges at once, keeps nothing) always exists for routes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SinksConfig {
    /// `[sinks.kafka]`
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaConfig>,
    /// `[sinks.s2s]`: a NiFi input port over Site-to-Site.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s2s: Option<S2sSinkConfig>,
}

/// `[sources]`: sources that consume from another system rather than
/// listen; each is off until configured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SourcesConfig {
    /// `[sources.kafka]`: a consumer group's records published into the hub.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaSourceConfig>,
}

/// A configuration that cannot be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML is malformed or a key has the wrong name, type or value.
    #[error("config file {path}: key `{key}`: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Dotted path of the offending key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A `${VAR}` reference cannot be resolved.
    #[error("config file {path}: {source}")]
    Env {
        /// The file.
        path: PathBuf,
        /// Which variable, on which line.
        source: env::EnvError,
    },
    /// The pieces do not fit together (routes, sinks, ports).
    #[error("config file {path}: {message}")]
    Inconsistent {
        /// The file (`<defaults>` when none).
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Reads `path` over the defaults, or the defaults alone.
pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
    let Some(path) = path else {
        return Ok(Config::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path)
}

/// Parses TOML text (named `path` in errors), expanding `${VAR}` from the
/// process environment.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    parse_with_env(text, path, |name| std::env::var(name).ok())
}

/// [`parse`] with the environment given as a lookup (tests).
pub fn parse_with_env(
    text: &str,
    path: &Path,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let text = env::expand(text, lookup).map_err(|source| ConfigError::Env {
        path: path.to_owned(),
        source,
    })?;
    let de = toml::Deserializer::new(&text);
    let config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let message = e.into_inner().message().trim().to_owned();
        let (key, message) = listener_key(&text, &key).unwrap_or((key, message));
        ConfigError::Invalid {
            path: path.to_owned(),
            key: if key == "." {
                "(top level)".into()
            } else {
                key
            },
            message,
        }
    })?;
    // Unknown keys: every key given must survive the round trip.
    let input: toml::Value = toml::from_str(&text).map_err(|e| ConfigError::Invalid {
        path: path.to_owned(),
        key: "(top level)".into(),
        message: e.message().to_owned(),
    })?;
    let parsed = toml::Value::try_from(&config).expect("the config serialises");
    if let Some(key) = unknown::first_unknown(&input, &parsed) {
        return Err(ConfigError::Invalid {
            path: path.to_owned(),
            key,
            message: "unknown key".into(),
        });
    }
    check(&config, path)?;
    Ok(config)
}

fn check(c: &Config, path: &Path) -> Result<(), ConfigError> {
    let inconsistent = |message: String| ConfigError::Inconsistent {
        path: path.to_owned(),
        message,
    };
    let listeners = c.listeners();
    for (i, (a, la)) in listeners.iter().enumerate() {
        for (b, lb) in &listeners[i + 1..] {
            if la.listen == lb.listen && la.listen.port() != 0 {
                return Err(inconsistent(format!(
                    "[{a}] and [{b}] both listen on {}",
                    la.listen
                )));
            }
        }
    }
    if let Some(m) = c.push.check() {
        return Err(inconsistent(format!("[push] {m}")));
    }
    if let Some(m) = c.s2s.check() {
        return Err(inconsistent(format!("[s2s] {m}")));
    }
    if c.hub.max_inflight_bytes == 0 {
        return Err(inconsistent("[hub] max_inflight_bytes must be > 0".into()));
    }
    if let Some(k) = &c.sources.kafka {
        k.check().map_err(|e| inconsistent(e.to_string()))?;
    }
    if let Some(cl) = &c.cluster {
        cl.check().map_err(|e| inconsistent(e.to_string()))?;
    }
    for r in &c.routes {
        tidegate_hub::Pattern::parse(&r.topics)
            .map_err(|e| inconsistent(format!("[[routes]] topics = {:?}: {e}", r.topics)))?;
        let known = r.sink == "null"
            || (r.sink == "kafka" && c.sinks.kafka.is_some())
            || (r.sink == "s2s" && c.sinks.s2s.is_some());
        if !known {
            return Err(inconsistent(format!(
                "[[routes]] for {:?} names sink {:?}, which is not configured (add a [sinks.{}] section, or use \"null\")",
                r.topics, r.sink, r.sink
            )));
        }
    }
    Ok(())
}

/// serde reports an error inside a flattened listener block at the
/// section (`wire`), not the key (`wire.listen`): deserialize the section's
/// table as the block alone to find the key.
fn listener_key(text: &str, section: &str) -> Option<(String, String)> {
    const LISTENER_SECTIONS: [&str; 5] = ["http", "wire", "sockperf", "forward", "s2s"];
    if !LISTENER_SECTIONS.contains(&section) {
        return None;
    }
    let input: toml::Value = toml::from_str(text).ok()?;
    let table = input.get(section)?.clone();
    match serde_path_to_error::deserialize::<_, tidegate_listener::ListenerConfig<0>>(table) {
        Ok(_) => None,
        Err(e) => Some((
            format!("{section}.{}", e.path()),
            e.into_inner().to_string().trim().to_owned(),
        )),
    }
}

impl Config {
    /// Every enabled listener: its section name and resolved settings.
    pub fn listeners(&self) -> Vec<(&'static str, ListenerSettings)> {
        let all = [
            (
                "http",
                self.http.listener.enabled,
                self.http.listener.settings(),
            ),
            (
                "wire",
                self.wire.listener.enabled,
                self.wire.listener.settings(),
            ),
            (
                "sockperf",
                self.sockperf.listener.enabled,
                self.sockperf.listener.settings(),
            ),
            (
                "forward",
                self.forward.listener.enabled,
                self.forward.listener.settings(),
            ),
            (
                "s2s",
                self.s2s.listener.enabled,
                self.s2s.listener.settings(),
            ),
        ];
        all.into_iter()
            .filter(|(_, on, _)| *on)
            .map(|(name, _, s)| (name, s))
            .collect()
    }
}

/// The configuration as TOML, secrets redacted (what `tidegate config`
/// prints).
pub fn render(c: &Config) -> String {
    let mut v = toml::Value::try_from(c).expect("the config serialises");
    redact::redact(&mut v);
    toml::to_string_pretty(&v).expect("a TOML value serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(t: &str) -> Result<Config, ConfigError> {
        parse(t, Path::new("t.toml"))
    }

    #[test]
    fn defaults_match_the_design() {
        let c = Config::default();
        assert_eq!(c.http.listener.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.wire.listener.listen.to_string(), "127.0.0.1:9998");
        assert_eq!(c.sockperf.listener.listen.to_string(), "127.0.0.1:11111");
        assert_eq!(c.forward.listener.listen.to_string(), "127.0.0.1:24224");
        assert_eq!(c.s2s.listener.listen.to_string(), "127.0.0.1:10000");
        assert!(
            c.hub.max_inflight_bytes > 0 && c.hub.max_inflight_bytes <= MAX_DEFAULT_INFLIGHT_BYTES
        );
        assert!(c.sinks.kafka.is_none());
    }

    #[test]
    fn rendered_config_parses_back_to_itself() {
        let c = Config::default();
        assert_eq!(parse_str(&render(&c)).unwrap(), c);
    }

    #[test]
    fn a_wrong_key_names_the_file_and_the_key() {
        let e = parse_str("[wire]\nlisten = \"nonsense\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.toml") && e.contains("wire.listen"), "{e}");
        let e = parse_str("[http]\nlisen = \"127.0.0.1:1\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lisen"), "{e}");
    }

    #[test]
    fn a_route_to_an_unconfigured_sink_is_refused() {
        let e = parse_str("[[routes]]\ntopics = \"logs.>\"\nsink = \"kafka\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("kafka") && e.contains("not configured"), "{e}");
    }

    #[test]
    fn a_route_to_the_s2s_sink_needs_its_section_and_its_keys_are_checked() {
        let route = "[[routes]]\ntopics = \"logs.>\"\nsink = \"s2s\"\n";
        let e = parse_str(route).unwrap_err().to_string();
        assert!(e.contains("s2s") && e.contains("not configured"), "{e}");
        let c = parse_str(&format!(
            "[sinks.s2s]\nurl = \"http://nifi:8080/nifi\"\nport = \"in\"\ntransport = \"http\"\n{route}"
        ))
        .unwrap();
        let s2s = c.sinks.s2s.unwrap();
        assert_eq!(s2s.url, vec!["http://nifi:8080/nifi"]);
        assert_eq!(s2s.transport, tidegate_s2s::sink::Transport::Http);
        let e = parse_str("[sinks.s2s]\nurl = \"http://a:1\"\nport = \"in\"\nbatch = 3\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("batch"), "{e}");
    }

    #[test]
    fn a_kafka_source_and_a_cluster_section_are_read_and_checked() {
        let c = parse_str(
            "[sources.kafka]\nbrokers = \"k:9092\"\ntopics = [\"orders\"]\n\
             [cluster]\nbackbone = \"kafka\"\nbrokers = \"k:9092\"\nnode = \"a\"\n",
        )
        .unwrap();
        assert_eq!(c.sources.kafka.as_ref().unwrap().topics, vec!["orders"]);
        assert_eq!(c.cluster.as_ref().unwrap().node, "a");
        assert_eq!(parse_str(&render(&c)).unwrap(), c);
        let e = parse_str("[sources.kafka]\nbrokers = \"k:9092\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[sources.kafka]") && e.contains("topic"), "{e}");
        let e = parse_str("[cluster]\ntopics = [\"a.>.b\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[cluster]"), "{e}");
        let e = parse_str("[cluster]\nbackbone = \"redis\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("backbone"), "{e}");
    }

    #[test]
    fn a_listener_can_be_disabled() {
        let c = parse_str("[wire]\nenabled = false\n").unwrap();
        assert!(!c.wire.listener.enabled);
        assert!(c.http.listener.enabled);
    }

    #[test]
    fn unknown_keys_in_flattened_listener_sections_are_refused() {
        for (text, key) in [
            ("[forward]\nlisen = \"127.0.0.1:1\"\n", "forward.lisen"),
            ("[wire]\nmax_conections = 1\n", "wire.max_conections"),
            ("[hub]\nmax_inflight = 1\n", "hub.max_inflight"),
            (
                "[s2s]\n[s2s.tls]\ncert = \"c\"\nkey = \"k\"\nca = \"x\"\n",
                "s2s.tls",
            ),
            ("[bogus]\nx = 1\n", "bogus"),
            // An empty list under a misspelt name too.
            ("[wire]\nalow = []\n", "wire.alow"),
            ("[forward]\nuser = []\n", "forward.user"),
        ] {
            let e = parse_str(text).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("t.toml"), "{text}: {e}");
        }
    }

    #[test]
    fn known_empty_lists_pass_and_what_is_printed_reads_back() {
        let text = "[wire]\nallow = []\ntokens = []\n[forward]\nusers = []\n\
                    [s2s]\n[[s2s.input_ports]]\nname = \"p\"\ntopic = \"t\"\nallowed_dns = []\n";
        let c = parse_str(text).unwrap();
        assert!(c.wire.listener.allow.is_empty() && c.forward.users.is_empty());
        // The printed form (every list written out, empty ones too) is a
        // configuration that passes the same checks.
        parse_str(&render(&c)).unwrap();
        parse_str(&render(&Config::default())).unwrap();
    }

    #[test]
    fn values_come_from_the_environment() {
        let text =
            "[forward]\nlisten = \"127.0.0.1:${FWD_PORT:-24225}\"\nshared_key = \"${FWD_KEY}\"\n";
        let c = parse_with_env(text, Path::new("t.toml"), |n| {
            (n == "FWD_KEY").then(|| "s3cret".to_owned())
        })
        .unwrap();
        assert_eq!(c.forward.listener.listen.port(), 24225);
        assert_eq!(c.forward.shared_key.as_deref(), Some("s3cret"));
        let e = parse_with_env(text, Path::new("t.toml"), |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("FWD_KEY") && e.contains("t.toml"), "{e}");
        // and what `tidegate config` prints does not show the key
        assert!(!render(&c).contains("s3cret"));
    }
}
