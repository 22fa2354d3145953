//! Record conversions: a msgpack record → JSON bytes (the default payload),
//! and a JSON value → msgpack (records from JSON connections under the
//! msgpack payload option, and the client's encoder).
//!
//! The msgpack → JSON path writes straight from the msgpack bytes into the
//! output with no intermediate tree. Strings that are not UTF-8 and binaries
//! become JSON strings (invalid sequences replaced); map keys that are not
//! strings become a string holding their text (written once, see
//! `write_value`); an EventTime inside a record becomes float seconds;
//! other extension values and non-finite floats become `null`.
//!
//! The output is linear in the input: every byte of the record is written
//! (and escaped) at most once more, whatever its nesting.

use std::io::Write;

use super::reader::{MsgReader, Number};
use super::time::EVENT_TIME_EXT;
use super::DecodeError;

/// Appends the JSON form of the msgpack value `record` to `out`.
pub fn msgpack_to_json(
    record: &[u8],
    max_depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    let mut r = MsgReader::new(record);
    write_value(&mut r, max_depth, Context::Json, out)
}

/// Where a value is being written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    /// As JSON.
    Json,
    /// As the text of a non-string map key, which the caller then writes
    /// as one JSON string. Non-string keys nested inside it are written
    /// bare (`{1:2}`, not `{"1":2}`): stringifying them again at every
    /// level would escape the same bytes once per level, and a record of
    /// 32 maps nested as keys would grow by 2^32 (found by the fuzzer).
    KeyText,
}

fn write_value(
    r: &mut MsgReader<'_>,
    depth: usize,
    cx: Context,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    if depth == 0 {
        return Err(DecodeError::TooDeep { limit: 0 });
    }
    if r.read_nil() {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    match r.peek() {
        Some(0xc2) => {
            r.skip_value()?;
            out.extend_from_slice(b"false");
            return Ok(());
        }
        Some(0xc3) => {
            r.skip_value()?;
            out.extend_from_slice(b"true");
            return Ok(());
        }
        _ => {}
    }
    if let Some(n) = r.read_number()? {
        write_number(n, out);
        return Ok(());
    }
    if let Some(s) = r.read_raw_bytes()? {
        write_string(s, out);
        return Ok(());
    }
    if let Some(n) = r.read_array_len()? {
        out.push(b'[');
        for i in 0..n {
            if i > 0 {
                out.push(b',');
            }
            write_value(r, depth - 1, cx, out)?;
        }
        out.push(b']');
        return Ok(());
    }
    if let Some(n) = r.read_map_len()? {
        out.push(b'{');
        for i in 0..n {
            if i > 0 {
                out.push(b',');
            }
            if let Some(k) = r.read_raw_bytes()? {
                write_string(k, out);
            } else if cx == Context::KeyText {
                write_value(r, depth - 1, Context::KeyText, out)?;
            } else {
                let mut key = Vec::new();
                write_value(r, depth - 1, Context::KeyText, &mut key)?;
                write_string(&key, out);
            }
            out.push(b':');
            write_value(r, depth - 1, cx, out)?;
        }
        out.push(b'}');
        return Ok(());
    }
    if let Some((ty, range)) = r.read_ext()? {
        let b = &r.bytes()[range];
        if ty == EVENT_TIME_EXT && b.len() == 8 {
            let secs = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            let nanos = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            write_number(Number::Float(f64::from(secs) + f64::from(nanos) / 1e9), out);
        } else {
            out.extend_from_slice(b"null");
        }
        return Ok(());
    }
    Err(DecodeError::Malformed("unknown msgpack value in record"))
}

fn write_number(n: Number, out: &mut Vec<u8>) {
    match n {
        Number::Unsigned(v) => out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
        Number::Signed(v) => out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
        Number::Float(f) if f.is_finite() => {
            // serde_json prints the shortest round-tripping form.
            let _ = serde_json::to_writer(&mut *out, &f);
        }
        Number::Float(_) => out.extend_from_slice(b"null"),
    }
}

/// Writes `raw` as a JSON string (invalid UTF-8 replaced by U+FFFD).
fn write_string(raw: &[u8], out: &mut Vec<u8>) {
    match std::str::from_utf8(raw) {
        Ok(s) => write_str(s, out),
        Err(_) => write_str(&String::from_utf8_lossy(raw), out),
    }
}

/// Whether any byte of `bytes` must be escaped in a JSON string. Folds each
/// 32-byte block without an early exit so the compiler can turn it into
/// SIMD compares; `iter().any` tests and branches byte by byte, and this
/// scan runs over every string of every record on the Forward → JSON path.
fn needs_escape(bytes: &[u8]) -> bool {
    bytes.chunks(32).any(|block| {
        block.iter().fold(false, |acc, &b| {
            acc | (b < 0x20) | (b == b'"') | (b == b'\\')
        })
    })
}

fn write_str(s: &str, out: &mut Vec<u8>) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    // Fast path: most log text needs no escaping.
    if !needs_escape(bytes) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends the msgpack form of a JSON value to `out`.
pub fn json_to_msgpack(v: &serde_json::Value, out: &mut Vec<u8>) {
    use rmp::encode as enc;
    use serde_json::Value;
    // Writing into a Vec cannot fail.
    match v {
        Value::Null => enc::write_nil(out).expect("vec write"),
        Value::Bool(b) => enc::write_bool(out, *b).expect("vec write"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                enc::write_uint(out, u).expect("vec write");
            } else if let Some(i) = n.as_i64() {
                enc::write_sint(out, i).expect("vec write");
            } else {
                enc::write_f64(out, n.as_f64().unwrap_or(0.0)).expect("vec write");
            }
        }
        Value::String(s) => enc::write_str(out, s).expect("vec write"),
        Value::Array(a) => {
            enc::write_array_len(out, a.len() as u32).expect("vec write");
            a.iter().for_each(|x| json_to_msgpack(x, out));
        }
        Value::Object(m) => {
            enc::write_map_len(out, m.len() as u32).expect("vec write");
            for (k, x) in m {
                enc::write_str(out, k).expect("vec write");
                json_to_msgpack(x, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to_json(v: &serde_json::Value) -> serde_json::Value {
        let mut mp = Vec::new();
        json_to_msgpack(v, &mut mp);
        let mut out = Vec::new();
        msgpack_to_json(&mp, 16, &mut out).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    #[test]
    fn json_survives_a_msgpack_round_trip() {
        let v =
            serde_json::json!({"a": 1, "b": [true, null, -5, 1.5, "x\"y\n\u{1}é"], "c": {"d": {}}});
        assert_eq!(to_json(&v), v);
    }

    #[test]
    fn binary_and_non_string_keys_become_strings() {
        // {1: bin "hi"}
        let mp = [0x81, 0x01, 0xc4, 0x02, b'h', b'i'];
        let mut out = Vec::new();
        msgpack_to_json(&mp, 4, &mut out).unwrap();
        assert_eq!(out, br#"{"1":"hi"}"#);
    }

    #[test]
    fn a_container_key_becomes_its_text_once() {
        // {{1: [true]}: "v"}
        let mp = [0x81, 0x81, 0x01, 0x91, 0xc3, 0xa1, b'v'];
        let mut out = Vec::new();
        msgpack_to_json(&mp, 8, &mut out).unwrap();
        assert_eq!(out, br#"{"{1:[true]}":"v"}"#);
        let back: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, serde_json::json!({"{1:[true]}": "v"}));
    }

    #[test]
    fn maps_nested_as_keys_grow_the_output_linearly() {
        // 30 one-entry maps, each the key of the one before, the innermost
        // {"a": "b"}; the values are nil. Escaping each level's key again
        // doubled the output per level (the fuzzer's 12 s input).
        let levels = 30;
        let mut mp = vec![0x81; levels];
        mp.extend_from_slice(&[0x81, 0xa1, b'a', 0xa1, b'"']);
        mp.extend(std::iter::repeat_n(0xc0, levels));
        let mut out = Vec::new();
        msgpack_to_json(&mp, 64, &mut out).unwrap();
        assert!(out.len() < 8 * mp.len(), "{} bytes out", out.len());
        serde_json::from_slice::<serde_json::Value>(&out).unwrap();
    }

    #[test]
    fn nesting_is_bounded() {
        let mp = [0x91, 0x91, 0x91, 0xc0];
        assert!(msgpack_to_json(&mp, 3, &mut Vec::new()).is_err());
        assert!(msgpack_to_json(&mp, 4, &mut Vec::new()).is_ok());
    }

    proptest::proptest! {
        #[test]
        fn every_string_is_written_as_the_json_string_of_itself(s in ".{0,200}", pick in proptest::collection::vec(0u8..0x7f, 0..100)) {
            // Mix arbitrary text with ASCII (control characters, quotes and
            // backslashes included) so both paths of `write_str` are taken.
            let ascii: String = pick.into_iter().map(char::from).collect();
            for text in [s.as_str(), ascii.as_str(), &format!("{s}{ascii}")] {
                let naive = text.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\');
                proptest::prop_assert_eq!(needs_escape(text.as_bytes()), naive);
                let mut out = Vec::new();
                write_str(text, &mut out);
                let back: String = serde_json::from_slice(&out).unwrap();
                proptest::prop_assert_eq!(back, text);
            }
        }
    }
}
