//! The effective configuration: DESIGN.md's defaults, overridden by a TOML
//! file. Each protocol crate owns its own section type; this file only
//! assembles them and reports errors with the file, the key and the reason.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;
use tidegate_forward::ForwardConfig;
use tidegate_hub::RouteConfig;
use tidegate_kafka::KafkaConfig;
use tidegate_s2s::S2sConfig;
use tidegate_wire::{SockperfConfig, WireConfig};

/// Default time given to in-flight work at shutdown, milliseconds.
pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 10_000;

/// The whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
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
    /// `[[routes]]`
    pub routes: Vec<RouteConfig>,
}

/// `[hub]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HubSection {
    /// How long SIGINT/SIGTERM waits for in-flight work before exiting.
    pub shutdown_grace_ms: u64,
}

impl Default for HubSection {
    fn default() -> Self {
        HubSection {
            shutdown_grace_ms: DEFAULT_SHUTDOWN_GRACE_MS,
        }
    }
}

/// `[http]`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Address to bind.
    pub listen: SocketAddr,
    /// `false` leaves the HTTP listener (and `/metrics`) off.
    pub enabled: bool,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: "127.0.0.1:8080".parse().expect("literal"),
            enabled: true,
        }
    }
}

/// `[sinks]`: every sink is optional and off until configured. The `null`
/// sink (acknowledges at once, keeps nothing) always exists for routes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SinksConfig {
    /// `[sinks.kafka]`
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaConfig>,
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

/// Parses TOML text (named `path` in errors).
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let de = toml::Deserializer::new(text);
    let config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        ConfigError::Invalid {
            path: path.to_owned(),
            key: if key == "." {
                "(top level)".into()
            } else {
                key
            },
            message: inner.message().trim().to_owned(),
        }
    })?;
    check(&config, path)?;
    Ok(config)
}

fn check(c: &Config, path: &Path) -> Result<(), ConfigError> {
    let inconsistent = |message: String| ConfigError::Inconsistent {
        path: path.to_owned(),
        message,
    };
    let listeners = [
        ("http", c.http.enabled, c.http.listen),
        ("wire", c.wire.enabled, c.wire.listen),
        ("sockperf", c.sockperf.enabled, c.sockperf.listen),
        ("forward", c.forward.enabled, c.forward.listen),
        ("s2s", c.s2s.enabled, c.s2s.listen),
    ];
    for (i, (a, ea, la)) in listeners.iter().enumerate() {
        for (b, eb, lb) in &listeners[i + 1..] {
            if *ea && *eb && la == lb && la.port() != 0 {
                return Err(inconsistent(format!("[{a}] and [{b}] both listen on {la}")));
            }
        }
    }
    for r in &c.routes {
        tidegate_hub::Pattern::parse(&r.topics)
            .map_err(|e| inconsistent(format!("[[routes]] topics = {:?}: {e}", r.topics)))?;
        let known = r.sink == "null" || (r.sink == "kafka" && c.sinks.kafka.is_some());
        if !known {
            return Err(inconsistent(format!(
                "[[routes]] for {:?} names sink {:?}, which is not configured (add a [sinks.{}] section, or use \"null\")",
                r.topics, r.sink, r.sink
            )));
        }
    }
    Ok(())
}

/// The configuration as TOML (what `tidegate config` prints).
pub fn render(c: &Config) -> String {
    toml::to_string_pretty(c).expect("the config serialises")
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
        assert_eq!(c.http.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.wire.listen.to_string(), "127.0.0.1:9998");
        assert_eq!(c.sockperf.listen.to_string(), "127.0.0.1:11111");
        assert_eq!(c.forward.listen.to_string(), "127.0.0.1:24224");
        assert_eq!(c.s2s.listen.to_string(), "127.0.0.1:10000");
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
    fn a_listener_can_be_disabled() {
        let c = parse_str("[wire]\nenabled = false\n").unwrap();
        assert!(!c.wire.enabled);
        assert!(c.http.enabled);
    }
}
