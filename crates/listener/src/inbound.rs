//! [`Inbound`]: every read a protocol session makes goes through here, so
//! every listener applies the same three rules.
//!
//! - **Budget.** The bytes of a read are taken from the hub's process-wide
//!   [`InflightBudget`] *before* reading; bytes the session consumed are
//!   given back at the next read unless the session took them
//!   ([`Inbound::take`]) to hold until its data is acknowledged. When the
//!   budget is spent, the read waits — the kernel's buffers fill and TCP
//!   slows the sender — instead of allocating. A connection with a partial
//!   frame waits only until that frame's deadline, so frames that never
//!   complete cannot hold the budget against everyone else.
//! - **Timeouts.** With nothing buffered, a connection that neither reads
//!   nor writes for `idle_timeout` is closed. With a partial frame buffered,
//!   the frame must complete within `read_timeout` of its first byte (the
//!   slowloris guard): the clock restarts whenever the session consumed a
//!   frame, so a steady stream of frames never trips it.
//! - **Memory.** A quiet connection holds no buffer: on plain TCP the read
//!   waits for readability before reserving space, an empty buffer that grew
//!   large is released, and the read size adapts to what arrives.

use std::io;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use futures::FutureExt;
use thiserror::Error;
use tidegate_hub::{BudgetPermit, InflightBudget, ListenerMetrics};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::stream::{Activity, ConnReader, ConnStream};

/// Smallest read, bytes (also the buffer a quiet TLS connection holds).
pub const MIN_READ_BYTES: usize = 4 * 1024;
/// Default largest read, bytes.
pub const DEFAULT_MAX_READ_BYTES: usize = 256 * 1024;
/// An empty buffer with more capacity than this is released before the
/// next read, so a burst does not pin memory on a connection gone quiet.
pub const KEEP_CAPACITY_BYTES: usize = 16 * 1024;

/// Why a read failed.
#[derive(Debug, Error)]
pub enum ReadError {
    /// Nothing moved for the idle timeout.
    #[error("idle for {0:?}: closed")]
    IdleTimeout(Duration),
    /// A partly received frame did not complete within the read timeout.
    #[error("partial frame not completed within {0:?}: closed")]
    ReadTimeout(Duration),
    /// The socket failed.
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

impl ReadError {
    /// The kind counted in the listener's error metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ReadError::IdleTimeout(_) => "idle_timeout",
            ReadError::ReadTimeout(_) => "read_timeout",
            ReadError::Io(_) => "io",
        }
    }
}

impl From<ReadError> for io::Error {
    fn from(e: ReadError) -> io::Error {
        match e {
            ReadError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::TimedOut, other.to_string()),
        }
    }
}

/// A reader that can say when a read would not block, without reading.
pub trait ReadReady {
    /// Resolves when the next read is likely to return data (or at once,
    /// when that cannot be known).
    fn ready(&self) -> impl std::future::Future<Output = io::Result<()>> + Send;
}

impl ReadReady for ConnStream {
    fn ready(&self) -> impl std::future::Future<Output = io::Result<()>> + Send {
        self.readable()
    }
}

impl ReadReady for ConnReader {
    fn ready(&self) -> impl std::future::Future<Output = io::Result<()>> + Send {
        self.readable()
    }
}

impl ReadReady for tokio::net::TcpStream {
    fn ready(&self) -> impl std::future::Future<Output = io::Result<()>> + Send {
        self.readable()
    }
}

impl ReadReady for tokio::io::DuplexStream {
    fn ready(&self) -> impl std::future::Future<Output = io::Result<()>> + Send {
        std::future::ready(Ok(()))
    }
}

/// The read side of one connection: budget, timeouts and buffer sizing.
#[derive(Debug)]
pub struct Inbound {
    budget: InflightBudget,
    held: BudgetPermit,
    idle: Option<Duration>,
    frame: Option<Duration>,
    activity: Activity,
    metrics: ListenerMetrics,
    partial_since: Option<Instant>,
    len_after_read: usize,
    read_size: usize,
    max_read: usize,
}

impl Inbound {
    /// An inbound side drawing from `budget`, with the given timeouts.
    pub fn new(
        budget: InflightBudget,
        idle: Option<Duration>,
        frame: Option<Duration>,
        activity: Activity,
        metrics: ListenerMetrics,
    ) -> Self {
        Inbound {
            held: budget.empty(),
            budget,
            idle,
            frame,
            activity,
            metrics,
            partial_since: None,
            len_after_read: 0,
            read_size: MIN_READ_BYTES,
            max_read: DEFAULT_MAX_READ_BYTES,
        }
    }

    /// Caps one read at `bytes` (at least [`MIN_READ_BYTES`]).
    pub fn with_max_read(mut self, bytes: usize) -> Self {
        self.max_read = bytes.max(MIN_READ_BYTES);
        self
    }

    /// The idle timeout, if any.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle
    }

    /// The partial-frame timeout, if any.
    pub fn read_timeout(&self) -> Option<Duration> {
        self.frame
    }

    /// When the connection last moved a byte either way; a session whose
    /// bytes are read by a library (hyper) watches it for the idle timeout.
    pub fn activity(&self) -> &Activity {
        &self.activity
    }

    /// The budget this connection's reads draw from (for a protocol that
    /// meters reads the core does not make, such as an upgraded websocket).
    pub fn budget(&self) -> &InflightBudget {
        &self.budget
    }

    /// Bytes of the budget this connection holds for its buffer.
    pub fn held_bytes(&self) -> usize {
        self.held.bytes()
    }

    /// Takes the budget of `n` bytes the session has just consumed from the
    /// buffer (a frame), to hold until that frame's data is acknowledged or
    /// dropped. Bytes consumed and not taken return to the budget at the
    /// next read.
    pub fn take(&mut self, n: usize) -> BudgetPermit {
        self.held.split(n)
    }

    /// Reads more bytes into `buf`, appending. `Ok(0)` is end of stream.
    pub async fn read<R>(&mut self, r: &mut R, buf: &mut BytesMut) -> Result<usize, ReadError>
    where
        R: AsyncRead + ReadReady + Unpin,
    {
        // What the session consumed without taking goes back to the pool.
        self.held.shrink_to(buf.len());
        if buf.is_empty() && buf.capacity() > KEEP_CAPACITY_BYTES {
            *buf = BytesMut::new();
        }
        let now = Instant::now();
        if buf.is_empty() {
            self.partial_since = None;
        } else if self.partial_since.is_none() || buf.len() < self.len_after_read {
            // A frame was consumed since the last read: what is left is the
            // start of the next one, and its clock starts now.
            self.partial_since = Some(now);
        }

        self.timed(r.ready()).await?;
        let want = self.read_size.min(self.max_read);
        let permit = match self.budget.try_acquire(want) {
            Some(p) => p,
            None => {
                self.metrics.error("budget_wait");
                match (self.partial_since, self.frame) {
                    // A connection holding a partial frame waits for budget
                    // only until its frame deadline: otherwise connections
                    // whose frames never complete could hold the whole
                    // budget and wait for each other forever, starving
                    // every well-behaved client. Timing out frees what it
                    // held.
                    (Some(since), Some(frame)) => {
                        match tokio::time::timeout_at(
                            (since + frame).into(),
                            self.budget.acquire(want),
                        )
                        .await
                        {
                            Ok(p) => p,
                            Err(_) => {
                                self.metrics.error("read_timeout");
                                return Err(ReadError::ReadTimeout(frame));
                            }
                        }
                    }
                    // Nothing buffered: waiting holds nothing back.
                    _ => self.budget.acquire(want).await,
                }
            }
        };
        self.held.merge(permit);
        // Reuse the space a partial frame left rather than growing: a
        // trickling connection keeps one small buffer.
        if buf.capacity() - buf.len() < want.min(MIN_READ_BYTES) {
            buf.reserve(want);
        }
        let room = want.min(buf.capacity() - buf.len());
        let n = {
            let mut limited = (&mut *buf).limit(room);
            self.timed(r.read_buf(&mut limited)).await?
        };
        self.held.shrink_to(buf.len());
        self.len_after_read = buf.len();
        if n == room && room == want {
            self.read_size = (self.read_size * 2).min(self.max_read);
        } else if n < want / 4 {
            self.read_size = (self.read_size / 2).max(MIN_READ_BYTES);
        }
        Ok(n)
    }

    /// Runs `fut` under whichever deadline applies now: the partial frame's,
    /// or the idle one (which moves while the connection writes).
    async fn timed<F, T>(&mut self, fut: F) -> Result<T, ReadError>
    where
        F: std::future::Future<Output = io::Result<T>>,
    {
        tokio::pin!(fut);
        // Most reads of a busy connection find data already there: answer
        // those without filing a timer (a `timeout_at` registers an entry
        // in the timer wheel and removes it again, under its lock — a
        // measurable share of a small-message server's CPU).
        if let Some(r) = fut.as_mut().now_or_never() {
            return Ok(r?);
        }
        loop {
            let (deadline, partial) = match (self.partial_since, self.frame) {
                (Some(since), Some(frame)) => (Some(since + frame), true),
                _ => (self.idle.map(|idle| self.activity.last() + idle), false),
            };
            let Some(deadline) = deadline else {
                return Ok(fut.as_mut().await?);
            };
            match tokio::time::timeout_at(deadline.into(), fut.as_mut()).await {
                Ok(r) => return Ok(r?),
                Err(_) if partial => {
                    self.metrics.error("read_timeout");
                    return Err(ReadError::ReadTimeout(self.frame.unwrap_or_default()));
                }
                Err(_) => {
                    let idle = self.idle.unwrap_or_default();
                    if self.activity.last() + idle > Instant::now() {
                        continue; // the connection wrote meanwhile
                    }
                    self.metrics.error("idle_timeout");
                    return Err(ReadError::IdleTimeout(idle));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidegate_hub::HubMetrics;
    use tokio::io::AsyncWriteExt;

    fn inbound(budget: &InflightBudget, idle_ms: u64, frame_ms: u64) -> Inbound {
        let m = HubMetrics::default().listener("t");
        Inbound::new(
            budget.clone(),
            Some(Duration::from_millis(idle_ms)),
            Some(Duration::from_millis(frame_ms)),
            Activity::new(),
            m,
        )
    }

    #[tokio::test]
    async fn consumed_bytes_return_to_the_budget_unless_taken() {
        let budget = InflightBudget::new(1 << 20);
        let mut inb = inbound(&budget, 1_000, 1_000);
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client.write_all(&[7u8; 100]).await.unwrap();
        let mut buf = BytesMut::new();
        assert_eq!(inb.read(&mut server, &mut buf).await.unwrap(), 100);
        assert_eq!(budget.in_use(), 100);
        let _frame = buf.split_to(40);
        let held = inb.take(40);
        let _ = buf.split_to(60); // consumed, not taken
        client.write_all(&[7u8; 10]).await.unwrap();
        inb.read(&mut server, &mut buf).await.unwrap();
        assert_eq!(budget.in_use(), 40 + 10);
        drop(held);
        assert_eq!(budget.in_use(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickled_frame_is_closed_by_the_read_timeout() {
        let budget = InflightBudget::new(1 << 20);
        let mut inb = inbound(&budget, 60_000, 5_000);
        let (mut client, mut server) = tokio::io::duplex(1024);
        let mut buf = BytesMut::new();
        let trickle = tokio::spawn(async move {
            for _ in 0..100 {
                if client.write_all(b"x").await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let err = loop {
            match inb.read(&mut server, &mut buf).await {
                Ok(_) => continue, // never consumes: one partial frame
                Err(e) => break e,
            }
        };
        assert!(matches!(err, ReadError::ReadTimeout(_)), "{err}");
        assert!(
            buf.len() <= 6,
            "{} bytes read before the timeout",
            buf.len()
        );
        trickle.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_closed_by_the_idle_timeout_but_a_steady_one_is_not() {
        let budget = InflightBudget::new(1 << 20);
        let mut inb = inbound(&budget, 10_000, 2_000);
        let (mut client, mut server) = tokio::io::duplex(1024);
        let mut buf = BytesMut::new();
        // Whole frames every second for longer than both timeouts.
        for _ in 0..20 {
            client.write_all(b"frame").await.unwrap();
            inb.read(&mut server, &mut buf).await.unwrap();
            buf.clear();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let err = inb.read(&mut server, &mut buf).await.unwrap_err();
        assert!(matches!(err, ReadError::IdleTimeout(_)), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn partial_frames_waiting_for_budget_time_out_and_free_it() {
        let budget = InflightBudget::new(MIN_READ_BYTES * 2);
        let mut inb = inbound(&budget, 60_000, 3_000);
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        client.write_all(&[1u8; 100]).await.unwrap();
        let mut buf = BytesMut::new();
        inb.read(&mut server, &mut buf).await.unwrap(); // a partial frame
        let hog = budget.acquire(MIN_READ_BYTES * 2 - 100).await;
        client.write_all(&[1u8; 100]).await.unwrap();
        let waited = tokio::time::timeout(Duration::from_secs(60), inb.read(&mut server, &mut buf))
            .await
            .expect("a partial frame waited for budget past its deadline");
        let err = waited.unwrap_err();
        assert!(matches!(err, ReadError::ReadTimeout(_)), "{err}");
        drop(inb);
        drop(hog);
        assert_eq!(budget.in_use(), 0, "the timed-out connection kept budget");
    }

    #[tokio::test]
    async fn a_spent_budget_stops_reading() {
        let budget = InflightBudget::new(MIN_READ_BYTES);
        let hog = budget.acquire(MIN_READ_BYTES).await;
        let mut inb = inbound(&budget, 60_000, 60_000);
        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(b"data").await.unwrap();
        let mut buf = BytesMut::new();
        let read =
            tokio::time::timeout(Duration::from_millis(50), inb.read(&mut server, &mut buf)).await;
        assert!(read.is_err(), "read went ahead with no budget");
        assert!(buf.is_empty());
        drop(hog);
        assert_eq!(inb.read(&mut server, &mut buf).await.unwrap(), 4);
    }
}
