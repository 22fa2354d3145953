//! librdkafka property names, and the rule that keeps a section's
//! free-form `properties` off what the section sets itself.
//!
//! A section's `properties` and its own settings all go into one rdkafka
//! [`ClientConfig`], a hash map that librdkafka is handed in the map's
//! order — a different one in every process. Two names of one librdkafka
//! property (`delivery.timeout.ms` and `message.timeout.ms`, `linger.ms`
//! and `queue.buffering.max.ms`) are two entries of that map, and whichever
//! librdkafka applied last won: one file gave a different client from one
//! start to the next (`linger_ms = 5000` with `"delivery.timeout.ms" =
//! 1000` passed `tidegate config --check` about one run in two). So a
//! property that names, under any of its names, one the section sets
//! itself is refused when the section is checked, the error naming the
//! section's key to write instead; so are two properties that name the
//! same librdkafka property.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;
use thiserror::Error;

use crate::PropertyValue;

/// librdkafka's aliases, `(alias, property)`: every property its
/// `CONFIGURATION.md` lists as "Alias for" (librdkafka 2.12), as a client
/// configuration reads them. (The topic-level `enable.auto.commit`, an
/// alias of the legacy consumer's `auto.commit.enable`, is not one: set on a
/// client configuration the name means the consumer's own
/// `enable.auto.commit`.)
pub const ALIASES: [(&str, &str); 11] = [
    ("bootstrap.servers", "metadata.broker.list"),
    ("max.in.flight", "max.in.flight.requests.per.connection"),
    ("sasl.mechanism", "sasl.mechanisms"),
    (
        "sasl.oauthbearer.client.credentials.client.id",
        "sasl.oauthbearer.client.id",
    ),
    (
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.client.secret",
    ),
    ("max.partition.fetch.bytes", "fetch.message.max.bytes"),
    ("linger.ms", "queue.buffering.max.ms"),
    ("retries", "message.send.max.retries"),
    ("compression.type", "compression.codec"),
    ("acks", "request.required.acks"),
    ("delivery.timeout.ms", "message.timeout.ms"),
];

/// The librdkafka property `name` sets: `name` itself unless it is an alias.
pub fn canonical(name: &str) -> &str {
    ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, property)| property)
}

/// Whether `a` and `b` are names of one librdkafka property.
pub fn same_property(a: &str, b: &str) -> bool {
    canonical(a) == canonical(b)
}

/// Sets `key` to `value` unless `cfg` already sets that property, under
/// this name or another (a default the user's properties may change).
pub(crate) fn set_default<'a>(
    cfg: &'a mut ClientConfig,
    key: &str,
    value: String,
) -> &'a mut ClientConfig {
    if !cfg.config_map().keys().any(|k| same_property(k, key)) {
        cfg.set(key, value);
    }
    cfg
}

/// A property a section sets itself: the librdkafka property, and the key of
/// the section it comes from (`None`: fixed, no key changes it).
pub(crate) type Owned = (&'static str, Option<&'static str>);

/// A section whose `properties` are checked: its TOML name and who, in an
/// error message, sets its properties (`"sinks.kafka"`, `"the sink"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// The section's name in the file, without brackets.
    pub name: &'static str,
    /// What the section configures, as the subject of a sentence.
    pub who: &'static str,
}

/// A section's `properties` naming what the section sets itself, or one
/// librdkafka property twice: the same refusals, worded the same way, for
/// the Kafka sink, the Kafka source and the cluster backbone.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PropertyConflict {
    /// A property names, under this name or another of librdkafka's, one
    /// the section sets from its own key: which one would win changes from
    /// run to run.
    #[error(
        "[{name}.properties] {property:?}{other}: {who} sets it from [{name}] {key}; set {key} \
         instead",
        name = .section.name,
        who = .section.who,
        other = other_name(.property, .sets)
    )]
    SetBySection {
        /// The section.
        section: Section,
        /// The property as written.
        property: String,
        /// The property the section sets.
        sets: &'static str,
        /// The section's key that sets it.
        key: &'static str,
    },
    /// A property names, under this name or another of librdkafka's, one
    /// the section fixes (no key changes it).
    #[error(
        "[{name}.properties] {property:?}{other}: {who} sets it itself; it cannot be changed",
        name = .section.name,
        who = .section.who,
        other = other_name(.property, .sets)
    )]
    Fixed {
        /// The section.
        section: Section,
        /// The property as written.
        property: String,
        /// The property the section sets.
        sets: &'static str,
    },
    /// Two properties are names of one librdkafka property.
    #[error(
        "[{name}.properties] {first:?} and {second:?} are names of one librdkafka property; \
         keep one",
        name = .section.name
    )]
    SameProperty {
        /// The section.
        section: Section,
        /// The first, in the file's sorted order.
        first: String,
        /// The second.
        second: String,
    },
}

/// Why a section's `properties` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// `property` (one of a guarantee's names) = `value` would weaken it;
    /// each section words what it would weaken.
    Guarantee { property: String, value: String },
    /// A refusal worded the same for every section.
    Property(PropertyConflict),
}

/// Checks a section's `properties` against what the section sets itself:
/// a property naming one of `guarantees` must keep it (`same(guarantee,
/// value, wanted)`), one naming an `owned` property is refused, and so is a
/// second name of a property already named. Deterministic: `properties`
/// is read in its (sorted) order.
pub(crate) fn check(
    section: Section,
    properties: &BTreeMap<String, PropertyValue>,
    owned: &[Owned],
    guarantees: &[(&str, &str)],
    same: impl Fn(&str, &str, &str) -> bool,
) -> Result<(), Conflict> {
    for (name, value) in properties {
        if let Some(&(guarantee, want)) = guarantees.iter().find(|(g, _)| same_property(g, name)) {
            let value = value.to_string();
            if !same(guarantee, &value, want) {
                return Err(Conflict::Guarantee {
                    property: name.clone(),
                    value,
                });
            }
        } else if let Some(&(sets, key)) = owned.iter().find(|(p, _)| same_property(p, name)) {
            let property = name.clone();
            return Err(Conflict::Property(match key {
                Some(key) => PropertyConflict::SetBySection {
                    section,
                    property,
                    sets,
                    key,
                },
                None => PropertyConflict::Fixed {
                    section,
                    property,
                    sets,
                },
            }));
        }
    }
    let mut named: BTreeMap<&str, &str> = BTreeMap::new();
    for name in properties.keys() {
        if let Some(first) = named.insert(canonical(name), name) {
            return Err(Conflict::Property(PropertyConflict::SameProperty {
                section,
                first: first.to_owned(),
                second: name.clone(),
            }));
        }
    }
    Ok(())
}

/// `" (another name for message.timeout.ms)"` when `property` is written
/// under another name than `sets`, for error messages.
fn other_name(property: &str, sets: &str) -> String {
    if property == sets {
        String::new()
    } else {
        format!(" (another name for {sets})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alias_is_read_by_librdkafka_as_its_property() {
        // Values each property accepts; librdkafka reads them back under
        // the property's own name.
        let value = |property: &str| match property {
            "metadata.broker.list" => "h:1",
            "sasl.mechanisms" => "PLAIN",
            "sasl.oauthbearer.client.id" | "sasl.oauthbearer.client.secret" => "x",
            "compression.codec" => "zstd",
            "request.required.acks" => "1",
            _ => "7",
        };
        for (alias, property) in ALIASES {
            let mut cfg = ClientConfig::new();
            cfg.set(alias, value(property));
            match cfg.create_native_config() {
                Ok(native) => assert_eq!(
                    native.get(property).unwrap(),
                    value(property),
                    "{alias} is an alias of {property}"
                ),
                // A build without OAuth/OIDC refuses the property, by its
                // own name.
                Err(e) => assert!(
                    e.to_string()
                        .contains(&format!("property \"{property}\" not supported")),
                    "{alias}: {e}"
                ),
            }
            assert_eq!(canonical(alias), property);
            assert_eq!(canonical(property), property);
        }
    }

    #[test]
    fn a_default_is_not_set_over_the_same_property_under_another_name() {
        let mut cfg = ClientConfig::new();
        cfg.set("fetch.message.max.bytes", "1000");
        set_default(&mut cfg, "max.partition.fetch.bytes", "8".into());
        assert_eq!(cfg.get("max.partition.fetch.bytes"), None);
        let mut cfg = ClientConfig::new();
        set_default(&mut cfg, "max.partition.fetch.bytes", "8".into());
        assert_eq!(cfg.get("max.partition.fetch.bytes"), Some("8"));
    }

    #[test]
    fn two_names_of_one_property_are_refused_whatever_else_is_set() {
        let props: BTreeMap<String, PropertyValue> = [
            ("retries", PropertyValue::Integer(3)),
            ("message.send.max.retries", PropertyValue::Integer(4)),
            ("client.id", PropertyValue::Text("x".into())),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let section = Section {
            name: "sinks.kafka",
            who: "the sink",
        };
        let e = check(section, &props, &[], &[], |_, _, _| true).unwrap_err();
        assert_eq!(
            e,
            Conflict::Property(PropertyConflict::SameProperty {
                section,
                first: "message.send.max.retries".into(),
                second: "retries".into(),
            })
        );
        let Conflict::Property(e) = e else {
            unreachable!()
        };
        assert_eq!(
            e.to_string(),
            "[sinks.kafka.properties] \"message.send.max.retries\" and \"retries\" are names \
             of one librdkafka property; keep one"
        );
    }
}
