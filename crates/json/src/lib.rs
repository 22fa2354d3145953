//! JSON text from the network parsed into a [`serde_json::Value`] exactly
//! as written.
//!
//! serde_json's own `Value` gives some object keys a meaning when its
//! `raw_value` feature is on (and the binary has it on: axum and the Kafka
//! crate enable it): an object whose first key is
//! `$serde_json::private::RawValue` is replaced by its string value parsed
//! as JSON. A client's record `{"$serde_json::private::RawValue": "[1]"}`
//! would thus be stored as `[1]` — nothing a client should be able to do
//! to its data, and nothing it asked for. This visitor builds the same
//! `Value` with every key a plain key; a protocol that wants such keys
//! refused can then see them ([`holds_reserved_key`]).

#![warn(missing_docs)]

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Parses `text` into a `Value`, no object key treated specially. Nesting
/// is bounded by serde_json's own limit (128 levels).
pub fn from_slice(text: &[u8]) -> serde_json::Result<Value> {
    serde_json::from_slice::<PlainValue>(text).map(|p| p.0)
}

/// [`from_slice`] for text.
pub fn from_str(text: &str) -> serde_json::Result<Value> {
    from_slice(text.as_bytes())
}

/// For `#[serde(deserialize_with = ...)]` on an `Option<Value>` field read
/// from client JSON: the value as written, `null` as `None` (as serde's
/// own `Option` does).
pub fn deserialize_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    PlainValue::deserialize(d).map(|p| match p.0 {
        Value::Null => None,
        v => Some(v),
    })
}

/// The prefix of the object keys serde_json gives a meaning of its own
/// (`…RawValue` with `raw_value`, `…Number` with `arbitrary_precision`).
pub const RESERVED_KEY_PREFIX: &str = "$serde_json::private::";

/// Whether any object in `v` has a key serde_json reserves: data holding
/// one would not survive being written and read again by serde_json's own
/// `Value` (keys are written sorted, so the key may come first).
pub fn holds_reserved_key(v: &Value) -> bool {
    match v {
        // serde_json stops at 128 levels of nesting when parsing, so for a
        // parsed value this recursion is bounded.
        Value::Object(o) => o
            .iter()
            .any(|(k, v)| k.starts_with(RESERVED_KEY_PREFIX) || holds_reserved_key(v)),
        Value::Array(a) => a.iter().any(holds_reserved_key),
        _ => false,
    }
}

/// A `Value` deserialized by [`PlainVisitor`].
struct PlainValue(Value);

impl<'de> Deserialize<'de> for PlainValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PlainVisitor).map(PlainValue)
    }
}

struct PlainVisitor;

impl<'de> Visitor<'de> for PlainVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        // As serde_json's own visitor: a non-finite float is null.
        Ok(Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        PlainValue::deserialize(d).map(|p| p.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        // The size hint comes from the input: capped, the rest grows as read.
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(PlainValue(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some((key, PlainValue(v))) = map.next_entry::<String, PlainValue>()? {
            object.insert(key, v);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MARKER: &str = "$serde_json::private::RawValue";

    #[test]
    fn a_reserved_first_key_stays_a_plain_key() {
        let text = format!(r#"{{"{MARKER}":"[1]","b":2}}"#);
        let v = from_slice(text.as_bytes()).unwrap();
        assert_eq!(v[MARKER], Value::String("[1]".into()));
        assert_eq!(v["b"], 2);
        // serde_json's own `Value` (its `raw_value` feature is on in this
        // crate's tests, as in the binary) makes something else of it.
        assert_ne!(serde_json::from_str::<Value>(&text).ok(), Some(v));
    }

    #[test]
    fn nested_and_escaped_reserved_keys_stay_plain_keys() {
        let text = r#"[{"a":{"\u0024serde_json::private::RawValue":"{}"}}, 1]"#;
        let v = from_slice(text.as_bytes()).unwrap();
        assert_eq!(v[0]["a"][MARKER], Value::String("{}".into()));
        assert_eq!(v[1], 1);
    }

    #[test]
    fn reserved_keys_are_seen_wherever_they_are() {
        let first = from_str(&format!(r#"{{"{MARKER}":"5"}}"#)).unwrap();
        assert!(holds_reserved_key(&first));
        let nested = from_str(&format!(r#"[1,{{"a":{{"b":2,"{MARKER}":3}}}}]"#)).unwrap();
        assert!(holds_reserved_key(&nested));
        assert!(!holds_reserved_key(
            &from_str(r#"{"$serde":1,"a":[{}]}"#).unwrap()
        ));
    }

    #[derive(serde::Deserialize)]
    struct WithPayload {
        #[serde(default, deserialize_with = "deserialize_option")]
        payload: Option<Value>,
    }

    #[test]
    fn an_optional_field_reads_plainly_and_null_is_none() {
        let p: WithPayload =
            serde_json::from_str(&format!(r#"{{"payload":{{"{MARKER}":"5"}}}}"#)).unwrap();
        assert_eq!(p.payload.unwrap()[MARKER], "5");
        let p: WithPayload = serde_json::from_str(r#"{"payload":null}"#).unwrap();
        assert!(p.payload.is_none());
        let p: WithPayload = serde_json::from_str("{}").unwrap();
        assert!(p.payload.is_none());
    }

    #[test]
    fn bad_json_and_deep_nesting_are_errors() {
        assert!(from_slice(b"{\"a\":").is_err());
        assert!(from_slice(b"[1,]").is_err());
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(
            from_slice(deep.as_bytes()).is_err(),
            "serde_json's depth limit holds"
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| Value::Number(n.into())),
            any::<u64>().prop_map(|n| Value::Number(n.into())),
            (-1e12f64..1e12).prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("[a-z$:]{0,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Without reserved keys, the plain parse is serde_json's (floats
        /// included: both parse the same text the same way, even where
        /// serde_json's parse is not the exact inverse of its printing).
        #[test]
        fn the_plain_parse_is_serde_jsons_for_ordinary_json(v in json_value()) {
            let text = serde_json::to_vec(&v).unwrap();
            let plain = from_slice(&text).unwrap();
            prop_assert_eq!(plain, serde_json::from_slice::<Value>(&text).unwrap());
        }
    }
}
