//! Reads a connection's first request head before hyper is built.
//!
//! hyper allocates an 8 KiB read buffer (and its write buffer) as soon as it
//! starts reading a connection, so a client that sends the first bytes of a
//! request line and then nothing — the slowloris pattern, or ten thousand of
//! them — would pin that much per connection. Here the head is collected in
//! a buffer that grows with what actually arrives, bounded by the
//! header-read deadline and a size limit; hyper only starts once a whole
//! head is in, and is handed those bytes first.

use std::io;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// First allocation for a head; most request heads fit.
const FIRST_CHUNK: usize = 512;

/// How collecting the first head ended.
#[derive(Debug)]
pub enum FirstHead {
    /// The head is complete (it ends in an empty line), or it grew past the
    /// limit: either way hyper takes over from here, with these bytes first
    /// (it answers an oversize head itself).
    Ready(Bytes),
    /// The client closed before finishing a head.
    Closed,
    /// Not a byte arrived within the idle timeout.
    Idle,
    /// The head did not complete within the header-read timeout.
    TimedOut,
    /// Reading failed.
    Failed(io::Error),
}

/// Collects bytes until the end of the first request head, at most `limit`
/// of them: the first byte may take up to `idle` (a connection opened
/// ahead of its first request is quiet, not slow), the rest of the head
/// at most `timeout` from that byte (none: no limit). Nothing is allocated
/// before the first byte arrives.
pub async fn read_first_head<R>(
    stream: &mut R,
    limit: usize,
    idle: Option<Duration>,
    timeout: Option<Duration>,
) -> FirstHead
where
    R: AsyncRead + Unpin,
{
    let mut first = [0u8; 1];
    let read = stream.read(&mut first);
    let got = match idle {
        Some(i) => match tokio::time::timeout(i, read).await {
            Ok(r) => r,
            Err(_) => return FirstHead::Idle,
        },
        None => read.await,
    };
    match got {
        Ok(0) => return FirstHead::Closed,
        Ok(_) => {}
        Err(e) => return FirstHead::Failed(e),
    }
    let mut buf = BytesMut::with_capacity(FIRST_CHUNK);
    buf.extend_from_slice(&first);
    let collect = collect(stream, buf, limit);
    match timeout {
        Some(t) => tokio::time::timeout(t, collect)
            .await
            .unwrap_or(FirstHead::TimedOut),
        None => collect.await,
    }
}

async fn collect<R>(stream: &mut R, mut buf: BytesMut, limit: usize) -> FirstHead
where
    R: AsyncRead + Unpin,
{
    let mut scanned = 0;
    if head_end(&buf, 0).is_some() || buf.len() >= limit {
        return FirstHead::Ready(buf.freeze());
    }
    loop {
        if buf.capacity() == buf.len() {
            // Doubling keeps the number of reads logarithmic while the
            // buffer stays within 2× of what arrived.
            buf.reserve(buf.len().max(FIRST_CHUNK));
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) => return FirstHead::Closed,
            Ok(_) => {}
            Err(e) => return FirstHead::Failed(e),
        }
        if head_end(&buf, scanned).is_some() || buf.len() >= limit {
            return FirstHead::Ready(buf.freeze());
        }
        // An end marker may straddle two reads: rescan its last 3 bytes.
        scanned = buf.len().saturating_sub(3);
    }
}

/// Where the head ends (after its empty line), searching from `from`.
/// httparse accepts bare `\n` line endings, so both forms count.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let tail = &buf[from.min(buf.len())..];
    tail.windows(2).enumerate().find_map(|(i, w)| match w {
        b"\n\n" => Some(from + i + 2),
        [b'\n', b'\r'] if tail.get(i + 2) == Some(&b'\n') => Some(from + i + 3),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn finds_the_empty_line() {
        assert_eq!(
            head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody", 0),
            Some(27)
        );
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: a\n\n", 0), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n", 0), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r", 0), None);
    }

    #[tokio::test]
    async fn a_head_split_across_reads_is_found() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            for piece in [&b"GET / HTTP/1.1\r\nHost: a\r"[..], b"\n\r", b"\nrest"] {
                client.write_all(piece).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            client
        });
        match read_first_head(&mut server, 1024, None, Some(Duration::from_secs(5))).await {
            FirstHead::Ready(b) => assert!(b.starts_with(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")),
            other => panic!("{other:?}"),
        }
        drop(writer.await);
    }

    #[tokio::test]
    async fn a_trickled_head_times_out_holding_only_what_arrived() {
        let (mut client, mut server) = tokio::io::duplex(64);
        client.write_all(b"GET / HT").await.unwrap();
        let r = read_first_head(&mut server, 1024, None, Some(Duration::from_millis(50))).await;
        assert!(matches!(r, FirstHead::TimedOut), "{r:?}");
        drop(client);
    }

    /// The head's clock starts at its first byte: a connection quiet for
    /// longer than the header timeout (but within the idle one) is served,
    /// and one quiet past the idle timeout is idle, not slow.
    #[tokio::test]
    async fn the_head_timeout_counts_from_the_first_byte_and_quiet_is_idle() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            client
        });
        let r = read_first_head(
            &mut server,
            1024,
            Some(Duration::from_secs(5)),
            Some(Duration::from_millis(100)),
        )
        .await;
        assert!(matches!(r, FirstHead::Ready(_)), "{r:?}");
        drop(writer.await);

        let (client, mut server) = tokio::io::duplex(64);
        let r = read_first_head(
            &mut server,
            1024,
            Some(Duration::from_millis(50)),
            Some(Duration::from_secs(5)),
        )
        .await;
        assert!(matches!(r, FirstHead::Idle), "{r:?}");
        drop(client);
    }

    #[tokio::test]
    async fn an_oversize_head_is_handed_on_at_the_limit() {
        let (mut client, mut server) = tokio::io::duplex(4096);
        let w = tokio::spawn(async move {
            let _ = client.write_all(&[b'a'; 3000]).await;
            client
        });
        match read_first_head(&mut server, 1000, None, None).await {
            FirstHead::Ready(b) => assert!(b.len() >= 1000 && b.len() < 3000),
            other => panic!("{other:?}"),
        }
        drop(w.await);
    }

    #[tokio::test]
    async fn a_client_that_leaves_mid_head_is_closed() {
        let (mut client, mut server) = tokio::io::duplex(64);
        client.write_all(b"GET /").await.unwrap();
        drop(client);
        let r = read_first_head(&mut server, 1024, None, None).await;
        assert!(matches!(r, FirstHead::Closed), "{r:?}");
    }

    proptest! {
        /// Wherever the reads split a head, its end is found at the same
        /// place as in one piece.
        #[test]
        fn split_points_do_not_matter(head in "[A-Za-z :/.0-9]{0,40}(\r\n[A-Za-z:]{1,10}){0,4}", cut in 0usize..80) {
            let full = format!("{head}\r\n\r\nbody");
            let end = head_end(full.as_bytes(), 0);
            let cut = cut.min(full.len());
            let scanned = cut.saturating_sub(3);
            let first = head_end(&full.as_bytes()[..cut], 0);
            let found = first.or_else(|| head_end(full.as_bytes(), scanned));
            prop_assert_eq!(found, end);
        }
    }
}
