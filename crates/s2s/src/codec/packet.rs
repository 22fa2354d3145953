//! FlowFile packets (`StandardFlowFileCodec` version 1) and the `SYNC`-chunk
//! compression NiFi wraps each packet in when `GZIP` is true.
//!
//! A packet: i32 attribute count, per attribute i32 length + UTF-8 name and
//! i32 length + UTF-8 value, i64 content length, content. No terminator.
//!
//! Compressed, a packet is a run of chunks: `SYNC`, i32 uncompressed length,
//! i32 compressed length, zlib bytes; a `01` byte before every later chunk
//! and a `00` byte after the last.

use std::io::Write;
use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};
use flate2::{Decompress, FlushDecompress};

use super::reader::{bounded, finish, Reader, Stop};
use super::{CodecError, Decoded};

/// The four bytes before every compressed chunk.
pub const SYNC: [u8; 4] = *b"SYNC";
/// Uncompressed bytes per chunk when Tidegate compresses (NiFi's 64 KiB).
pub const COMPRESSION_CHUNK: usize = 64 << 10;
/// Largest uncompressed chunk accepted from a peer.
pub const MAX_CHUNK: u64 = 4 << 20;

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

/// A decoded packet whose content is still a range of the input bytes (so
/// the caller can slice it out without copying).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketFrame {
    /// Attributes in wire order.
    pub attributes: Vec<(String, String)>,
    /// Where the content lies in the decoded bytes.
    pub content: Range<usize>,
}

impl PacketFrame {
    /// The packet, its content sliced from `frame` (the bytes `decode_packet`
    /// read, starting at the packet's first byte).
    pub fn into_packet(self, frame: &Bytes) -> DataPacket {
        DataPacket {
            attributes: self.attributes,
            content: frame.slice(self.content),
        }
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

/// Decodes one uncompressed packet from the front of `buf`. The content is
/// returned as a range of `buf`; `Ok(None)` until all of it has arrived.
pub fn decode_packet(buf: &[u8], limits: &PacketLimits) -> Decoded<PacketFrame> {
    let mut r = Reader::new(buf);
    let v = read_packet(&mut r, limits);
    finish(v, r.pos())
}

fn read_packet(r: &mut Reader<'_>, limits: &PacketLimits) -> Result<PacketFrame, Stop> {
    let n = r.count("attribute count", limits.max_attributes)?;
    let mut attributes = Vec::with_capacity(n.min(256));
    let mut total: u64 = 0;
    for _ in 0..n {
        let k = read_attr_string(r, limits, &mut total)?;
        let v = read_attr_string(r, limits, &mut total)?;
        attributes.push((k, v));
    }
    let len = bounded("content length", r.i64()?, limits.max_content_bytes)?;
    let start = r.pos();
    r.take(len)?;
    Ok(PacketFrame {
        attributes,
        content: start..start + len,
    })
}

fn read_attr_string(
    r: &mut Reader<'_>,
    limits: &PacketLimits,
    total: &mut u64,
) -> Result<String, Stop> {
    let len = r.count("attribute length", limits.max_attribute_bytes)?;
    *total += len as u64;
    if *total > limits.max_attributes_total_bytes {
        return Err(Stop::Bad(CodecError::TooLarge {
            what: "attribute bytes",
            value: *total,
            limit: limits.max_attributes_total_bytes,
        }));
    }
    let bytes = r.take(len)?;
    // Java's `new String(bytes, UTF_8)` replaces malformed input; so do we.
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

/// Decodes one compressed packet from the front of `buf`: returns the
/// packet's uncompressed bytes (decode them with [`decode_packet`]) and the
/// compressed bytes used.
pub fn decode_compressed_packet(buf: &[u8], limits: &PacketLimits) -> Decoded<Bytes> {
    // First walk the chunk headers, so nothing is inflated twice while the
    // packet is still arriving.
    let mut r = Reader::new(buf);
    let mut chunks: Vec<(usize, Range<usize>)> = Vec::new();
    let mut total: u64 = 0;
    let walked = (|| -> Result<(), Stop> {
        loop {
            let sync = r.take(4)?;
            if sync != SYNC {
                return Err(Stop::Bad(CodecError::BadCompression(format!(
                    "expected SYNC, got {sync:02x?}"
                ))));
            }
            let ulen = bounded("chunk length", r.i32()? as i64, MAX_CHUNK)?;
            let clen = bounded("compressed chunk length", r.i32()? as i64, 2 * MAX_CHUNK)?;
            total += ulen as u64;
            if total > limits.max_packet_bytes() {
                return Err(Stop::Bad(CodecError::TooLarge {
                    what: "compressed packet",
                    value: total,
                    limit: limits.max_packet_bytes(),
                }));
            }
            let start = r.pos();
            r.take(clen)?;
            chunks.push((ulen, start..start + clen));
            match r.u8()? {
                0 => return Ok(()),
                1 => continue,
                b => {
                    return Err(Stop::Bad(CodecError::BadCompression(format!(
                        "expected 0 or 1 after a chunk, got {b}"
                    ))))
                }
            }
        }
    })();
    match walked {
        Ok(()) => {}
        Err(Stop::More) => return Ok(None),
        Err(Stop::Bad(e)) => return Err(e),
    }
    let mut out = BytesMut::with_capacity(total as usize);
    let mut inflater = Decompress::new(true);
    for (ulen, range) in chunks {
        let at = out.len();
        out.resize(at + ulen, 0);
        inflater.reset(true);
        let res = inflater.decompress(&buf[range], &mut out[at..], FlushDecompress::Finish);
        match res {
            Ok(_) if inflater.total_out() as usize == ulen => {}
            Ok(_) => {
                return Err(CodecError::BadCompression(format!(
                    "chunk inflated to {} bytes, header said {ulen}",
                    inflater.total_out()
                )))
            }
            Err(e) => return Err(CodecError::BadCompression(e.to_string())),
        }
    }
    Ok(Some((out.freeze(), r.pos())))
}

/// Content shorter than this is copied out of the receive buffer instead of
/// sharing it (so a tiny FlowFile does not pin a whole buffer).
const COPY_BELOW: usize = 4096;

/// Takes one whole packet off the front of a receive buffer (decompressing
/// when `gzip`), feeds its uncompressed bytes to `crc`, and returns it with
/// the uncompressed size; `Ok(None)` (buffer untouched) until it has arrived.
pub fn split_packet(
    buf: &mut BytesMut,
    gzip: bool,
    limits: &PacketLimits,
    crc: &mut crc32fast::Hasher,
) -> Result<Option<(DataPacket, usize)>, CodecError> {
    use bytes::Buf;
    if gzip {
        let Some((raw, used)) = decode_compressed_packet(buf, limits)? else {
            return Ok(None);
        };
        buf.advance(used);
        let Some((frame, n)) = decode_packet(&raw, limits)? else {
            return Err(CodecError::Framing(
                "compressed stream ended inside a packet".into(),
            ));
        };
        if n != raw.len() {
            return Err(CodecError::Framing(format!(
                "{} bytes after the packet in its compressed stream",
                raw.len() - n
            )));
        }
        crc.update(&raw);
        return Ok(Some((frame.into_packet(&raw), n)));
    }
    let Some((frame, n)) = decode_packet(buf, limits)? else {
        return Ok(None);
    };
    crc.update(&buf[..n]);
    let packet = if frame.content.len() < COPY_BELOW {
        let content = Bytes::copy_from_slice(&buf[frame.content.clone()]);
        buf.advance(n);
        DataPacket {
            attributes: frame.attributes,
            content,
        }
    } else {
        let bytes = buf.split_to(n).freeze();
        frame.into_packet(&bytes)
    };
    Ok(Some((packet, n)))
}

/// Appends `packet` (uncompressed packet bytes) compressed as NiFi's
/// `CompressionOutputStream` writes it: zlib level 1, 64 KiB chunks.
pub fn encode_compressed(packet: &[u8], out: &mut BytesMut) {
    let mut first = true;
    let mut chunks = packet.chunks(COMPRESSION_CHUNK).peekable();
    if packet.is_empty() {
        return;
    }
    while let Some(chunk) = chunks.next() {
        if !first {
            out.put_u8(1);
        }
        first = false;
        let mut enc = flate2::write::ZlibEncoder::new(
            Vec::with_capacity(chunk.len() / 2 + 64),
            flate2::Compression::new(1),
        );
        enc.write_all(chunk).expect("writing to a Vec cannot fail");
        let compressed = enc.finish().expect("writing to a Vec cannot fail");
        out.put_slice(&SYNC);
        out.put_i32(chunk.len() as i32);
        out.put_i32(compressed.len() as i32);
        out.put_slice(&compressed);
        if chunks.peek().is_none() {
            out.put_u8(0);
        }
    }
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
        let frozen = out.freeze();
        let (frame, n) = decode_packet(&frozen, &PacketLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(n, want.len());
        assert_eq!(frame.into_packet(&frozen), p);
        for cut in 0..want.len() {
            assert_eq!(
                decode_packet(&want[..cut], &PacketLimits::default()),
                Ok(None)
            );
        }
    }

    #[test]
    fn limits_refuse_before_allocating() {
        let limits = PacketLimits::default();
        let too_many = b"\x00\x00\x61\xa9"; // 25,001 attributes
        assert!(matches!(
            decode_packet(too_many, &limits),
            Err(CodecError::TooLarge { .. })
        ));
        let huge_content = b"\x00\x00\x00\x00\x7f\xff\xff\xff\xff\xff\xff\xff";
        assert!(matches!(
            decode_packet(huge_content, &limits),
            Err(CodecError::TooLarge { .. })
        ));
        let negative = b"\xff\xff\xff\xff";
        assert!(matches!(
            decode_packet(negative, &limits),
            Err(CodecError::Negative { .. })
        ));
    }

    #[test]
    fn compressed_round_trip_over_several_chunks() {
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut plain = BytesMut::new();
        encode_packet(
            &DataPacket {
                attributes: vec![("a".into(), "b".into())],
                content: Bytes::from(content),
            },
            &mut plain,
        );
        let mut z = BytesMut::new();
        encode_compressed(&plain, &mut z);
        assert_eq!(&z[..4], b"SYNC");
        assert_eq!(z[z.len() - 1], 0);
        let (raw, n) = decode_compressed_packet(&z, &PacketLimits::default())
            .unwrap()
            .unwrap();
        assert_eq!(n, z.len());
        assert_eq!(&raw[..], &plain[..]);
        assert_eq!(
            decode_compressed_packet(&z[..z.len() - 1], &PacketLimits::default()),
            Ok(None)
        );
    }
}
