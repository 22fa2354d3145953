//! `${VAR}` and `${VAR:-default}` (the default also when `VAR` is empty) in
//! the configuration text, from the
//! environment (as Vector and Fluent Bit do), so one file serves every
//! deployment and secrets stay out of it. `$$` is a literal `$`. Whole-line
//! comments are left alone, so a commented-out example never fails a start.
//! An unset variable without a default is an error naming it and its line.

use thiserror::Error;

/// A reference that cannot be resolved.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EnvError {
    /// `${NAME}` with `NAME` unset and no default.
    #[error("line {line}: environment variable {name} is not set (write ${{{name}:-default}} to give a default)")]
    Unset {
        /// 1-based line.
        line: usize,
        /// The variable.
        name: String,
    },
    /// `${` without a closing `}` or with an invalid name.
    #[error("line {line}: malformed variable reference {text:?}")]
    Malformed {
        /// 1-based line.
        line: usize,
        /// What was written.
        text: String,
    },
}

/// Replaces every reference in `text`, looking names up with `lookup`.
pub fn expand(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, EnvError> {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if line.trim_start().starts_with('#') {
            out.push_str(line);
            continue;
        }
        expand_line(line, i + 1, &lookup, &mut out)?;
    }
    Ok(out)
}

fn expand_line(
    line: &str,
    number: usize,
    lookup: &impl Fn(&str) -> Option<String>,
    out: &mut String,
) -> Result<(), EnvError> {
    let mut rest = line;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let Some(body) = after.strip_prefix('{') else {
            out.push('$');
            rest = after;
            continue;
        };
        let malformed = || EnvError::Malformed {
            line: number,
            text: format!("${{{}", body.trim_end()),
        };
        let end = body.find('}').ok_or_else(malformed)?;
        let inner = &body[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(malformed());
        }
        match (lookup(name), default) {
            // As in the shell and Vector: an empty value takes the default.
            (Some(v), Some(d)) if v.is_empty() => out.push_str(d),
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(EnvError::Unset {
                    line: number,
                    name: name.to_owned(),
                })
            }
        }
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "BROKERS" => Some("10.0.0.1:9092".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn references_defaults_and_escapes_expand() {
        let t = "brokers = \"${BROKERS}\"\nport = ${PORT:-24224}\ncost = \"$$5 and $x\"\ne = \"${EMPTY:-d}\"\n";
        assert_eq!(
            expand(t, env).unwrap(),
            "brokers = \"10.0.0.1:9092\"\nport = 24224\ncost = \"$5 and $x\"\ne = \"d\"\n"
        );
    }

    #[test]
    fn an_unset_variable_without_default_is_named() {
        let e = expand("a = 1\nkey = \"${SHARED_KEY}\"\n", env).unwrap_err();
        assert_eq!(
            e,
            EnvError::Unset {
                line: 2,
                name: "SHARED_KEY".into()
            }
        );
        assert!(e.to_string().contains("SHARED_KEY"));
    }

    #[test]
    fn comments_are_not_expanded_and_malformed_references_are_errors() {
        assert_eq!(expand("# ${NOPE}\n", env).unwrap(), "# ${NOPE}\n");
        assert!(matches!(
            expand("a = \"${NOPE\"", env),
            Err(EnvError::Malformed { .. })
        ));
        assert!(matches!(
            expand("a = \"${1X}\"", env),
            Err(EnvError::Malformed { .. })
        ));
    }
}
