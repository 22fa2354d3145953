//! The `/ws` JSON protocol's client requests, decoded from one text frame.
//! Pure. Server replies are built in [`crate::app::json`] and
//! [`crate::delivery`]. Documented in docs/push.md.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use tidegate_hub::backbone::Positions;

/// One client request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum ClientOp {
    /// Subscribe to topic patterns.
    Subscribe {
        /// Echoed in the reply.
        #[serde(default)]
        id: Option<u64>,
        /// Patterns (`*` one token, `>` the rest).
        patterns: Vec<String>,
        /// Cluster mode: answer with the backbone's `positions` now, where
        /// this subscription starts in the cluster's history.
        #[serde(default)]
        positions: bool,
        /// Cluster mode, on any node: first replay, from the cluster's
        /// history, every message matching `patterns` after these
        /// positions (`{"partition": next position}`, as the last `pos` of
        /// each partition plus one, or the `positions` of the
        /// subscription).
        /// (JSON object keys are strings: see [`positions`].)
        #[serde(default)]
        from: Option<BTreeMap<String, i64>>,
    },
    /// Remove subscriptions.
    Unsubscribe {
        /// Echoed in the reply.
        #[serde(default)]
        id: Option<u64>,
        /// Patterns as subscribed.
        patterns: Vec<String>,
    },
    /// Publish to a topic: `payload` (any JSON; a string is sent as its
    /// text), or `"binary": true` and the next binary frame is the payload.
    Publish {
        /// Echoed in the reply.
        #[serde(default)]
        id: Option<u64>,
        /// The topic.
        topic: String,
        /// The payload, as written (no object key treated specially:
        /// `tidegate_json`).
        #[serde(default, deserialize_with = "tidegate_json::deserialize_option")]
        payload: Option<Value>,
        /// The payload is the next binary frame.
        #[serde(default)]
        binary: bool,
    },
    /// Take over a lost session (its subscriptions and every message after
    /// `offset`); sent before any subscribe.
    Recover {
        /// Echoed in the reply.
        #[serde(default)]
        id: Option<u64>,
        /// The `session` id the lost connection was given.
        session: String,
        /// The offset of the last message received (0 or absent: none).
        #[serde(default)]
        offset: u64,
    },
}

/// A subscribe's `from`, its partition keys read as numbers.
pub fn positions(from: &BTreeMap<String, i64>) -> Result<Positions, String> {
    from.iter()
        .map(|(p, o)| {
            p.parse::<i32>()
                .map(|p| (p, *o))
                .map_err(|_| format!("from: {p:?} is not a partition number"))
        })
        .collect()
}

/// Decodes one request.
pub fn decode(text: &str) -> Result<ClientOp, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_decode() {
        assert_eq!(
            decode(r#"{"op":"subscribe","id":1,"patterns":["a.>"]}"#),
            Ok(ClientOp::Subscribe {
                id: Some(1),
                patterns: vec!["a.>".into()],
                positions: false,
                from: None,
            })
        );
        assert_eq!(
            decode(r#"{"op":"subscribe","patterns":["a"],"from":{"0":5,"3":9}}"#),
            Ok(ClientOp::Subscribe {
                id: None,
                patterns: vec!["a".into()],
                positions: false,
                from: Some([("0".into(), 5), ("3".into(), 9)].into_iter().collect()),
            })
        );
        let from = [("0".to_owned(), 5), ("x".to_owned(), 1)]
            .into_iter()
            .collect();
        assert!(positions(&from).unwrap_err().contains("\"x\""));
        assert!(matches!(
            decode(r#"{"op":"publish","topic":"a","payload":{"x":1}}"#),
            Ok(ClientOp::Publish { binary: false, .. })
        ));
        assert_eq!(
            decode(r#"{"op":"recover","session":"abc","offset":7}"#),
            Ok(ClientOp::Recover {
                id: None,
                session: "abc".into(),
                offset: 7
            })
        );
        // The payload as the client wrote it, even with a key serde_json
        // reserves first in an object; `null` is no payload.
        match decode(
            r#"{"op":"publish","topic":"a","payload":{"$serde_json::private::RawValue":"5"}}"#,
        ) {
            Ok(ClientOp::Publish {
                payload: Some(p), ..
            }) => {
                assert_eq!(p["$serde_json::private::RawValue"], "5")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode(r#"{"op":"publish","topic":"a","payload":null}"#),
            Ok(ClientOp::Publish { payload: None, .. })
        ));
        assert!(decode(r#"{"op":"nope"}"#).is_err());
        assert!(decode("[").is_err());
    }

    proptest! {
        #[test]
        fn any_text_decodes_without_panic(s in "\\PC{0,64}") {
            let _ = decode(&s);
        }
    }
}
