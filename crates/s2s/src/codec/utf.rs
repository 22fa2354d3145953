//! Java's `writeUTF` / `readUTF`: a u16 byte length, then "modified UTF-8"
//! (NUL as `C0 80`, characters outside the BMP as two 3-byte surrogates).

use bytes::{BufMut, BytesMut};

use super::reader::{finish, Reader};
use super::{CodecError, Decoded};

/// Largest encoded string `writeUTF` accepts.
pub const MAX_UTF_BYTES: usize = 65_535;

/// Appends `s` as Java `writeUTF` would.
pub fn encode_utf(s: &str, out: &mut BytesMut) -> Result<(), CodecError> {
    let len = modified_utf8_len(s);
    if len > MAX_UTF_BYTES {
        return Err(CodecError::StringTooLong(len));
    }
    out.reserve(2 + len);
    out.put_u16(len as u16);
    for unit in s.encode_utf16() {
        match unit {
            0x0001..=0x007f => out.put_u8(unit as u8),
            0x0000 | 0x0080..=0x07ff => {
                out.put_u8(0xc0 | (unit >> 6) as u8);
                out.put_u8(0x80 | (unit & 0x3f) as u8);
            }
            _ => {
                out.put_u8(0xe0 | (unit >> 12) as u8);
                out.put_u8(0x80 | ((unit >> 6) & 0x3f) as u8);
                out.put_u8(0x80 | (unit & 0x3f) as u8);
            }
        }
    }
    Ok(())
}

/// Decodes one `writeUTF` string from the front of `buf`.
pub fn decode_utf(buf: &[u8]) -> Decoded<String> {
    let mut r = Reader::new(buf);
    let v = r.utf("string");
    finish(v, r.pos())
}

pub(crate) fn modified_utf8_len(s: &str) -> usize {
    s.encode_utf16()
        .map(|u| match u {
            0x0001..=0x007f => 1,
            0x0000 | 0x0080..=0x07ff => 2,
            _ => 3,
        })
        .sum()
}

/// Decodes modified UTF-8 the way `DataInputStream.readUTF` does; unpaired
/// surrogates become U+FFFD.
pub(crate) fn modified_utf8_to_string(bytes: &[u8]) -> Result<String, ()> {
    if bytes.is_ascii() {
        return Ok(String::from_utf8(bytes.to_vec()).expect("ascii"));
    }
    let mut units: Vec<u16> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c >> 4 {
            0..=7 => {
                units.push(c as u16);
                i += 1;
            }
            12 | 13 => {
                let c2 = *bytes.get(i + 1).ok_or(())?;
                if c2 & 0xc0 != 0x80 {
                    return Err(());
                }
                units.push(((c as u16 & 0x1f) << 6) | (c2 as u16 & 0x3f));
                i += 2;
            }
            14 => {
                let c2 = *bytes.get(i + 1).ok_or(())?;
                let c3 = *bytes.get(i + 2).ok_or(())?;
                if c2 & 0xc0 != 0x80 || c3 & 0xc0 != 0x80 {
                    return Err(());
                }
                units.push(
                    ((c as u16 & 0x0f) << 12) | ((c2 as u16 & 0x3f) << 6) | (c3 as u16 & 0x3f),
                );
                i += 3;
            }
            _ => return Err(()),
        }
    }
    Ok(String::from_utf16_lossy(&units))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_and_astral_characters_use_java_forms() {
        let mut out = BytesMut::new();
        encode_utf("a\0😀", &mut out).unwrap();
        assert_eq!(
            &out[..],
            &[0, 9, b'a', 0xc0, 0x80, 0xed, 0xa0, 0xbd, 0xed, 0xb8, 0x80]
        );
        let (s, n) = decode_utf(&out).unwrap().unwrap();
        assert_eq!((s.as_str(), n), ("a\0😀", 11));
    }

    #[test]
    fn a_short_buffer_asks_for_more() {
        assert_eq!(decode_utf(&[0, 3, b'a']), Ok(None));
    }
}
