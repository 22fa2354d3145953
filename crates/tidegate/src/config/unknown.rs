//! Unknown keys. Listener sections flatten a shared block, and serde cannot
//! combine `flatten` with `deny_unknown_fields`; so the check is done here
//! once for the whole file: every key of the input must come back when the
//! parsed configuration is written out again. A key that does not is one no
//! section knows (a typo such as `lisen`, or `alow = []`), reported with its
//! dotted path. For that, every known field is written out, empty lists and
//! empty tables included (an empty `[kv]` or `[cluster]` turns the section
//! on with its defaults, so an empty `[clustr]` must not pass unnoticed).

/// The dotted path of the first key of `input` that `parsed` lacks.
pub fn first_unknown(input: &toml::Value, parsed: &toml::Value) -> Option<String> {
    walk(input, parsed, "")
}

fn walk(input: &toml::Value, parsed: &toml::Value, at: &str) -> Option<String> {
    match (input, parsed) {
        (toml::Value::Table(i), toml::Value::Table(p)) => {
            for (k, v) in i {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match p.get(k) {
                    Some(pv) => {
                        if let Some(u) = walk(v, pv, &path) {
                            return Some(u);
                        }
                    }
                    None => return Some(path),
                }
            }
            None
        }
        (toml::Value::Array(i), toml::Value::Array(p)) if i.len() == p.len() => i
            .iter()
            .zip(p)
            .enumerate()
            .find_map(|(n, (iv, pv))| walk(iv, pv, &format!("{at}[{n}]"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_the_parsed_form_lacks_is_reported_with_its_path() {
        let input: toml::Value = toml::from_str("[http]\nlisen = 1\nlisten = 2\n").unwrap();
        let parsed: toml::Value = toml::from_str("[http]\nlisten = 2\nother = 3\n").unwrap();
        assert_eq!(
            first_unknown(&input, &parsed).as_deref(),
            Some("http.lisen")
        );
        let input: toml::Value = toml::from_str("[[routes]]\ntopics = \"a\"\nsnk = 1\n").unwrap();
        let parsed: toml::Value = toml::from_str("[[routes]]\ntopics = \"a\"\n").unwrap();
        assert_eq!(
            first_unknown(&input, &parsed).as_deref(),
            Some("routes[0].snk")
        );
        let input: toml::Value = toml::from_str("[wire]\nallow = []\n").unwrap();
        let parsed: toml::Value = toml::from_str("[wire]\nallow = []\n").unwrap();
        assert_eq!(first_unknown(&input, &parsed), None);
        // A misspelt key is unknown even when its value is an empty list.
        let input: toml::Value = toml::from_str("[wire]\nalow = []\n").unwrap();
        assert_eq!(first_unknown(&input, &parsed).as_deref(), Some("wire.alow"));
        // A misspelt section stays unknown even when empty.
        let input: toml::Value = toml::from_str("[clustr]\n[wire]\n").unwrap();
        let parsed: toml::Value = toml::from_str("[wire]\nx = 1\n").unwrap();
        assert_eq!(first_unknown(&input, &parsed).as_deref(), Some("clustr"));
        let input: toml::Value = toml::from_str("[wire.tlss]\n").unwrap();
        assert_eq!(first_unknown(&input, &parsed).as_deref(), Some("wire.tlss"));
    }
}
