//! JSON connections: a connection whose first byte is `{` or `[` speaks
//! JSON for its whole life (Fluentd's in_forward does the same), with the
//! Message and Forward shapes written as JSON arrays and acks answered as
//! JSON objects.
//!
//! [`JsonScanner`] finds where a top-level value ends, resumably, by
//! tracking brackets and strings; only the complete value is handed to
//! `serde_json`, so a value arriving in many reads is parsed once.

use bytes::Bytes;
use serde_json::Value;

use super::frame::{Event, Frame, FrameKind, RecordBytes};
use super::scan::Scan;
use super::{DecodeError, Limits};

/// Resumable finder of the end of one top-level JSON value.
#[derive(Debug, Clone, Default)]
pub struct JsonScanner {
    pos: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    started: bool,
}

impl JsonScanner {
    /// Continues scanning `buf` (which may only have grown since the last
    /// call). `Complete(n)`: one value (with leading whitespace) is `buf[..n]`.
    pub fn scan(&mut self, buf: &[u8], limits: &Limits) -> Result<Scan, DecodeError> {
        while self.pos < buf.len() {
            let b = buf[self.pos];
            self.pos += 1;
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if self.depth == 0 {
                        return Ok(self.finish());
                    }
                }
                continue;
            }
            match b {
                b' ' | b'\t' | b'\r' | b'\n' if !self.started => {}
                b',' | b']' | b'}' if !self.started => {
                    return Err(DecodeError::BadJson(format!(
                        "unexpected {:?} between values",
                        b as char
                    )));
                }
                b' ' | b'\t' | b'\r' | b'\n' | b',' if self.depth == 0 => {
                    // End of a top-level scalar (`null`, a number, …).
                    self.pos -= 1;
                    return Ok(self.finish());
                }
                b'[' | b'{' if self.started && self.depth == 0 => {
                    self.pos -= 1;
                    return Ok(self.finish());
                }
                b'[' | b'{' => {
                    self.started = true;
                    self.depth += 1;
                    if self.depth > limits.max_depth {
                        return Err(DecodeError::TooDeep {
                            limit: limits.max_depth,
                        });
                    }
                }
                b']' | b'}' => {
                    if self.depth == 0 {
                        return Err(DecodeError::BadJson("unbalanced closing bracket".into()));
                    }
                    self.depth -= 1;
                    if self.depth == 0 {
                        return Ok(self.finish());
                    }
                }
                b'"' => {
                    self.started = true;
                    self.in_string = true;
                }
                _ => self.started = true,
            }
        }
        if buf.len() > limits.max_frame_bytes {
            return Err(DecodeError::FrameTooLarge {
                declared: buf.len() as u64,
                limit: limits.max_frame_bytes,
            });
        }
        Ok(Scan::Incomplete {
            need: buf.len() + 1,
        })
    }

    fn finish(&mut self) -> Scan {
        let n = self.pos;
        *self = JsonScanner::default();
        Scan::Complete(n)
    }
}

/// Decodes one complete JSON value into a frame, appending its events.
pub fn decode_json_frame(text: &[u8], out: &mut Vec<Event>) -> Result<Frame, DecodeError> {
    let trimmed = text.trim_ascii();
    if trimmed.is_empty() {
        return Ok(invalid("empty value"));
    }
    let v: Value =
        tidegate_json::from_slice(trimmed).map_err(|e| DecodeError::BadJson(e.to_string()))?;
    let mut frame = invalid("");
    let arr = match v {
        Value::Null => {
            frame.kind = FrameKind::Heartbeat;
            return Ok(frame);
        }
        Value::Array(a) => a,
        _ => return Ok(invalid("top-level value is not an array")),
    };
    if arr.len() < 2 {
        return Ok(invalid("message has fewer than 2 elements"));
    }
    let Some(tag) = arr[0].as_str() else {
        return Ok(invalid("tag is not a string"));
    };
    let option_at = match &arr[1] {
        Value::Array(entries) => {
            for e in entries {
                let ok = match e.as_array() {
                    Some(pair) if pair.len() >= 2 => push_event(&pair[0], &pair[1], out),
                    _ => false,
                };
                frame.invalid_events += u32::from(!ok);
            }
            2
        }
        _ => {
            if arr.len() < 3 {
                return Ok(invalid("message mode needs a record"));
            }
            frame.invalid_events += u32::from(!push_event(&arr[1], &arr[2], out));
            3
        }
    };
    frame.kind = FrameKind::Events;
    frame.tag = Bytes::copy_from_slice(tag.as_bytes());
    frame.chunk = arr
        .get(option_at)
        .and_then(|o| o.get("chunk"))
        .and_then(Value::as_str)
        .map(|c| Bytes::copy_from_slice(c.as_bytes()));
    Ok(frame)
}

fn invalid(why: &'static str) -> Frame {
    Frame {
        kind: FrameKind::Invalid(why),
        tag: Bytes::new(),
        chunk: None,
        invalid_events: 0,
    }
}

fn json_time_ns(t: &Value) -> Option<u64> {
    match t {
        Value::Number(n) => match n.as_u64() {
            Some(s) => s.checked_mul(1_000_000_000),
            None => n
                .as_f64()
                .filter(|f| f.is_finite() && (0.0..1.8e10).contains(f))
                .map(|f| (f * 1e9) as u64),
        },
        Value::Array(a) => a.first().and_then(json_time_ns),
        _ => None,
    }
}

fn push_event(time: &Value, record: &Value, out: &mut Vec<Event>) -> bool {
    let (Some(time_ns), true) = (json_time_ns(time), record.is_object()) else {
        return false;
    };
    let bytes = serde_json::to_vec(record).expect("a Value always serializes");
    out.push(Event {
        time_ns,
        record: RecordBytes::Json(Bytes::from(bytes)),
    });
    true
}

/// The JSON ack for `chunk`: `{"ack":"<chunk>"}`.
pub fn json_ack(chunk: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "ack": chunk })).expect("a Value always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_split_and_batched_are_found() {
        let text = br#"["a", 1, {"k": "]\"x"}] ["b", [[2, {"z": 1}]], {"chunk": "c1"}]"#;
        let lim = Limits::default();
        let mut s = JsonScanner::default();
        for cut in 0..20 {
            assert!(matches!(
                s.scan(&text[..cut], &lim).unwrap(),
                Scan::Incomplete { .. }
            ));
        }
        let Scan::Complete(n) = s.scan(text, &lim).unwrap() else {
            panic!()
        };
        let mut out = Vec::new();
        let f = decode_json_frame(&text[..n], &mut out).unwrap();
        assert_eq!(f.kind, FrameKind::Events);
        assert_eq!(out[0].time_ns, 1_000_000_000);
        let Scan::Complete(m) = s.scan(&text[n..], &lim).unwrap() else {
            panic!()
        };
        let f = decode_json_frame(&text[n..n + m], &mut out).unwrap();
        assert_eq!(f.chunk.as_deref(), Some(b"c1".as_slice()));
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[1].record,
            RecordBytes::Json(Bytes::from_static(br#"{"z":1}"#))
        );
    }

    #[test]
    fn a_record_keeps_a_key_serde_json_reserves() {
        // With serde_json's `raw_value` feature (on in the binary, and in
        // this crate's tests) its own `Value` would store this record as
        // `[1]`.
        let text = br#"["t", 1, {"$serde_json::private::RawValue": "[1]"}]"#;
        let mut out = Vec::new();
        decode_json_frame(text, &mut out).unwrap();
        assert_eq!(
            out[0].record,
            RecordBytes::Json(Bytes::from_static(
                br#"{"$serde_json::private::RawValue":"[1]"}"#
            ))
        );
    }

    #[test]
    fn the_ack_is_a_json_object() {
        assert_eq!(json_ack("x"), br#"{"ack":"x"}"#);
    }
}
