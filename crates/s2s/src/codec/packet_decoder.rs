//! [`PacketDecoder`]: FlowFile packets decoded as their bytes arrive.
//!
//! The decoder is a resumable state machine. Each call takes the fields
//! that are whole off the front of the caller's buffer and remembers which
//! field comes next, so no byte is decoded twice however thinly the packet
//! trickles in: a 16 MiB FlowFile read in 1 KiB pieces costs what it costs
//! in one piece. A field that has not fully arrived stays in the caller's
//! buffer. So does the content, hashed as it arrives, until it is whole; it
//! then leaves as one `Bytes` split off the buffer, without a copy. Memory
//! therefore grows with what actually arrived (the caller's read buffer),
//! never with what a length field announces. The price: the caller's buffer
//! shrinks only once a content is whole, so a reader timing "a partly
//! received message" times the whole content.
//!
//! Not here: sockets and transactions (`frame_io`, `server`, `http`).

use bytes::{Buf, Bytes, BytesMut};

use super::compression::ChunkDecoder;
use super::reader::bounded;
use super::{CodecError, DataPacket, PacketLimits};

/// Content shorter than this is copied out of the receive buffer instead of
/// sharing it (so a tiny FlowFile does not pin a whole buffer).
const COPY_BELOW: usize = 4096;
/// Content arriving in pieces is fed to the CRC in blocks of this size: one
/// large update costs several times less per byte than many small ones.
const CRC_BLOCK: usize = 64 << 10;

/// Decodes one FlowFile packet after another from a byte stream, plain or
/// (`gzip`) in NiFi's `SYNC`-chunk compression, feeding the uncompressed
/// packet bytes to the transaction's CRC32 as it goes.
///
/// ```
/// use bytes::{Bytes, BytesMut};
/// use tidegate_s2s::codec::{encode_packet, DataPacket, PacketDecoder, PacketLimits};
///
/// let p = DataPacket { attributes: vec![("k".into(), "v".into())], content: Bytes::from_static(b"hi") };
/// let mut wire = BytesMut::new();
/// encode_packet(&p, &mut wire);
/// let mut decoder = PacketDecoder::new(false, PacketLimits::default());
/// let mut crc = crc32fast::Hasher::new();
/// let mut buf = BytesMut::new();
/// let mut got = None;
/// for byte in wire.iter() {
///     buf.extend_from_slice(&[*byte]);
///     if let Some(done) = decoder.decode(&mut buf, &mut crc).unwrap() {
///         got = Some(done);
///     }
/// }
/// assert_eq!(got, Some((p, wire.len())));
/// ```
#[derive(Debug)]
pub struct PacketDecoder {
    packet: PlainDecoder,
    /// Present when packets arrive compressed.
    chunks: Option<ChunkDecoder>,
}

impl PacketDecoder {
    /// A decoder of plain (`gzip = false`) or compressed packets, bounded by
    /// `limits`.
    pub fn new(gzip: bool, limits: PacketLimits) -> Self {
        PacketDecoder {
            packet: PlainDecoder::new(limits),
            chunks: gzip.then(ChunkDecoder::new),
        }
    }

    /// Takes every whole field it can off the front of `buf` and returns the
    /// packet once it is complete, with its uncompressed size. `Ok(None)`
    /// means "more bytes needed" and leaves in `buf` only the field being
    /// waited for (header field, content, or compressed chunk), of which part
    /// may have arrived. Bytes after a complete packet are left alone (in RAW
    /// they are the next response code). An error means the stream can never
    /// be valid; the decoder must not be used after one.
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
        crc: &mut crc32fast::Hasher,
    ) -> Result<Option<(DataPacket, usize)>, CodecError> {
        match &mut self.chunks {
            None => self.packet.decode(buf, crc),
            Some(chunks) => chunks.decode(buf, &mut self.packet, crc),
        }
    }

    /// True between packets: nothing of a next packet has been taken yet.
    pub fn is_idle(&self) -> bool {
        self.packet.is_idle() && self.chunks.as_ref().is_none_or(ChunkDecoder::is_idle)
    }

    /// Bytes of the packet in progress the decoder holds itself: decoded
    /// attributes, and when compressed the inflated bytes (content included)
    /// not yet handed out. What waits in the caller's buffer is not counted.
    pub fn held_bytes(&self) -> usize {
        self.packet.held_bytes() + self.chunks.as_ref().map_or(0, ChunkDecoder::held_bytes)
    }

    /// Uncompressed bytes the packet in progress is known to take: what was
    /// decoded so far plus the length of the field being waited for (the
    /// whole content once its length is read). Lets a caller refuse a packet
    /// that would overrun a transaction limit before its bytes arrive.
    pub fn announced_bytes(&self) -> u64 {
        self.packet.announced_bytes()
    }

    /// Bytes the field being waited for takes at the front of the input (a
    /// read-size hint: reading more than this is never needed to progress).
    pub fn next_field_len(&self) -> usize {
        match &self.chunks {
            None => self.packet.next_field_len(),
            Some(chunks) => chunks.next_field_len(),
        }
    }
}

/// The field an uncompressed packet waits for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// i32 attribute count.
    Count,
    /// i32 length of the next attribute name or value.
    Length,
    /// That many bytes of an attribute name or value.
    Text(usize),
    /// i64 content length.
    ContentLength,
    /// That many content bytes.
    Content(usize),
}

/// The resumable decoder of uncompressed packets.
#[derive(Debug)]
pub(crate) struct PlainDecoder {
    limits: PacketLimits,
    field: Field,
    attributes: Vec<(String, String)>,
    /// An attribute's name, read, waiting for its value.
    name: Option<String>,
    /// Attributes still to come.
    attributes_left: usize,
    /// Bytes of all attribute names and values announced so far.
    attribute_bytes: u64,
    /// Bytes of the packet taken off the input so far.
    taken: u64,
    /// Content bytes at the front of the input already fed to the CRC.
    hashed: usize,
}

impl PlainDecoder {
    pub(crate) fn new(limits: PacketLimits) -> Self {
        PlainDecoder {
            limits,
            field: Field::Count,
            attributes: Vec::new(),
            name: None,
            attributes_left: 0,
            attribute_bytes: 0,
            taken: 0,
            hashed: 0,
        }
    }

    /// See [`PacketDecoder::decode`].
    ///
    /// Header fields are parsed in place from a cursor and fed to the CRC in
    /// one piece when the call ends or the content starts: hashing each
    /// 4-byte field alone took crc32fast's slow path for short inputs (it
    /// showed in the S2S server's profile).
    pub(crate) fn decode(
        &mut self,
        buf: &mut BytesMut,
        crc: &mut crc32fast::Hasher,
    ) -> Result<Option<(DataPacket, usize)>, CodecError> {
        let mut pos = 0;
        let done = self.decode_from(buf, crc, &mut pos);
        // Whatever the outcome, the CRC has seen every byte taken: the same
        // state however the input was split (the trickle fuzz target checks).
        if pos > 0 {
            crc.update(&buf[..pos]);
            buf.advance(pos);
        }
        done
    }

    /// [`PlainDecoder::decode`] with the header bytes parsed but not yet
    /// hashed nor dropped at `buf[..pos]`.
    fn decode_from(
        &mut self,
        buf: &mut BytesMut,
        crc: &mut crc32fast::Hasher,
        pos: &mut usize,
    ) -> Result<Option<(DataPacket, usize)>, CodecError> {
        loop {
            match self.field {
                Field::Count => {
                    let Some(v) = self.take::<4>(buf, pos) else {
                        return Ok(None);
                    };
                    let v = i32::from_be_bytes(v);
                    let n = bounded("attribute count", v.into(), self.limits.max_attributes)?;
                    // Grown as attributes arrive, not sized by the count.
                    self.attributes.reserve(n.min(64));
                    self.attributes_left = n;
                    self.field = if n == 0 {
                        Field::ContentLength
                    } else {
                        Field::Length
                    };
                }
                Field::Length => {
                    let Some(v) = self.take::<4>(buf, pos) else {
                        return Ok(None);
                    };
                    let v = i32::from_be_bytes(v);
                    let len = bounded(
                        "attribute length",
                        v.into(),
                        self.limits.max_attribute_bytes,
                    )?;
                    self.attribute_bytes += len as u64;
                    if self.attribute_bytes > self.limits.max_attributes_total_bytes {
                        return Err(CodecError::TooLarge {
                            what: "attribute bytes",
                            value: self.attribute_bytes,
                            limit: self.limits.max_attributes_total_bytes,
                        });
                    }
                    self.field = Field::Text(len);
                }
                Field::Text(len) => {
                    let Some(bytes) = buf.get(*pos..*pos + len) else {
                        return Ok(None);
                    };
                    // Java's `new String(bytes, UTF_8)` replaces malformed
                    // input; so do we.
                    let text = String::from_utf8_lossy(bytes).into_owned();
                    *pos += len;
                    self.taken += len as u64;
                    match self.name.take() {
                        None => {
                            self.name = Some(text);
                            self.field = Field::Length;
                        }
                        Some(name) => {
                            self.attributes.push((name, text));
                            self.attributes_left -= 1;
                            self.field = if self.attributes_left == 0 {
                                Field::ContentLength
                            } else {
                                Field::Length
                            };
                        }
                    }
                }
                Field::ContentLength => {
                    let Some(v) = self.take::<8>(buf, pos) else {
                        return Ok(None);
                    };
                    let v = i64::from_be_bytes(v);
                    let len = bounded("content length", v, self.limits.max_content_bytes)?;
                    self.field = Field::Content(len);
                }
                Field::Content(len) => {
                    let start = *pos;
                    if buf.len() - start < len {
                        // The header is behind: the content starts the
                        // buffer, and waits there until it is whole; what
                        // arrived is hashed in whole blocks meanwhile
                        // (counted from the content's start, so the CRC's
                        // state does not depend on how the bytes were split).
                        crc.update(&buf[..start]);
                        buf.advance(start);
                        *pos = 0;
                        let here = buf.len();
                        let blocks = here - here % CRC_BLOCK;
                        if blocks > self.hashed {
                            crc.update(&buf[self.hashed..blocks]);
                            self.hashed = blocks;
                        }
                        return Ok(None);
                    }
                    // The whole content is here. A packet that came in one
                    // piece is hashed in one call, header and content
                    // together; once blocks of a content were hashed, the
                    // header went before them (and `start` is 0).
                    if self.hashed == 0 {
                        crc.update(&buf[..start + len]);
                    } else {
                        crc.update(&buf[start + self.hashed..start + len]);
                    }
                    buf.advance(start);
                    *pos = 0;
                    self.taken += len as u64;
                    let content = split_content(buf, len);
                    let size = self.taken as usize;
                    let packet = DataPacket {
                        attributes: std::mem::take(&mut self.attributes),
                        content,
                    };
                    *self = PlainDecoder::new(self.limits);
                    return Ok(Some((packet, size)));
                }
            }
        }
    }

    /// Reads an `N`-byte field at `pos` once it is whole, moving `pos` past it.
    fn take<const N: usize>(&mut self, buf: &[u8], pos: &mut usize) -> Option<[u8; N]> {
        let field: [u8; N] = buf.get(*pos..*pos + N)?.try_into().ok()?;
        *pos += N;
        self.taken += N as u64;
        Some(field)
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.field == Field::Count && self.taken == 0
    }

    /// The header bytes taken so far, now living in attribute strings.
    pub(crate) fn held_bytes(&self) -> usize {
        self.taken as usize
    }

    pub(crate) fn announced_bytes(&self) -> u64 {
        self.taken + self.next_field_len() as u64
    }

    pub(crate) fn next_field_len(&self) -> usize {
        match self.field {
            Field::Count | Field::Length => 4,
            Field::ContentLength => 8,
            Field::Text(len) | Field::Content(len) => len,
        }
    }
}

/// Takes `len` content bytes, all present, off the front of `buf`.
fn split_content(buf: &mut BytesMut, len: usize) -> Bytes {
    if len < COPY_BELOW {
        let c = Bytes::copy_from_slice(&buf[..len]);
        buf.advance(len);
        return c;
    }
    let c = buf.split_to(len).freeze();
    // What is left of `buf` is now the tail of the content's allocation: a
    // small remainder moves to a buffer of its own, so that allocation is
    // freed with the content, not kept alive by the reader.
    if buf.len() <= COPY_BELOW {
        *buf = BytesMut::from(&buf[..]);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_packet;

    fn decode_all(wire: &[u8], piece: usize) -> (Vec<(DataPacket, usize)>, u32) {
        let mut d = PacketDecoder::new(false, PacketLimits::default());
        let mut crc = crc32fast::Hasher::new();
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for p in wire.chunks(piece) {
            buf.extend_from_slice(p);
            while let Some(done) = d.decode(&mut buf, &mut crc).unwrap() {
                out.push(done);
            }
        }
        assert!(buf.is_empty() && d.is_idle());
        (out, crc.finalize())
    }

    #[test]
    fn every_split_decodes_alike() {
        let p = DataPacket {
            attributes: vec![("k".into(), "vv".into()), ("".into(), "".into())],
            content: Bytes::from(vec![7u8; 5000]),
        };
        // Past several CRC blocks, to cross them in every way.
        let large = DataPacket {
            attributes: vec![],
            content: Bytes::from((0..200_000u32).map(|i| i as u8).collect::<Vec<u8>>()),
        };
        let mut wire = BytesMut::new();
        encode_packet(&p, &mut wire);
        encode_packet(&DataPacket::default(), &mut wire);
        encode_packet(&large, &mut wire);
        let whole = decode_all(&wire, wire.len());
        assert_eq!(whole.0.len(), 3);
        assert_eq!(whole.0[0], (p.clone(), p.encoded_len()));
        assert_eq!(whole.0[2], (large.clone(), large.encoded_len()));
        assert_eq!(whole.1, crc32fast::hash(&wire));
        for piece in [1, 2, 3, 5, 7, 11, 1024, CRC_BLOCK - 1, CRC_BLOCK + 3] {
            assert_eq!(decode_all(&wire, piece), whole, "pieces of {piece}");
        }
    }

    #[test]
    fn limits_refuse_before_allocating() {
        let limits = PacketLimits::default();
        let decode = |bytes: &[u8]| {
            PacketDecoder::new(false, limits)
                .decode(&mut BytesMut::from(bytes), &mut crc32fast::Hasher::new())
        };
        let too_many = b"\x00\x00\x61\xa9"; // 25,001 attributes
        assert!(matches!(decode(too_many), Err(CodecError::TooLarge { .. })));
        let huge_content = b"\x00\x00\x00\x00\x7f\xff\xff\xff\xff\xff\xff\xff";
        assert!(matches!(
            decode(huge_content),
            Err(CodecError::TooLarge { .. })
        ));
        let negative = b"\xff\xff\xff\xff";
        assert!(matches!(decode(negative), Err(CodecError::Negative { .. })));
    }

    #[test]
    fn an_announced_content_allocates_nothing_before_it_arrives() {
        // A header announcing 60 MiB of content (under the 64 MiB limit).
        let mut buf = BytesMut::new();
        crate::codec::encode_packet_header(&[], 60 << 20, &mut buf);
        let mut d = PacketDecoder::new(false, PacketLimits::default());
        assert_eq!(d.decode(&mut buf, &mut crc32fast::Hasher::new()), Ok(None));
        assert!(buf.is_empty());
        assert!(buf.capacity() < 64, "capacity {}", buf.capacity());
        assert_eq!(d.held_bytes(), 12);
        assert_eq!(d.announced_bytes(), 12 + (60 << 20));
        assert_eq!(d.next_field_len(), 60 << 20);
        assert!(!d.is_idle());
    }
}
