//! Connection set-up on the RAW socket: magic bytes, resource (protocol and
//! codec) negotiation, the handshake properties, and request names.

use bytes::{BufMut, BytesMut};

use super::reader::{finish, Reader, Stop};
use super::{encode_utf, CodecError, Decoded};

/// The four bytes every RAW connection starts with: `NiFi`.
pub const MAGIC: [u8; 4] = *b"NiFi";
/// The RAW transfer protocol's resource name.
pub const PROTOCOL_NAME: &str = "SocketFlowFileProtocol";
/// The protocol version Tidegate speaks (NiFi 1.0 to 2.x).
pub const PROTOCOL_VERSION: i32 = 6;
/// The FlowFile codec's resource name.
pub const CODEC_NAME: &str = "StandardFlowFileCodec";
/// The FlowFile codec's version.
pub const CODEC_VERSION: i32 = 1;
/// Most handshake properties accepted (NiFi defines seven).
pub const MAX_HANDSHAKE_PROPERTIES: u64 = 64;

/// Checks the magic bytes at the front of `buf`.
pub fn decode_magic(buf: &[u8]) -> Decoded<()> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let got = [buf[0], buf[1], buf[2], buf[3]];
    if got != MAGIC {
        return Err(CodecError::BadMagic(got));
    }
    Ok(Some(((), 4)))
}

/// A resource offer: `writeUTF(name)` + i32 version. Used both for the
/// transfer protocol and for the FlowFile codec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceOffer {
    /// Resource name, e.g. [`PROTOCOL_NAME`].
    pub name: String,
    /// Offered version.
    pub version: i32,
}

/// Appends a resource offer.
pub fn encode_resource_offer(offer: &ResourceOffer, out: &mut BytesMut) -> Result<(), CodecError> {
    encode_utf(&offer.name, out)?;
    out.put_i32(offer.version);
    Ok(())
}

/// Decodes a resource offer.
pub fn decode_resource_offer(buf: &[u8]) -> Decoded<ResourceOffer> {
    let mut r = Reader::new(buf);
    let v = (|| {
        let name = r.utf("resource name")?;
        let version = r.i32()?;
        Ok(ResourceOffer { name, version })
    })();
    finish(v, r.pos())
}

/// The answer to a resource offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceReply {
    /// `0x14`: accepted.
    Ok,
    /// `0x15` + i32: try this version instead.
    DifferentVersion(i32),
    /// `0xFF` + UTF: refused.
    Abort(String),
}

/// Appends a resource reply.
pub fn encode_resource_reply(reply: &ResourceReply, out: &mut BytesMut) {
    match reply {
        ResourceReply::Ok => out.put_u8(0x14),
        ResourceReply::DifferentVersion(v) => {
            out.put_u8(0x15);
            out.put_i32(*v);
        }
        ResourceReply::Abort(msg) => {
            out.put_u8(0xff);
            if encode_utf(msg, out).is_err() {
                encode_utf("aborted", out).expect("short string");
            }
        }
    }
}

/// Decodes a resource reply.
pub fn decode_resource_reply(buf: &[u8]) -> Decoded<ResourceReply> {
    let mut r = Reader::new(buf);
    let v = (|| match r.u8()? {
        0x14 => Ok(ResourceReply::Ok),
        0x15 => Ok(ResourceReply::DifferentVersion(r.i32()?)),
        0xff => Ok(ResourceReply::Abort(r.utf("abort message")?)),
        b => Err(Stop::Bad(CodecError::UnknownResponseCode(b))),
    })();
    finish(v, r.pos())
}

/// The client's handshake (protocol version 3 and later).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// The client's communications identifier (a UUID).
    pub comms_id: String,
    /// The client's transit URI prefix, `nifi://host:port`.
    pub transit_uri: String,
    /// Properties in the order received: `GZIP`, `PORT_IDENTIFIER`,
    /// `REQUEST_EXPIRATION_MILLIS`, `BATCH_COUNT`, `BATCH_SIZE`, `BATCH_DURATION`.
    pub properties: Vec<(String, String)>,
}

impl Handshake {
    /// The value of property `name`, if sent.
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Appends a handshake.
pub fn encode_handshake(h: &Handshake, out: &mut BytesMut) -> Result<(), CodecError> {
    encode_utf(&h.comms_id, out)?;
    encode_utf(&h.transit_uri, out)?;
    out.put_i32(h.properties.len() as i32);
    for (k, v) in &h.properties {
        encode_utf(k, out)?;
        encode_utf(v, out)?;
    }
    Ok(())
}

/// Decodes a handshake.
pub fn decode_handshake(buf: &[u8]) -> Decoded<Handshake> {
    let mut r = Reader::new(buf);
    let v = (|| {
        let comms_id = r.utf("comms identifier")?;
        let transit_uri = r.utf("transit uri")?;
        let n = r.count("handshake properties", MAX_HANDSHAKE_PROPERTIES)?;
        let mut properties = Vec::with_capacity(n);
        for _ in 0..n {
            let k = r.utf("property name")?;
            let v = r.utf("property value")?;
            properties.push((k, v));
        }
        Ok(Handshake {
            comms_id,
            transit_uri,
            properties,
        })
    })();
    finish(v, r.pos())
}

/// What a client asks for after the handshake (sent as the enum name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestType {
    /// Negotiate the FlowFile codec.
    NegotiateFlowfileCodec,
    /// Ask for the peer list.
    RequestPeerList,
    /// The client sends FlowFiles to an input port.
    SendFlowfiles,
    /// The client receives FlowFiles from an output port.
    ReceiveFlowfiles,
    /// The client is closing the connection.
    Shutdown,
}

impl RequestType {
    /// The name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            RequestType::NegotiateFlowfileCodec => "NEGOTIATE_FLOWFILE_CODEC",
            RequestType::RequestPeerList => "REQUEST_PEER_LIST",
            RequestType::SendFlowfiles => "SEND_FLOWFILES",
            RequestType::ReceiveFlowfiles => "RECEIVE_FLOWFILES",
            RequestType::Shutdown => "SHUTDOWN",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "NEGOTIATE_FLOWFILE_CODEC" => RequestType::NegotiateFlowfileCodec,
            "REQUEST_PEER_LIST" => RequestType::RequestPeerList,
            "SEND_FLOWFILES" => RequestType::SendFlowfiles,
            "RECEIVE_FLOWFILES" => RequestType::ReceiveFlowfiles,
            "SHUTDOWN" => RequestType::Shutdown,
            _ => return None,
        })
    }
}

/// Appends a request name.
pub fn encode_request(req: RequestType, out: &mut BytesMut) {
    encode_utf(req.name(), out).expect("request names are short");
}

/// Decodes a request name.
pub fn decode_request(buf: &[u8]) -> Decoded<RequestType> {
    let mut r = Reader::new(buf);
    let v = (|| {
        let name = r.utf("request type")?;
        RequestType::from_name(&name).ok_or(Stop::Bad(CodecError::UnknownRequest(name)))
    })();
    finish(v, r.pos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_protocol_offer_and_replies() {
        let mut out = BytesMut::new();
        encode_resource_offer(
            &ResourceOffer {
                name: PROTOCOL_NAME.into(),
                version: 6,
            },
            &mut out,
        )
        .unwrap();
        let mut want = vec![0u8, 22];
        want.extend_from_slice(b"SocketFlowFileProtocol");
        want.extend_from_slice(&[0, 0, 0, 6]);
        assert_eq!(&out[..], &want[..]);
        assert_eq!(decode_resource_offer(&want).unwrap().unwrap().0.version, 6);

        let mut out = BytesMut::new();
        encode_resource_reply(&ResourceReply::Ok, &mut out);
        encode_resource_reply(&ResourceReply::DifferentVersion(6), &mut out);
        encode_resource_reply(&ResourceReply::Abort("no".into()), &mut out);
        assert_eq!(&out[..], b"\x14\x15\x00\x00\x00\x06\xff\x00\x02no");
    }

    #[test]
    fn golden_codec_offer() {
        let mut out = BytesMut::new();
        encode_request(RequestType::NegotiateFlowfileCodec, &mut out);
        encode_resource_offer(
            &ResourceOffer {
                name: CODEC_NAME.into(),
                version: 1,
            },
            &mut out,
        )
        .unwrap();
        let mut want = vec![0u8, 24];
        want.extend_from_slice(b"NEGOTIATE_FLOWFILE_CODEC");
        want.extend_from_slice(&[0, 21]);
        want.extend_from_slice(b"StandardFlowFileCodec");
        want.extend_from_slice(&[0, 0, 0, 1]);
        assert_eq!(&out[..], &want[..]);
    }

    #[test]
    fn golden_handshake() {
        let h = Handshake {
            comms_id: "id".into(),
            transit_uri: "nifi://h:1".into(),
            properties: vec![("GZIP".into(), "false".into())],
        };
        let mut out = BytesMut::new();
        encode_handshake(&h, &mut out).unwrap();
        let want = b"\x00\x02id\x00\x0anifi://h:1\x00\x00\x00\x01\x00\x04GZIP\x00\x05false";
        assert_eq!(&out[..], &want[..]);
        assert_eq!(decode_handshake(want).unwrap().unwrap(), (h, want.len()));
        for cut in 0..want.len() {
            assert_eq!(decode_handshake(&want[..cut]), Ok(None));
        }
    }

    #[test]
    fn golden_requests() {
        for (req, name) in [
            (RequestType::SendFlowfiles, "SEND_FLOWFILES"),
            (RequestType::ReceiveFlowfiles, "RECEIVE_FLOWFILES"),
            (RequestType::RequestPeerList, "REQUEST_PEER_LIST"),
            (RequestType::Shutdown, "SHUTDOWN"),
        ] {
            let mut out = BytesMut::new();
            encode_request(req, &mut out);
            assert_eq!(&out[2..], name.as_bytes());
            assert_eq!(out[1] as usize, name.len());
            assert_eq!(decode_request(&out).unwrap().unwrap().0, req);
        }
        assert!(decode_request(b"\x00\x03FOO").is_err());
    }

    #[test]
    fn magic_is_checked() {
        assert_eq!(decode_magic(b"NiF"), Ok(None));
        assert_eq!(decode_magic(b"NiFi"), Ok(Some(((), 4))));
        assert!(decode_magic(b"GET ").is_err());
    }

    #[test]
    fn too_many_properties_are_refused() {
        let buf = b"\x00\x00\x00\x00\x7f\xff\xff\xff";
        assert!(matches!(
            decode_handshake(buf),
            Err(CodecError::TooLarge { .. })
        ));
    }
}
