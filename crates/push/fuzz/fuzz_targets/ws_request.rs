//! Fuzzes what an HTTP client hands the push listener before any protocol
//! decoder of its own: a `/ws` JSON request (one text frame) and an
//! Engine.IO request's query string. Any text must decode or be refused
//! without panicking. A decoded request written back as the protocol
//! documents it (docs/push.md) decodes to the same request (its payload's
//! floats compared by shape only: serde_json's default float parsing may
//! differ from the printed value in the last bit); a subscribe's `from`
//! reads as partitions or names the key that does not; a parsed query,
//! written back, parses the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use tidegate_push::engineio::handshake::{
    parse_query, query_param, EioQuery, Transport, MAX_SID_LEN,
};
use tidegate_push::ws::protocol::{decode, positions, ClientOp};

/// The request as a client writes it.
fn encode(op: &ClientOp) -> String {
    let mut o = Map::new();
    let id = match op {
        ClientOp::Subscribe {
            id,
            patterns,
            positions,
            from,
        } => {
            o.insert("op".into(), "subscribe".into());
            o.insert("patterns".into(), json!(patterns));
            o.insert("positions".into(), json!(positions));
            if let Some(from) = from {
                o.insert("from".into(), json!(from));
            }
            id
        }
        ClientOp::Unsubscribe { id, patterns } => {
            o.insert("op".into(), "unsubscribe".into());
            o.insert("patterns".into(), json!(patterns));
            id
        }
        ClientOp::Publish {
            id,
            topic,
            payload,
            binary,
        } => {
            o.insert("op".into(), "publish".into());
            o.insert("topic".into(), json!(topic));
            if let Some(p) = payload {
                o.insert("payload".into(), p.clone());
            }
            o.insert("binary".into(), json!(binary));
            id
        }
        ClientOp::Recover {
            id,
            session,
            offset,
        } => {
            o.insert("op".into(), "recover".into());
            o.insert("session".into(), json!(session));
            o.insert("offset".into(), json!(offset));
            id
        }
    };
    if let Some(id) = id {
        o.insert("id".into(), json!(id));
    }
    serde_json::to_string(&Value::Object(o)).expect("a Value always serializes")
}

/// The value with every number a float replaced by null.
fn without_floats(v: &Value) -> Value {
    match v {
        Value::Number(n) if n.is_f64() => Value::Null,
        Value::Array(a) => Value::Array(a.iter().map(without_floats).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), without_floats(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn payload_shape(op: &ClientOp) -> ClientOp {
    match op {
        ClientOp::Publish {
            id,
            topic,
            payload,
            binary,
        } => ClientOp::Publish {
            id: *id,
            topic: topic.clone(),
            payload: payload.as_ref().map(without_floats),
            binary: *binary,
        },
        other => other.clone(),
    }
}

fn check_query(text: &str) {
    if let Some(v) = query_param(text, "token") {
        assert!(!v.contains('&'));
    }
    let Ok(q) = parse_query(text) else {
        return;
    };
    if let Some(sid) = &q.sid {
        assert!(!sid.is_empty() && sid.len() <= MAX_SID_LEN && !sid.contains('&'));
    }
    let transport = match q.transport {
        Transport::Polling => "polling",
        Transport::WebSocket => "websocket",
    };
    let mut again = format!("EIO=4&transport={transport}");
    if let Some(sid) = &q.sid {
        again.push_str("&sid=");
        again.push_str(sid);
    }
    assert_eq!(parse_query(&again), Ok::<EioQuery, _>(q));
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check_query(text);
    let Ok(op) = decode(text) else {
        return;
    };
    if let ClientOp::Subscribe {
        from: Some(from), ..
    } = &op
    {
        match positions(from) {
            // "0" and "00" name the same partition.
            Ok(p) => assert!(p.len() <= from.len()),
            Err(e) => assert!(from.keys().any(|k| e.contains(&format!("{k:?}")))),
        }
    }
    let again = decode(&encode(&op)).expect("a re-encoded request decodes");
    assert_eq!(payload_shape(&again), payload_shape(&op));
});
