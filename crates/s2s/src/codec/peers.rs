//! The RAW peer list: i32 count, then per peer `writeUTF(host)`, i32 port,
//! bool secure, i32 FlowFile count. No response code precedes it.

use bytes::{BufMut, BytesMut};

use super::reader::{finish, Reader};
use super::{encode_utf, CodecError, Decoded};

/// Most peers a decoded list may hold.
pub const MAX_PEERS: u64 = 10_000;

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

/// Appends a peer list.
pub fn encode_peer_list(peers: &[PeerInfo], out: &mut BytesMut) -> Result<(), CodecError> {
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
            let host = r.utf("peer host")?;
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
}
