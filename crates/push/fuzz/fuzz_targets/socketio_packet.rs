//! Fuzzes the Socket.IO packet decoder: any text must decode or be refused
//! without panicking, and a decoded packet must survive encode → decode.
//! (Its JSON data is compared only when it holds no floating-point number:
//! serde_json's default float parsing may differ from the printed value in
//! the last bit, which is not a decoder fault.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use tidegate_push::socketio::SioPacket;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(p) = SioPacket::decode(text) else {
        return;
    };
    let again = SioPacket::decode(&p.encode()).expect("re-encoded packet decodes");
    assert_eq!(
        (again.kind, again.attachments, &again.nsp, again.id),
        (p.kind, p.attachments, &p.nsp, p.id)
    );
    if !p.data.as_ref().is_some_and(has_float) {
        assert_eq!(again.data, p.data);
    }
});

fn has_float(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Number(n) => n.is_f64(),
        serde_json::Value::Array(a) => a.iter().any(has_float),
        serde_json::Value::Object(o) => o.values().any(has_float),
        _ => false,
    }
}
