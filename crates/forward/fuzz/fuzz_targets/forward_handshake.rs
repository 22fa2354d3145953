//! Fuzzes the shared-key handshake, both sides, and the client's ack
//! reader: what a stranger sends before it is authenticated (the PING, cut
//! from the stream by the handshake's msgpack-only decoder in arbitrary
//! pieces, as the server reads it) and what a server answers a client (a
//! HELO, a PONG, an `{"ack": chunk}`). Nothing may panic, the buffer never
//! holds more than the PING limit plus one piece, and what parses survives
//! its encoder: a refusal PONG reads back its reason, an ack its chunk,
//! and a parsed HELO carries a full handshake (the client's PING for it is
//! accepted by a server that sent that HELO, and that server's PONG by the
//! client).
//!
//! Byte 0 picks the piece size; the rest is the stream.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tidegate_forward::client::parse_ack;
use tidegate_forward::codec::decoder::ForwardDecoder;
use tidegate_forward::codec::encode::write_ack;
use tidegate_forward::codec::Limits;
use tidegate_forward::connection::MAX_PING_BYTES;
use tidegate_forward::handshake::{
    parse_helo, parse_pong, pong_refusal, ClientHandshake, Helo, ServerHandshake,
};
use tidegate_forward::UserConfig;

const KEY: &str = "secret";

fn server(users: bool) -> ServerHandshake {
    let users = if users {
        vec![UserConfig {
            username: "alice".into(),
            password: "pw".into(),
        }]
    } else {
        Vec::new()
    };
    ServerHandshake::new(KEY.into(), "srv".into(), users)
}

/// Every parser of the handshake and of acks on one value.
fn check_value(value: &[u8]) {
    // The server side, unauthenticated: a PING against a HELO (with and
    // without users). A forged PING cannot know the key.
    let helo = Helo {
        nonce: vec![7; 16],
        auth_salt: vec![9; 16],
    };
    for users in [false, true] {
        if let Ok(pong) = server(users).answer_ping(&helo, value) {
            panic!("a fuzzed PING passed the shared key check: {pong:?}");
        }
    }

    // The client side.
    if let Ok(p) = parse_pong(value) {
        let again = parse_pong(&pong_refusal(&p.reason)).expect("a refusal parses");
        assert!(!again.accepted);
        assert_eq!(again.reason, p.reason);
    }
    if let Some(chunk) = parse_ack(value) {
        let mut out = Vec::new();
        write_ack(&mut out, &chunk);
        assert_eq!(parse_ack(&out), Some(chunk));
    }
    if let Ok(info) = parse_helo(value) {
        assert!(!info.nonce.is_empty());
        let client = ClientHandshake::new("cli".into(), KEY.into(), "alice".into(), "pw".into());
        let ping = client.ping(&info);
        let sent = Helo {
            nonce: info.nonce.clone(),
            auth_salt: info.auth_salt.clone(),
        };
        let pong = server(!info.auth_salt.is_empty())
            .answer_ping(&sent, &ping)
            .expect("the client's PING for a parsed HELO is accepted");
        client
            .check_pong(&info, &pong)
            .expect("the server's PONG is accepted");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, rest)) = data.split_first() else {
        return;
    };
    // The whole input as one value (the client reads its replies after the
    // same kind of decoder, so every parser sees what it could be given).
    check_value(rest);

    // As the server reads a PING: msgpack only, at most MAX_PING_BYTES.
    let step = usize::from(step % 64) + 1;
    let mut decoder = ForwardDecoder::msgpack_only(Limits {
        max_frame_bytes: MAX_PING_BYTES,
        ..Limits::default()
    });
    let mut buf = BytesMut::new();
    for piece in rest.chunks(step) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.next_value(&mut buf) {
                Ok(Some(v)) => {
                    assert!(v.len() <= MAX_PING_BYTES);
                    check_value(&v);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
        assert!(buf.len() <= MAX_PING_BYTES + step);
    }
});
