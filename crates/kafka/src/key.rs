//! `message_key_field`: the Kafka record key taken from a field of the
//! message's JSON payload (a Forward record, for instance, arrives as a JSON
//! object).
//!
//! Only the top level of the object is searched, in one pass that borrows:
//! other fields are skipped without being built, and a string value without
//! escapes is returned as a slice of the payload itself. What is not an
//! object, or has no such field, or has it `null`, gives no key — the sink
//! then uses the message's own key.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// Extracts the key field named in `message_key_field`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyField {
    name: String,
}

impl KeyField {
    /// Looks for the top-level field `name`.
    pub fn new(name: impl Into<String>) -> Self {
        KeyField { name: name.into() }
    }

    /// The key `payload` carries: a string field's text, any other value
    /// (number, `true`/`false`, object, array) as its JSON text; `None` when
    /// the payload is not a JSON object, lacks the field or has it `null`.
    pub fn extract<'p>(&self, payload: &'p [u8]) -> Option<Cow<'p, [u8]>> {
        let mut de = serde_json::Deserializer::from_slice(payload);
        let raw: &'p RawValue = de.deserialize_map(FindField(&self.name)).ok().flatten()?;
        let text = raw.get();
        if text.starts_with('"') {
            let inner = &text[1..text.len() - 1];
            if !inner.contains('\\') {
                return Some(Cow::Borrowed(inner.as_bytes()));
            }
            let unescaped: String = serde_json::from_str(text).ok()?;
            return Some(Cow::Owned(unescaped.into_bytes()));
        }
        (text != "null").then_some(Cow::Borrowed(text.as_bytes()))
    }
}

/// Walks a JSON object for one field, keeping its value unparsed.
struct FindField<'n>(&'n str);

impl<'de> Visitor<'de> for FindField<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(is_ours) = map.next_key_seed(KeyIs(self.0))? {
            if is_ours && found.is_none() {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Compares an object key with the wanted name without building a string.
struct KeyIs<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(field: &str, payload: &str) -> Option<String> {
        KeyField::new(field)
            .extract(payload.as_bytes())
            .map(|k| String::from_utf8(k.into_owned()).unwrap())
    }

    #[test]
    fn a_string_field_becomes_the_key_borrowed_from_the_payload() {
        let payload = br#"{"msg":"hi","user":"u-42","n":1}"#;
        let k = KeyField::new("user").extract(payload).unwrap();
        assert!(matches!(k, Cow::Borrowed(b"u-42")));
        assert_eq!(
            key("user", r#"{"user":"a\"b\u00e9"}"#).as_deref(),
            Some("a\"bé")
        );
    }

    #[test]
    fn other_values_become_their_json_text() {
        assert_eq!(key("id", r#"{"id":12345}"#).as_deref(), Some("12345"));
        assert_eq!(key("id", r#"{"id":-1.5e3}"#).as_deref(), Some("-1.5e3"));
        assert_eq!(key("ok", r#"{"ok":true}"#).as_deref(), Some("true"));
        assert_eq!(
            key("o", r#"{"o":{"a":[1,2]},"x":0}"#).as_deref(),
            Some(r#"{"a":[1,2]}"#)
        );
    }

    #[test]
    fn no_object_no_field_or_null_gives_no_key() {
        assert_eq!(key("user", r#"{"msg":"hi"}"#), None);
        assert_eq!(key("user", r#"{"user":null}"#), None);
        assert_eq!(key("user", "not json"), None);
        assert_eq!(key("user", r#"["user","x"]"#), None);
        assert_eq!(key("user", r#"{"user":"x""#), None, "truncated");
        assert_eq!(key("user", ""), None);
        assert_eq!(
            key("user", r#"{"nested":{"user":"inner"}}"#),
            None,
            "only the top level is searched"
        );
    }

    #[test]
    fn the_first_occurrence_of_a_repeated_field_wins() {
        assert_eq!(
            key("user", r#"{"user":"first","user":"second"}"#).as_deref(),
            Some("first")
        );
    }
}
