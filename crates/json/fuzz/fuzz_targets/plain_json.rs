//! Fuzzes the plain JSON parse: arbitrary bytes. Nothing may panic; what
//! parses is serde_json's own `Value` wherever no key is one serde_json
//! reserves (the same parser, the same text), and it survives being
//! written and read again with every key as it was.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The value's shape and keys, every number the same (serde_json's float
/// parse is not always the exact inverse of its printing).
fn shape(v: &Value) -> Value {
    match v {
        Value::Number(_) => Value::Null,
        Value::Array(a) => Value::Array(a.iter().map(shape).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        other => other.clone(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(v) = tidegate_json::from_slice(data) else {
        return;
    };
    if !tidegate_json::holds_reserved_key(&v) {
        let theirs: Value = serde_json::from_slice(data).expect("serde_json parses what we parse");
        assert_eq!(v, theirs);
    }
    let text = serde_json::to_vec(&v).expect("a Value always serializes");
    let again = tidegate_json::from_slice(&text).expect("our own output parses");
    assert_eq!(shape(&again), shape(&v));
});
