//! What request number `n` of a run is: its method, its key and (for a
//! PUT) its value, laid out as HTTP/1.1 bytes. Pure and deterministic, so
//! the same command sends the same requests to Tidegate and to the anchor.
//!
//! - PUT `n` writes key `k{(offset + n) mod keys}` (sequential, as the
//!   seed's wrk2 script does); GET `n` reads a pseudo-random key of
//!   `0..keys`; mixed alternates by a hash bit of `n`.
//! - Values are pseudo-random bytes that differ per request, so the
//!   engine's block compression cannot shrink them: bytes written are bytes
//!   stored (what `--prefill-bytes` promises).

use std::io::Write;

/// The operation a run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// PUT of `--value-bytes` bytes.
    Put,
    /// GET.
    Get,
    /// Half PUT, half GET.
    Mixed,
}

/// How to lay out requests for one target.
#[derive(Debug, Clone)]
pub struct RequestPlan {
    /// The operation.
    pub op: Op,
    /// Size of a PUT's value.
    pub value_bytes: usize,
    /// Keys are `k0 .. k{keys-1}`.
    pub keys: u64,
    /// First key a PUT writes (continues across runs of one command).
    pub offset: u64,
    /// Appended to every entity query (`&ack=2&from=3`, or empty).
    pub query: String,
    /// The `Host` header.
    pub host: String,
}

/// A method and what a server that handled it well answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// A write (201 from KV).
    Put,
    /// A read (200 from KV; 404 when the key was never written).
    Get,
}

/// splitmix64: a fast, well-mixed 64-bit hash of `x`.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl RequestPlan {
    /// The method of request `n`.
    pub fn method(&self, n: u64) -> Method {
        match self.op {
            Op::Put => Method::Put,
            Op::Get => Method::Get,
            Op::Mixed if mix(n ^ 0x5555) & 1 == 0 => Method::Put,
            Op::Mixed => Method::Get,
        }
    }

    /// Writes request `n` into `out` (cleared first) and returns its method.
    pub fn write(&self, n: u64, out: &mut Vec<u8>) -> Method {
        out.clear();
        let keys = self.keys.max(1);
        let method = self.method(n);
        let key = match method {
            Method::Put => (self.offset.wrapping_add(n)) % keys,
            Method::Get => mix(n) % keys,
        };
        match method {
            Method::Put => {
                let _ = write!(
                    out,
                    "PUT /v0/entity?id=k{key}{} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
                    self.query, self.host, self.value_bytes
                );
                fill_value(mix(n.wrapping_add(self.offset)), self.value_bytes, out);
            }
            Method::Get => {
                let _ = write!(
                    out,
                    "GET /v0/entity?id=k{key}{} HTTP/1.1\r\nHost: {}\r\n\r\n",
                    self.query, self.host
                );
            }
        }
        method
    }
}

/// Appends `len` pseudo-random bytes seeded by `seed`.
fn fill_value(mut seed: u64, len: usize, out: &mut Vec<u8>) {
    let mut left = len;
    while left > 0 {
        seed = mix(seed);
        let b = seed.to_le_bytes();
        let n = left.min(8);
        out.extend_from_slice(&b[..n]);
        left -= n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(op: Op) -> RequestPlan {
        RequestPlan {
            op,
            value_bytes: 10,
            keys: 100,
            offset: 95,
            query: "&ack=2&from=3".into(),
            host: "h".into(),
        }
    }

    #[test]
    fn puts_are_sequential_with_a_body_of_the_asked_size() {
        let mut out = Vec::new();
        assert_eq!(plan(Op::Put).write(7, &mut out), Method::Put);
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("PUT /v0/entity?id=k2&ack=2&from=3 HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n"),
            "{text}"
        );
        let head_len = text.find("\r\n\r\n").unwrap() + 4;
        assert_eq!(out.len() - head_len, 10);
        let mut other = Vec::new();
        plan(Op::Put).write(8, &mut other);
        assert_ne!(out[head_len..], other[other.len() - 10..], "values differ");
    }

    #[test]
    fn gets_stay_in_the_key_space_and_mixed_does_both() {
        let mut out = Vec::new();
        let (mut puts, mut gets) = (0, 0);
        for n in 0..1000 {
            match plan(Op::Mixed).write(n, &mut out) {
                Method::Put => puts += 1,
                Method::Get => {
                    gets += 1;
                    let text = String::from_utf8(out.clone()).unwrap();
                    let id: u64 = text["GET /v0/entity?id=k".len()..text.find('&').unwrap()]
                        .parse()
                        .unwrap();
                    assert!(id < 100);
                }
            }
        }
        assert!(puts > 400 && gets > 400, "{puts} {gets}");
    }
}
