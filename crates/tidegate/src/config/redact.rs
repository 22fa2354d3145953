//! Secrets out of what `tidegate config` prints: shared keys, passwords,
//! tokens and secrets are replaced, wherever they sit in the tree, so the
//! output can be pasted into a ticket.

/// What a redacted value prints as.
pub const REDACTED: &str = "<redacted>";

/// True for a key whose value is a secret.
pub fn is_secret(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k == "shared_key"
        || k.contains("password")
        || k.contains("secret")
        || k == "token"
        || k == "tokens"
        || k.ends_with(".token")
        || k == "sasl.oauthbearer.config"
        || k == "ssl.key.pem"
}

/// Replaces every secret in `value` (a parsed config) in place.
pub fn redact(value: &mut toml::Value) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t.iter_mut() {
                // An empty secret hides nothing (and says "not set").
                let empty = matches!(v, toml::Value::String(x) if x.is_empty())
                    || matches!(v, toml::Value::Array(a) if a.is_empty());
                if is_secret(k) && !empty {
                    *v = match v {
                        toml::Value::Array(a) => toml::Value::Array(
                            a.iter()
                                .map(|_| toml::Value::String(REDACTED.into()))
                                .collect(),
                        ),
                        _ => toml::Value::String(REDACTED.into()),
                    };
                } else {
                    redact(v);
                }
            }
        }
        toml::Value::Array(a) => a.iter_mut().for_each(redact),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_wherever_they_are() {
        let mut v: toml::Value = toml::from_str(
            "[forward]\nshared_key = \"s3\"\n[[forward.users]]\nusername = \"u\"\npassword = \"p\"\n[wire]\ntokens = [\"a\", \"b\"]\n[sinks.kafka.properties]\n\"sasl.password\" = \"x\"\n\"client.id\" = \"keep\"\n",
        )
        .unwrap();
        redact(&mut v);
        let text = toml::to_string(&v).unwrap();
        for secret in ["s3", "\"p\"", "\"a\"", "\"x\""] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        assert!(text.contains("keep") && text.contains("\"u\""), "{text}");
    }
}
