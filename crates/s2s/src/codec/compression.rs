//! The `SYNC`-chunk compression NiFi wraps each packet in when `GZIP` is
//! true (`CompressionOutputStream`): a run of chunks, each `SYNC`, i32
//! uncompressed length, i32 compressed length and one zlib stream; a `01`
//! byte before every later chunk and a `00` byte after the last.
//!
//! [`ChunkDecoder`] undoes it as bytes arrive and hands the inflated bytes to
//! the packet decoder. Not here: the packet format itself.

use std::io::Write;

use bytes::{Buf, BufMut, BytesMut};
use flate2::{Decompress, FlushDecompress, Status};

use super::packet_decoder::PlainDecoder;
use super::reader::bounded;
use super::{CodecError, DataPacket};

/// The four bytes before every compressed chunk.
pub const SYNC: [u8; 4] = *b"SYNC";
/// Uncompressed bytes per chunk when Tidegate compresses (NiFi's 64 KiB).
pub const COMPRESSION_CHUNK: usize = 64 << 10;
/// Largest uncompressed chunk accepted from a peer.
pub const MAX_CHUNK: u64 = 4 << 20;
/// Largest compressed chunk accepted from a peer (zlib can grow
/// incompressible input a little; twice the uncompressed bound is ample).
const MAX_COMPRESSED_CHUNK: u64 = 2 * MAX_CHUNK;
/// Inflated bytes produced per step, so memory follows what a chunk really
/// inflates to rather than what its header announces.
const INFLATE_STEP: usize = 64 << 10;
/// `SYNC` + i32 + i32.
const HEADER_LEN: usize = 12;

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

/// Where the chunk decoder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Waiting for a chunk header; `first` when no chunk of this packet has
    /// been seen yet.
    Header { first: bool },
    /// Waiting for all `clen` compressed bytes of a chunk announced to
    /// inflate to `ulen` bytes. A chunk is inflated only once it is whole,
    /// so the inflated bytes (and any error) do not depend on how its
    /// compressed bytes were split across reads.
    Body { ulen: usize, clen: usize },
    /// Waiting for the byte after a chunk: `01` another chunk, `00` the end.
    Marker,
}

/// Resumable decoder of one compressed packet after another: compressed
/// bytes in, inflated bytes through a [`PlainDecoder`], packets out.
#[derive(Debug)]
pub(crate) struct ChunkDecoder {
    step: Step,
    inflater: Decompress,
    /// Inflated bytes the packet decoder has not taken yet.
    plain: BytesMut,
    /// The packet, once the inflated bytes completed it; handed out at the
    /// `00` that ends its compressed stream.
    done: Option<(DataPacket, usize)>,
}

impl ChunkDecoder {
    pub(crate) fn new() -> Self {
        ChunkDecoder {
            step: Step::Header { first: true },
            inflater: Decompress::new(true),
            plain: BytesMut::new(),
            done: None,
        }
    }

    /// Takes whole fields off the front of `buf`; see
    /// [`super::PacketDecoder::decode`].
    pub(crate) fn decode(
        &mut self,
        buf: &mut BytesMut,
        packet: &mut PlainDecoder,
        crc: &mut crc32fast::Hasher,
    ) -> Result<Option<(DataPacket, usize)>, CodecError> {
        loop {
            match self.step {
                Step::Header { .. } => {
                    if buf.len() < HEADER_LEN {
                        return Ok(None);
                    }
                    if buf[..4] != SYNC {
                        return Err(CodecError::BadCompression(format!(
                            "expected SYNC, got {:02x?}",
                            &buf[..4]
                        )));
                    }
                    buf.advance(4);
                    let ulen = bounded("chunk length", buf.get_i32().into(), MAX_CHUNK)?;
                    let clen = bounded(
                        "compressed chunk length",
                        buf.get_i32().into(),
                        MAX_COMPRESSED_CHUNK,
                    )?;
                    self.step = Step::Body { ulen, clen };
                }
                Step::Body { ulen, clen } => {
                    if buf.len() < clen {
                        return Ok(None);
                    }
                    self.inflate(&buf[..clen], ulen)?;
                    buf.advance(clen);
                    self.feed(packet, crc)?;
                    self.step = Step::Marker;
                }
                Step::Marker => {
                    let Some(&marker) = buf.first() else {
                        return Ok(None);
                    };
                    buf.advance(1);
                    match marker {
                        1 => self.step = Step::Header { first: false },
                        0 => {
                            self.step = Step::Header { first: true };
                            let Some(done) = self.done.take() else {
                                return Err(CodecError::Framing(
                                    "compressed stream ended inside a packet".into(),
                                ));
                            };
                            if self.plain.capacity() > INFLATE_STEP {
                                // Drained: do not keep a large buffer for the next packet.
                                self.plain = BytesMut::new();
                            }
                            return Ok(Some(done));
                        }
                        b => {
                            return Err(CodecError::BadCompression(format!(
                                "expected 0 or 1 after a chunk, got {b}"
                            )))
                        }
                    }
                }
            }
        }
    }

    /// Inflates one whole chunk onto `self.plain`, growing it only by what
    /// the chunk actually produces.
    fn inflate(&mut self, input: &[u8], ulen: usize) -> Result<(), CodecError> {
        self.inflater.reset(true);
        let mut produced = 0usize;
        let mut used = 0usize;
        loop {
            // One byte more than the header allows, to notice a chunk that
            // inflates past it.
            let room = (ulen - produced + 1).min(INFLATE_STEP);
            let at = self.plain.len();
            self.plain.resize(at + room, 0);
            let (in0, out0) = (self.inflater.total_in(), self.inflater.total_out());
            let res = self.inflater.decompress(
                &input[used..],
                &mut self.plain[at..],
                FlushDecompress::None,
            );
            let took = (self.inflater.total_in() - in0) as usize;
            let got = (self.inflater.total_out() - out0) as usize;
            self.plain.truncate(at + got);
            used += took;
            produced += got;
            let status = res.map_err(|e| CodecError::BadCompression(e.to_string()))?;
            if produced > ulen {
                return Err(CodecError::BadCompression(format!(
                    "chunk inflates to more than the {ulen} bytes its header says"
                )));
            }
            match status {
                Status::StreamEnd => break,
                _ if took == 0 && got == 0 => {
                    return Err(CodecError::BadCompression(
                        "chunk ends inside its zlib stream".into(),
                    ))
                }
                _ => {}
            }
        }
        // Bytes after the zlib stream's end inside the chunk are ignored, as
        // NiFi's `CompressionInputStream` does.
        if produced != ulen {
            return Err(CodecError::BadCompression(format!(
                "chunk inflated to {produced} bytes, its header says {ulen}"
            )));
        }
        Ok(())
    }

    /// Hands the inflated bytes to the packet decoder. One compressed
    /// stream carries exactly one packet: bytes after it are an error.
    fn feed(
        &mut self,
        packet: &mut PlainDecoder,
        crc: &mut crc32fast::Hasher,
    ) -> Result<(), CodecError> {
        if self.done.is_none() {
            self.done = packet.decode(&mut self.plain, crc)?;
        }
        if self.done.is_some() && !self.plain.is_empty() {
            return Err(CodecError::Framing(
                "bytes after the packet in its compressed stream".into(),
            ));
        }
        Ok(())
    }

    /// True between packets.
    pub(crate) fn is_idle(&self) -> bool {
        self.step == Step::Header { first: true }
    }

    /// Inflated bytes held for the packet in progress.
    pub(crate) fn held_bytes(&self) -> usize {
        self.plain.len() + self.done.as_ref().map_or(0, |(_, n)| *n)
    }

    /// Bytes the field being waited for takes at the front of the input.
    pub(crate) fn next_field_len(&self) -> usize {
        match self.step {
            Step::Header { .. } => HEADER_LEN,
            Step::Body { clen, .. } => clen,
            Step::Marker => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::codec::{encode_packet, PacketDecoder, PacketLimits};

    fn compressed(p: &DataPacket) -> (BytesMut, BytesMut) {
        let mut plain = BytesMut::new();
        encode_packet(p, &mut plain);
        let mut z = BytesMut::new();
        encode_compressed(&plain, &mut z);
        (plain, z)
    }

    #[test]
    fn compressed_round_trip_over_several_chunks() {
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let p = DataPacket {
            attributes: vec![("a".into(), "b".into())],
            content: Bytes::from(content),
        };
        let (plain, mut z) = compressed(&p);
        assert_eq!(&z[..4], b"SYNC");
        assert_eq!(z[z.len() - 1], 0);
        let mut d = PacketDecoder::new(true, PacketLimits::default());
        let mut crc = crc32fast::Hasher::new();
        let (q, n) = d.decode(&mut z, &mut crc).unwrap().unwrap();
        assert_eq!((q, n), (p, plain.len()));
        assert!(z.is_empty() && d.is_idle());
        assert_eq!(crc.finalize(), crc32fast::hash(&plain));
    }

    #[test]
    fn a_chunk_longer_than_its_header_says_is_refused() {
        let p = DataPacket {
            attributes: vec![],
            content: Bytes::from_static(b"some content"),
        };
        let (_, mut z) = compressed(&p);
        // Announce one byte less than the chunk inflates to.
        let ulen = i32::from_be_bytes([z[4], z[5], z[6], z[7]]) - 1;
        z[4..8].copy_from_slice(&ulen.to_be_bytes());
        let mut d = PacketDecoder::new(true, PacketLimits::default());
        let e = d.decode(&mut z, &mut crc32fast::Hasher::new()).unwrap_err();
        assert!(matches!(e, CodecError::BadCompression(_)), "{e}");
    }

    #[test]
    fn a_stream_ending_inside_a_packet_is_refused() {
        let mut plain = BytesMut::new();
        encode_packet(&DataPacket::default(), &mut plain);
        let mut z = BytesMut::new();
        encode_compressed(&plain[..5], &mut z);
        let mut d = PacketDecoder::new(true, PacketLimits::default());
        assert_eq!(
            d.decode(&mut z, &mut crc32fast::Hasher::new()),
            Err(CodecError::Framing(
                "compressed stream ended inside a packet".into()
            ))
        );
    }

    #[test]
    fn two_packets_in_one_compressed_stream_are_refused() {
        let mut plain = BytesMut::new();
        encode_packet(&DataPacket::default(), &mut plain);
        encode_packet(&DataPacket::default(), &mut plain);
        let mut z = BytesMut::new();
        encode_compressed(&plain, &mut z);
        let mut d = PacketDecoder::new(true, PacketLimits::default());
        assert!(matches!(
            d.decode(&mut z, &mut crc32fast::Hasher::new()),
            Err(CodecError::Framing(_))
        ));
    }

    #[test]
    fn an_announced_chunk_allocates_nothing_before_it_arrives() {
        // A header announcing a 4 MiB chunk of 8 MiB compressed bytes.
        let mut z = BytesMut::new();
        z.put_slice(&SYNC);
        z.put_i32(MAX_CHUNK as i32);
        z.put_i32(MAX_COMPRESSED_CHUNK as i32);
        let mut d = PacketDecoder::new(true, PacketLimits::default());
        assert_eq!(d.decode(&mut z, &mut crc32fast::Hasher::new()), Ok(None));
        assert_eq!(d.held_bytes(), 0);
        assert_eq!(d.next_field_len(), MAX_COMPRESSED_CHUNK as usize);
    }
}
