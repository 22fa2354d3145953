//! Writes that give up on a client that does not read: the write side's
//! counterpart of the listener core's idle timeout, used by the default
//! mode's `[wire]` writer and the `[sockperf]` echo.
//!
//! The clock measures *progress*: it restarts whenever the socket takes a
//! byte, so a slow client that keeps reading is never cut, while one that
//! stopped reading is closed once nothing moved for the limit. A write the
//! socket takes at once (the common case) files no timer.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio_util::sync::CancellationToken;

/// At most this long without progress once a connection is closing: the
/// last replies and the ERROR are sent on a best-effort basis, not waited
/// for (the listener's idle timeout, when shorter, applies instead).
pub(crate) const CLOSING_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a write may go without progress.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StallLimit<'a> {
    /// While the connection is open; `None` waits forever.
    pub(crate) open: Option<Duration>,
    /// From when this token is cancelled (the connection is closing), the
    /// closing limit applies instead.
    pub(crate) closing: Option<&'a CancellationToken>,
}

impl StallLimit<'_> {
    /// The limit for a connection that is closing: the shorter of
    /// [`CLOSING_WRITE_TIMEOUT`] and the open limit.
    pub(crate) fn closing_limit(open: Option<Duration>) -> Duration {
        open.map_or(CLOSING_WRITE_TIMEOUT, |o| o.min(CLOSING_WRITE_TIMEOUT))
    }

    /// A limit for a connection already closing.
    pub(crate) fn closing_now(open: Option<Duration>) -> StallLimit<'static> {
        StallLimit {
            open: Some(Self::closing_limit(open)),
            closing: None,
        }
    }
}

/// Why a timed write ended early.
#[derive(Debug)]
pub(crate) enum WriteFailed {
    /// The socket failed.
    Io(io::Error),
    /// Nothing could be written for this long: the client is not reading.
    Stalled(Duration),
}

impl std::fmt::Display for WriteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteFailed::Io(e) => write!(f, "i/o: {e}"),
            WriteFailed::Stalled(d) => write!(f, "the client read nothing for {d:?}"),
        }
    }
}

/// Writes all of `buf` and flushes, giving up when no byte could be
/// written for the limit.
pub(crate) async fn write_timed<W: AsyncWrite + Unpin>(
    w: &mut W,
    buf: &[u8],
    limit: StallLimit<'_>,
) -> Result<(), WriteFailed> {
    let mut pos = 0;
    loop {
        // Whatever the socket takes now, without filing a timer.
        let now = std::future::poll_fn(|cx| match progress(w, buf, &mut pos, cx) {
            Poll::Ready(r) => Poll::Ready(Some(r)),
            Poll::Pending => Poll::Ready(None),
        })
        .await;
        match now {
            Some(Ok(true)) => return Ok(()),
            Some(Ok(false)) => continue,
            Some(Err(e)) => return Err(WriteFailed::Io(e)),
            None => {}
        }
        let closing = limit.closing.filter(|t| !t.is_cancelled());
        let stall = match (limit.closing, closing) {
            // The token has fired: the connection is closing.
            (Some(_), None) => Some(StallLimit::closing_limit(limit.open)),
            _ => limit.open,
        };
        let moved = std::future::poll_fn(|cx| progress(w, buf, &mut pos, cx));
        let timer = async {
            match stall {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let closing_starts = async {
            match closing {
                Some(t) => t.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            r = moved => match r {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(WriteFailed::Io(e)),
            },
            _ = timer => return Err(WriteFailed::Stalled(stall.unwrap_or_default())),
            // Re-armed with the closing limit.
            _ = closing_starts => {}
        }
    }
}

/// Writes what the writer takes of `buf[*pos..]`, then flushes. Ready with
/// `true` once everything is written and flushed, with `false` after some
/// progress; pending while nothing moves.
fn progress<W: AsyncWrite + Unpin>(
    w: &mut W,
    buf: &[u8],
    pos: &mut usize,
    cx: &mut Context<'_>,
) -> Poll<io::Result<bool>> {
    let mut moved = false;
    while *pos < buf.len() {
        match Pin::new(&mut *w).poll_write(cx, &buf[*pos..]) {
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            Poll::Ready(Ok(n)) => {
                *pos += n;
                moved = true;
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending if moved => return Poll::Ready(Ok(false)),
            Poll::Pending => return Poll::Pending,
        }
    }
    match Pin::new(&mut *w).poll_flush(cx) {
        Poll::Ready(Ok(())) => Poll::Ready(Ok(true)),
        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        Poll::Pending if moved => Poll::Ready(Ok(false)),
        Poll::Pending => Poll::Pending,
    }
}

/// Runs `fut` (a shutdown, say) for at most `limit`; false when it did not
/// finish in time.
pub(crate) async fn bounded<F: Future>(limit: Duration, fut: F) -> bool {
    tokio::time::timeout(limit, fut).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_write_the_peer_reads_completes() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let data = vec![7u8; 10_000];
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.unwrap();
            got
        });
        let limit = StallLimit {
            open: Some(Duration::from_secs(5)),
            closing: None,
        };
        write_timed(&mut a, &data, limit).await.unwrap();
        drop(a);
        assert_eq!(reader.await.unwrap(), data);
    }

    #[tokio::test]
    async fn a_write_nobody_reads_gives_up_after_the_limit() {
        let (mut a, _b) = tokio::io::duplex(64);
        let limit = StallLimit {
            open: Some(Duration::from_millis(50)),
            closing: None,
        };
        let r = write_timed(&mut a, &[1u8; 1000], limit).await;
        assert!(matches!(r, Err(WriteFailed::Stalled(_))), "{r:?}");
    }

    #[tokio::test]
    async fn closing_shortens_a_write_without_a_limit() {
        let (mut a, _b) = tokio::io::duplex(64);
        let closing = CancellationToken::new();
        let limit = StallLimit {
            open: None,
            closing: Some(&closing),
        };
        let c = closing.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            c.cancel();
        });
        let r = tokio::time::timeout(
            CLOSING_WRITE_TIMEOUT * 10,
            write_timed(&mut a, &[1u8; 1000], limit),
        )
        .await
        .expect("the closing limit applies");
        assert!(matches!(r, Err(WriteFailed::Stalled(_))), "{r:?}");
    }
}
