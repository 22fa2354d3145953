//! The byte stream a protocol session gets from the listener core: plain TCP
//! or TLS behind one type, counting bytes in and out into the listener's
//! metrics and recording when anything last moved (for the idle timeout).
//!
//! Plain TCP splits into owned halves without a lock, so the hot path of a
//! protocol that reads and writes from two tasks pays nothing for TLS
//! support it does not use.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tidegate_hub::ListenerMetrics;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// When a connection last read or wrote anything, shared by its halves.
#[derive(Debug, Clone)]
pub struct Activity {
    start: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    /// A clock that says "active now".
    pub fn new() -> Self {
        Activity {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Records activity now.
    pub fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// When anything last moved.
    pub fn last(&self) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

impl Default for Activity {
    fn default() -> Self {
        Activity::new()
    }
}

enum Inner {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A client connection: plain TCP or TLS, metered.
pub struct ConnStream {
    inner: Inner,
    metrics: ListenerMetrics,
    activity: Activity,
}

impl std::fmt::Debug for ConnStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnStream")
            .field("tls", &self.is_tls())
            .finish()
    }
}

impl ConnStream {
    pub(crate) fn plain(s: TcpStream, metrics: ListenerMetrics, activity: Activity) -> Self {
        ConnStream {
            inner: Inner::Plain(s),
            metrics,
            activity,
        }
    }

    pub(crate) fn tls(
        s: TlsStream<TcpStream>,
        metrics: ListenerMetrics,
        activity: Activity,
    ) -> Self {
        ConnStream {
            inner: Inner::Tls(Box::new(s)),
            metrics,
            activity,
        }
    }

    /// True on a TLS connection.
    pub fn is_tls(&self) -> bool {
        matches!(self.inner, Inner::Tls(_))
    }

    /// The TCP socket underneath (for socket options such as TCP_QUICKACK).
    pub fn tcp(&self) -> &TcpStream {
        match &self.inner {
            Inner::Plain(s) => s,
            Inner::Tls(s) => s.get_ref().0,
        }
    }

    /// Waits until a read would not block, when that can be known without
    /// reading: always on plain TCP; on TLS it returns at once, because
    /// rustls may hold decrypted bytes the socket no longer signals.
    /// Readers call this before taking buffer space and budget, so an idle
    /// connection holds neither.
    pub async fn readable(&self) -> io::Result<()> {
        match &self.inner {
            Inner::Plain(s) => s.readable().await,
            Inner::Tls(_) => Ok(()),
        }
    }

    /// Hands over the plain socket, deregistered from tokio and still in
    /// non-blocking mode, for a session that drives it outside the runtime
    /// (the wire listener's low-latency poller): `Ok` with the socket (or
    /// the deregistration's I/O error, after which the connection is gone).
    /// A TLS connection cannot be handed over (its rustls state lives here)
    /// and comes back unchanged in `Err`. From then on the caller meters
    /// bytes and activity itself: this type's counters no longer see it.
    // `Err` is the stream itself, not an error; boxing it would only add an
    // allocation per hand-over.
    #[allow(clippy::result_large_err)]
    pub fn into_std(self) -> Result<io::Result<std::net::TcpStream>, ConnStream> {
        match self.inner {
            Inner::Plain(s) => Ok(s.into_std()),
            inner @ Inner::Tls(_) => Err(ConnStream {
                inner,
                metrics: self.metrics,
                activity: self.activity,
            }),
        }
    }

    /// Splits into a read half and a write half that can live in different
    /// tasks. Plain TCP takes no lock; TLS shares the stream behind one.
    pub fn into_split(self) -> (ConnReader, ConnWriter) {
        let (metrics, activity) = (self.metrics, self.activity);
        match self.inner {
            Inner::Plain(s) => {
                let (r, w) = s.into_split();
                (
                    ConnReader {
                        inner: ReadInner::Plain(r),
                        metrics: metrics.clone(),
                        activity: activity.clone(),
                    },
                    ConnWriter {
                        inner: WriteInner::Plain(w),
                        metrics,
                        activity,
                    },
                )
            }
            Inner::Tls(s) => {
                let (r, w) = tokio::io::split(*s);
                (
                    ConnReader {
                        inner: ReadInner::Tls(r),
                        metrics: metrics.clone(),
                        activity: activity.clone(),
                    },
                    ConnWriter {
                        inner: WriteInner::Tls(w),
                        metrics,
                        activity,
                    },
                )
            }
        }
    }
}

fn count_read(
    before: usize,
    buf: &ReadBuf<'_>,
    metrics: &ListenerMetrics,
    activity: &Activity,
    r: &Poll<io::Result<()>>,
) {
    if let Poll::Ready(Ok(())) = r {
        let n = buf.filled().len() - before;
        if n > 0 {
            metrics.bytes_in(n);
            activity.touch();
        }
    }
}

fn count_write(metrics: &ListenerMetrics, activity: &Activity, r: &Poll<io::Result<usize>>) {
    if let Poll::Ready(Ok(n)) = r {
        if *n > 0 {
            metrics.bytes_out(*n);
            activity.touch();
        }
    }
}

impl AsyncRead for ConnStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = match &mut this.inner {
            Inner::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        count_read(before, buf, &this.metrics, &this.activity, &r);
        r
    }
}

impl AsyncWrite for ConnStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = match &mut this.inner {
            Inner::Plain(s) => Pin::new(s).poll_write(cx, data),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
        };
        count_write(&this.metrics, &this.activity, &r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = match &mut this.inner {
            Inner::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        };
        count_write(&this.metrics, &this.activity, &r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        match &self.inner {
            Inner::Plain(s) => s.is_write_vectored(),
            Inner::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(s) => Pin::new(s).poll_flush(cx),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            Inner::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Inner::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

enum ReadInner {
    Plain(OwnedReadHalf),
    Tls(ReadHalf<TlsStream<TcpStream>>),
}

/// The read half of a [`ConnStream`].
pub struct ConnReader {
    inner: ReadInner,
    metrics: ListenerMetrics,
    activity: Activity,
}

impl std::fmt::Debug for ConnReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnReader")
    }
}

impl ConnReader {
    /// See [`ConnStream::readable`].
    pub async fn readable(&self) -> io::Result<()> {
        match &self.inner {
            ReadInner::Plain(s) => s.readable().await,
            ReadInner::Tls(_) => Ok(()),
        }
    }
}

impl AsyncRead for ConnReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = match &mut this.inner {
            ReadInner::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ReadInner::Tls(s) => Pin::new(s).poll_read(cx, buf),
        };
        count_read(before, buf, &this.metrics, &this.activity, &r);
        r
    }
}

enum WriteInner {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

/// The write half of a [`ConnStream`].
pub struct ConnWriter {
    inner: WriteInner,
    metrics: ListenerMetrics,
    activity: Activity,
}

impl std::fmt::Debug for ConnWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnWriter")
    }
}

impl AsyncWrite for ConnWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = match &mut this.inner {
            WriteInner::Plain(s) => Pin::new(s).poll_write(cx, data),
            WriteInner::Tls(s) => Pin::new(s).poll_write(cx, data),
        };
        count_write(&this.metrics, &this.activity, &r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = match &mut this.inner {
            WriteInner::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            WriteInner::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        };
        count_write(&this.metrics, &this.activity, &r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        match &self.inner {
            WriteInner::Plain(s) => s.is_write_vectored(),
            WriteInner::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            WriteInner::Plain(s) => Pin::new(s).poll_flush(cx),
            WriteInner::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().inner {
            WriteInner::Plain(s) => Pin::new(s).poll_shutdown(cx),
            WriteInner::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
