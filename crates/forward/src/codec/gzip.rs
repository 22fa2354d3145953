//! Size-capped gzip decompression for CompressedPackedForward entries.
//!
//! Clients may concatenate several gzip members (Fluentd appends one per
//! write), so a multi-member decoder is used. Output stops one byte past the
//! limit: a gzip bomb costs at most `limit` bytes of memory, then an error.

use std::io::Read;

use bytes::Bytes;
use flate2::read::MultiGzDecoder;

use super::DecodeError;

/// Decompresses every gzip member of `input`, refusing output over `limit`.
pub fn gunzip_capped(input: &[u8], limit: usize) -> Result<Bytes, DecodeError> {
    let mut out = Vec::with_capacity(input.len().saturating_mul(4).min(limit).min(1 << 24));
    let mut reader = MultiGzDecoder::new(input).take(limit as u64 + 1);
    reader
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::BadGzip(e.to_string()))?;
    if out.len() > limit {
        return Err(DecodeError::DecompressedTooLarge { limit });
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
        assert_eq!(&gunzip_capped(&both, 100).unwrap()[..], b"hello world");
    }

    #[test]
    fn output_over_the_limit_is_refused() {
        let bomb = gz(&vec![0u8; 1 << 20]);
        assert_eq!(
            gunzip_capped(&bomb, 1000),
            Err(DecodeError::DecompressedTooLarge { limit: 1000 })
        );
    }

    #[test]
    fn corrupt_data_is_an_error() {
        assert!(matches!(
            gunzip_capped(b"not gzip", 100),
            Err(DecodeError::BadGzip(_))
        ));
    }
}
