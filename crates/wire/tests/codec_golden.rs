//! Golden bytes for every frame type: the exact encoding documented in
//! `docs/wire.md`, pinned so the format cannot drift unnoticed.

use bytes::{Bytes, BytesMut};
use tidegate_hub::Message;
use tidegate_wire::codec::{decode_frame, encode_frame};
use tidegate_wire::{AuthToken, Echo, ErrorCode, ErrorFrame, Frame};

fn check(frame: Frame, golden: &[u8]) {
    let mut buf = BytesMut::new();
    encode_frame(&frame, &mut buf).unwrap();
    assert_eq!(&buf[..], golden, "encoding of {frame:?}");
    let mut input = BytesMut::from(golden);
    assert_eq!(decode_frame(&mut input, 1 << 20).unwrap(), Some(frame));
    assert!(input.is_empty());
}

fn sample_message() -> Message {
    Message {
        topic: "a.b".into(),
        key: Some(Bytes::from_static(b"k")),
        timestamp_ns: 0x0102030405060708,
        attributes: vec![("n".into(), "vv".into())],
        payload: Bytes::from_static(b"hi"),
        encoded: Default::default(),
    }
}

const MESSAGE_BODY: [u8; 29] = [
    0x01, // flags: key present
    0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, // timestamp_ns
    0x03, 0x00, b'a', b'.', b'b', // topic
    0x01, 0x00, 0x00, 0x00, b'k', // key
    0x01, 0x00, // one attribute
    0x01, 0x00, b'n', 0x02, 0x00, b'v', b'v', // n = vv
    b'h', // payload starts here (continued below)
];

fn message_frame(ty: u8) -> Vec<u8> {
    let mut v = vec![31, 0, 0, 0, ty];
    v.extend_from_slice(&MESSAGE_BODY);
    v.push(b'i');
    v
}

#[test]
fn publish_golden() {
    check(Frame::Publish(sample_message()), &message_frame(0x01));
}

#[test]
fn message_golden() {
    check(Frame::Message(sample_message()), &message_frame(0x04));
}

#[test]
fn publish_without_key_or_attributes_golden() {
    let m = Message {
        topic: "t".into(),
        key: None,
        timestamp_ns: 0,
        attributes: vec![],
        payload: Bytes::new(),
        encoded: Default::default(),
    };
    check(
        Frame::Publish(m),
        &[
            15, 0, 0, 0, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x00, b't', 0x00, 0x00,
        ],
    );
}

#[test]
fn subscribe_golden() {
    check(
        Frame::Subscribe("a.*".into()),
        &[4, 0, 0, 0, 0x02, b'a', b'.', b'*'],
    );
}

#[test]
fn unsubscribe_golden() {
    check(
        Frame::Unsubscribe("a.>".into()),
        &[4, 0, 0, 0, 0x03, b'a', b'.', b'>'],
    );
}

#[test]
fn echo_request_golden() {
    check(
        Frame::Echo(Echo {
            options: 1,
            send_time_ns: 0x1122334455667788,
            correlation_id: -2,
            extra: Bytes::from_static(&[0xee, 0xff]),
        }),
        &[
            23, 0, 0, 0, 0x05, // length 1 + 20 + 2, ECHO
            0x01, 0x00, 0x00, 0x00, // options = 1
            0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // send time
            0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // correlation id -2
            0xee, 0xff, // extra
        ],
    );
}

#[test]
fn echo_reply_golden_is_the_header_without_extra() {
    let req = Echo {
        options: 1,
        send_time_ns: 5,
        correlation_id: 6,
        extra: Bytes::from_static(&[9; 64]),
    };
    check(
        Frame::Echo(req.reply()),
        &[
            21, 0, 0, 0, 0x05, 1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0,
        ],
    );
}

#[test]
fn ping_and_pong_golden() {
    check(
        Frame::Ping(0x0102),
        &[9, 0, 0, 0, 0x06, 0x02, 0x01, 0, 0, 0, 0, 0, 0],
    );
    check(
        Frame::Pong(0x0102),
        &[9, 0, 0, 0, 0x07, 0x02, 0x01, 0, 0, 0, 0, 0, 0],
    );
}

#[test]
fn error_golden() {
    check(
        Frame::Error(ErrorFrame {
            code: ErrorCode::FrameTooLarge,
            message: "big".into(),
        }),
        &[6, 0, 0, 0, 0x08, 0x01, 0x00, b'b', b'i', b'g'],
    );
}

#[test]
fn auth_and_auth_ok_golden() {
    check(
        Frame::Auth(AuthToken::new(&b"s3cret"[..])),
        &[7, 0, 0, 0, 0x09, b's', b'3', b'c', b'r', b'e', b't'],
    );
    check(Frame::AuthOk, &[1, 0, 0, 0, 0x0a]);
}

#[test]
fn unauthorized_and_timed_out_error_golden() {
    check(
        Frame::Error(ErrorFrame {
            code: ErrorCode::Unauthorized,
            message: "no".into(),
        }),
        &[5, 0, 0, 0, 0x08, 0x0a, 0x00, b'n', b'o'],
    );
    check(
        Frame::Error(ErrorFrame {
            code: ErrorCode::TimedOut,
            message: "".into(),
        }),
        &[3, 0, 0, 0, 0x08, 0x0b, 0x00],
    );
}
