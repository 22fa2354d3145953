//! The RAW peer list: i32 count, then per peer `writeUTF(host)`, i32 port,
//! bool secure, i32 FlowFile count. No response code precedes it.

use bytes::{BufMut, BytesMut};

use super::reader::{finish, Reader};
use super::{encode_utf, modified_utf8_len, CodecError, Decoded};

/// Most peers a decoded list may hold.
pub const MAX_PEERS: u64 = 10_000;

/// Longest peer host name decoded, bytes (a DNS name has at most 253).
/// Without it a list could announce `MAX_PEERS` (10,000) hosts of 64 KiB each,
/// and the client would buffer (and decode again on every read) up to
/// 655 MB before the list completes; with it a whole list stays under
/// 2.7 MB.
pub const MAX_PEER_HOST_BYTES: u64 = 255;

/// One entry of a peer list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// Host name clients connect to.
    pub host: String,
    /// RAW port.
    pub port: i32,
    /// True when the port speaks TLS.
    pub secure: bool,
    /// Queued FlowFiles (load hint).
    pub flow_file_count: i32,
}

/// Appends a peer list, or nothing when a host name is longer than
/// [`MAX_PEER_HOST_BYTES`] or there are more than 10,000 (`MAX_PEERS`) peers: a
/// client (ours included) would refuse the whole list.
pub fn encode_peer_list(peers: &[PeerInfo], out: &mut BytesMut) -> Result<(), CodecError> {
    if peers.len() as u64 > MAX_PEERS {
        return Err(CodecError::TooLarge {
            what: "peers",
            value: peers.len() as u64,
            limit: MAX_PEERS,
        });
    }
    if let Some(len) = peers
        .iter()
        .map(|p| modified_utf8_len(&p.host) as u64)
        .find(|&len| len > MAX_PEER_HOST_BYTES)
    {
        return Err(CodecError::TooLarge {
            what: "peer host",
            value: len,
            limit: MAX_PEER_HOST_BYTES,
        });
    }
    out.put_i32(peers.len() as i32);
    for p in peers {
        encode_utf(&p.host, out)?;
        out.put_i32(p.port);
        out.put_u8(p.secure as u8);
        out.put_i32(p.flow_file_count);
    }
    Ok(())
}

/// Decodes a peer list.
pub fn decode_peer_list(buf: &[u8]) -> Decoded<Vec<PeerInfo>> {
    let mut r = Reader::new(buf);
    let v = (|| {
        let n = r.count("peers", MAX_PEERS)?;
        let mut peers = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            let host = r.utf_at_most("peer host", MAX_PEER_HOST_BYTES)?;
            let port = r.i32()?;
            let secure = r.u8()? != 0;
            let flow_file_count = r.i32()?;
            peers.push(PeerInfo {
                host,
                port,
                secure,
                flow_file_count,
            });
        }
        Ok(peers)
    })();
    finish(v, r.pos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_peer_list() {
        let peers = vec![PeerInfo {
            host: "localhost".into(),
            port: 10000,
            secure: false,
            flow_file_count: 0,
        }];
        let mut out = BytesMut::new();
        encode_peer_list(&peers, &mut out).unwrap();
        let want = b"\x00\x00\x00\x01\x00\x09localhost\x00\x00\x27\x10\x00\x00\x00\x00\x00";
        assert_eq!(&out[..], &want[..]);
        assert_eq!(
            decode_peer_list(want).unwrap().unwrap(),
            (peers, want.len())
        );
    }

    #[test]
    fn a_host_name_past_the_limit_is_refused_before_its_bytes_arrive() {
        let mut out = BytesMut::new();
        let host = "h".repeat(MAX_PEER_HOST_BYTES as usize);
        let peer = |host: &str| PeerInfo {
            host: host.into(),
            port: 1,
            secure: true,
            flow_file_count: 2,
        };
        encode_peer_list(&[peer(&host)], &mut out).unwrap();
        assert_eq!(
            decode_peer_list(&out).unwrap().unwrap(),
            (vec![peer(&host)], out.len())
        );
        // One byte longer: refused on the length alone (count, then the
        // u16 length; none of the host's bytes sent).
        let long = [0, 0, 0, 1, 0x01, 0x00];
        assert_eq!(
            decode_peer_list(&long),
            Err(CodecError::TooLarge {
                what: "peer host",
                value: MAX_PEER_HOST_BYTES + 1,
                limit: MAX_PEER_HOST_BYTES,
            })
        );
        // Nor does the encoder write one: it refuses and writes nothing.
        let mut refused = BytesMut::new();
        let too_long = "h".repeat(MAX_PEER_HOST_BYTES as usize + 1);
        assert_eq!(
            encode_peer_list(&[peer(&host), peer(&too_long)], &mut refused),
            Err(CodecError::TooLarge {
                what: "peer host",
                value: MAX_PEER_HOST_BYTES + 1,
                limit: MAX_PEER_HOST_BYTES,
            })
        );
        assert!(refused.is_empty());
        let mut longest = vec![0, 0, 0, 1, 0xff, 0xff];
        longest.resize(6 + 65_535, b'h');
        assert!(decode_peer_list(&longest).is_err());
    }
}
