//! Event times: the EventTime extension (type 0, 8 bytes: seconds then
//! nanoseconds, big-endian) in either of its encodings — `D7 00` (fixext 8)
//! or `C7 08 00` (ext 8) — plus plain integer seconds and float seconds.
//! Time 0 means "now"; the caller substitutes the arrival time.

use super::reader::{MsgReader, Number};
use super::DecodeError;

/// Ext type code of EventTime.
pub const EVENT_TIME_EXT: i8 = 0;

/// A Forward event time with nanosecond precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EventTime {
    /// Seconds since the Unix epoch.
    pub secs: u32,
    /// Nanoseconds within the second.
    pub nanos: u32,
}

impl EventTime {
    /// A time from seconds and nanoseconds.
    pub fn new(secs: u32, nanos: u32) -> Self {
        EventTime { secs, nanos }
    }

    /// Nanoseconds since the epoch.
    pub fn as_nanos(&self) -> u64 {
        u64::from(self.secs) * 1_000_000_000 + u64::from(self.nanos)
    }

    /// The current time.
    pub fn now() -> Self {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        EventTime {
            secs: d.as_secs() as u32,
            nanos: d.subsec_nanos(),
        }
    }
}

/// Reads an event time and returns nanoseconds since the epoch (0 for
/// "now"); `Ok(None)` when the value is not a time (the event is invalid;
/// the value is consumed).
pub fn read_time_ns(r: &mut MsgReader<'_>) -> Result<Option<u64>, DecodeError> {
    if let Some(n) = r.read_number()? {
        return Ok(match n {
            Number::Unsigned(s) => s.checked_mul(1_000_000_000),
            Number::Signed(_) => None,
            Number::Float(f) if f.is_finite() && (0.0..1.8e10).contains(&f) => {
                Some((f * 1e9) as u64)
            }
            Number::Float(_) => None,
        });
    }
    if let Some((ty, range)) = r.read_ext()? {
        if ty != EVENT_TIME_EXT || range.len() != 8 {
            return Ok(None);
        }
        let b = &r.bytes()[range];
        let secs = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let nanos = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        return Ok(Some(
            u64::from(secs) * 1_000_000_000 + u64::from(nanos.min(999_999_999)),
        ));
    }
    r.skip_value()?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time_of(bytes: &[u8]) -> Option<u64> {
        read_time_ns(&mut MsgReader::new(bytes)).unwrap()
    }

    #[test]
    fn both_event_time_encodings_and_integers_decode() {
        let fixext = [0xd7, 0x00, 0x5a, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x07];
        let ext8 = [
            0xc7, 0x08, 0x00, 0x5a, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x07,
        ];
        let want = 0x5a00_0001u64 * 1_000_000_000 + 7;
        assert_eq!(time_of(&fixext), Some(want));
        assert_eq!(time_of(&ext8), Some(want));
        assert_eq!(
            time_of(&[0xce, 0x5a, 0x00, 0x00, 0x01]),
            Some(0x5a00_0001 * 1_000_000_000)
        );
        assert_eq!(time_of(&[0x00]), Some(0));
    }

    #[test]
    fn other_values_are_not_times() {
        assert_eq!(time_of(&[0xa1, b'x']), None);
        assert_eq!(time_of(&[0xff]), None);
        assert_eq!(time_of(&[0xd4, 0x01, 0x00]), None);
    }
}
