//! Size-capped gzip decompression for CompressedPackedForward entries.
//!
//! Clients may concatenate several gzip members (Fluentd appends one per
//! write), so a multi-member decoder is used. Output stops one byte past the
//! limit: a gzip bomb costs at most `limit` bytes of memory, then an error.
//! Each growth of the output is granted first by the caller (the server
//! draws it from the process's in-flight byte budget), so a few hundred
//! kilobytes on the wire cannot become gigabytes that nothing accounts for.

use std::io::Read;

use bytes::Bytes;
use flate2::read::MultiGzDecoder;

use super::{DecodeError, InflateGrant};

/// Output read from the decompressor at a time.
const READ_STEP: usize = 64 * 1024;

/// Decompresses every gzip member of `input`, refusing output over `limit`.
/// The output buffer grows by doubling, and `grant` is asked for each
/// growth (the bytes the buffer's capacity gains) before it is allocated;
/// its error ends the decompression. So what `grant` handed out is what
/// the returned bytes hold in memory.
pub fn gunzip_capped(
    input: &[u8],
    limit: usize,
    grant: InflateGrant<'_>,
) -> Result<Bytes, DecodeError> {
    let mut out: Vec<u8> = Vec::new();
    let mut scratch = [0u8; READ_STEP];
    let mut reader = MultiGzDecoder::new(input).take(limit as u64 + 1);
    loop {
        let n = reader
            .read(&mut scratch)
            .map_err(|e| DecodeError::BadGzip(e.to_string()))?;
        if n == 0 {
            break;
        }
        let need = out.len() + n;
        if need > limit {
            return Err(DecodeError::DecompressedTooLarge { limit });
        }
        if need > out.capacity() {
            let grown = (out.capacity() * 2).max(need).max(READ_STEP).min(limit);
            grant(grown - out.capacity())?;
            out.reserve_exact(grown - out.len());
        }
        out.extend_from_slice(&scratch[..n]);
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn concatenated_members_are_all_decoded() {
        let mut both = gz(b"hello ");
        both.extend(gz(b"world"));
        assert_eq!(
            &gunzip_capped(&both, 100, &mut |_| Ok(())).unwrap()[..],
            b"hello world"
        );
    }

    #[test]
    fn output_over_the_limit_is_refused() {
        let bomb = gz(&vec![0u8; 1 << 20]);
        assert_eq!(
            gunzip_capped(&bomb, 1000, &mut |_| Ok(())),
            Err(DecodeError::DecompressedTooLarge { limit: 1000 })
        );
    }

    #[test]
    fn corrupt_data_is_an_error() {
        assert!(matches!(
            gunzip_capped(b"not gzip", 100, &mut |_| Ok(())),
            Err(DecodeError::BadGzip(_))
        ));
    }
}
