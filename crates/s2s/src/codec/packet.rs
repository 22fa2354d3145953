//! FlowFile packets (`StandardFlowFileCodec` version 1): the value, its
//! limits and its encoder. Decoding is [`super::PacketDecoder`]'s job, the
//! `SYNC`-chunk compression around a packet is in [`super::compression`].
//!
//! A packet: i32 attribute count, per attribute i32 length + UTF-8 name and
//! i32 length + UTF-8 value, i64 content length, content. No terminator.

use bytes::{BufMut, Bytes, BytesMut};

/// Bounds applied while decoding a packet, before anything is allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketLimits {
    /// Most attributes per FlowFile (NiFi's own limit is 25,000).
    pub max_attributes: u64,
    /// Most bytes of one attribute name or value.
    pub max_attribute_bytes: u64,
    /// Most bytes of all attribute names and values of one FlowFile.
    pub max_attributes_total_bytes: u64,
    /// Most content bytes of one FlowFile.
    pub max_content_bytes: u64,
}

impl Default for PacketLimits {
    fn default() -> Self {
        PacketLimits {
            max_attributes: 25_000,
            max_attribute_bytes: 1 << 20,
            max_attributes_total_bytes: 4 << 20,
            max_content_bytes: 64 << 20,
        }
    }
}

impl PacketLimits {
    /// Most bytes one whole packet may take, uncompressed.
    pub fn max_packet_bytes(&self) -> u64 {
        12 + self.max_attributes * 8 + self.max_attributes_total_bytes + self.max_content_bytes
    }
}

/// One FlowFile as carried by Site-to-Site.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DataPacket {
    /// Attributes in wire order.
    pub attributes: Vec<(String, String)>,
    /// Content.
    pub content: Bytes,
}

impl DataPacket {
    /// Bytes the packet takes on the wire, uncompressed.
    pub fn encoded_len(&self) -> usize {
        let attrs: usize = self
            .attributes
            .iter()
            .map(|(k, v)| 8 + k.len() + v.len())
            .sum();
        12 + attrs + self.content.len()
    }
}

/// Appends a packet's header (attributes and content length); the content
/// follows it on the wire.
pub fn encode_packet_header(attributes: &[(String, String)], content_len: u64, out: &mut BytesMut) {
    let attr_bytes: usize = attributes.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
    out.reserve(12 + attr_bytes);
    out.put_i32(attributes.len() as i32);
    for (k, v) in attributes {
        out.put_i32(k.len() as i32);
        out.put_slice(k.as_bytes());
        out.put_i32(v.len() as i32);
        out.put_slice(v.as_bytes());
    }
    out.put_i64(content_len as i64);
}

/// Appends a whole packet.
pub fn encode_packet(p: &DataPacket, out: &mut BytesMut) {
    encode_packet_header(&p.attributes, p.content.len() as u64, out);
    out.extend_from_slice(&p.content);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(content: &str) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_packet(
            &DataPacket {
                attributes: vec![],
                content: Bytes::copy_from_slice(content.as_bytes()),
            },
            &mut out,
        );
        out.to_vec()
    }

    /// NiFi's own vectors (TestHttpFlowFileServerProtocol): one packet with
    /// no attributes → 2946083981; a transaction of two packets, "contents
    /// on client 1" then "contents on client 2" → 3359812065 (the CRC runs
    /// over every packet of the transaction).
    #[test]
    fn nifi_crc_vectors() {
        let p1 = packet("contents on client 1");
        let mut want = vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x14];
        want.extend_from_slice(b"contents on client 1");
        assert_eq!(p1, want);
        assert_eq!(crc32fast::hash(&p1).to_string(), "2946083981");
        let mut crc = crc32fast::Hasher::new();
        crc.update(&p1);
        crc.update(&packet("contents on client 2"));
        assert_eq!(crc.finalize().to_string(), "3359812065");
    }

    #[test]
    fn golden_packet_with_attributes() {
        let p = DataPacket {
            attributes: vec![("k".into(), "vv".into())],
            content: Bytes::from_static(b"x"),
        };
        let mut out = BytesMut::new();
        encode_packet(&p, &mut out);
        let want =
            b"\x00\x00\x00\x01\x00\x00\x00\x01k\x00\x00\x00\x02vv\x00\x00\x00\x00\x00\x00\x00\x01x";
        assert_eq!(&out[..], &want[..]);
        assert_eq!(p.encoded_len(), want.len());
    }
}
