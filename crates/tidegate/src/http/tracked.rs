//! The stream hyper serves on: the listener core's connection, plus what the
//! HTTP server needs to know of its reads.
//!
//! - It hands hyper the first request head read before hyper started
//!   ([`super::first_head`]).
//! - It tells the connection's clock when bytes arrive (the header-read
//!   timeout starts at a head's first byte).
//! - Once the connection is upgraded (a websocket), the bytes of every read
//!   are taken from the in-flight budget and handed to the connection's
//!   [`UpgradedBytes`], which the websocket handler gives back after each
//!   message. When the budget is spent, the bytes of that read are owed and
//!   the next read waits until they are paid: the websocket's reader stops
//!   (backpressure) with at most one read beyond the budget. Taking them
//!   after the read, not before, keeps an idle websocket from holding
//!   budget for bytes that may never come. (Request bodies are metered by
//!   [`super::server`]'s `MeteredBody`; this covers what hyper no longer
//!   sees.)
//! - It signals when it is finally dropped: by hyper when the connection
//!   ends, or — after an upgrade — by the handler that took it over, so the
//!   connection keeps its place under `max_connections` until then.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use tidegate_hub::{BudgetPermit, InflightBudget, UpgradedBytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::server::ConnClock;

type Acquire = Pin<Box<dyn Future<Output = BudgetPermit> + Send>>;

/// A listener-core stream as hyper sees it.
pub(super) struct TrackedStream {
    stream: tidegate_listener::ConnStream,
    /// The first head, handed to hyper before anything else is read.
    prefix: Bytes,
    clock: Arc<ConnClock>,
    origin: Instant,
    budget: InflightBudget,
    /// After an upgrade: where each read's bytes go.
    upgraded: UpgradedBytes,
    /// Bytes taken from the budget towards what is owed.
    ready: BudgetPermit,
    /// Bytes read after an upgrade while the budget was spent.
    owed: usize,
    /// A budget wait in progress (the budget was spent).
    acquiring: Option<Acquire>,
    _dropped: tokio::sync::oneshot::Sender<()>,
}

impl TrackedStream {
    /// Wraps `stream`; `dropped` fires when this is dropped.
    pub(super) fn new(
        stream: tidegate_listener::ConnStream,
        prefix: Bytes,
        clock: Arc<ConnClock>,
        origin: Instant,
        budget: InflightBudget,
        upgraded: UpgradedBytes,
        dropped: tokio::sync::oneshot::Sender<()>,
    ) -> Self {
        TrackedStream {
            stream,
            prefix,
            clock,
            origin,
            ready: budget.empty(),
            budget,
            upgraded,
            owed: 0,
            acquiring: None,
            _dropped: dropped,
        }
    }

    /// Takes what is owed from the budget; pending while it is spent.
    fn poll_pay(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        std::task::ready!(self.poll_budget(cx, self.owed));
        let paid = self.ready.split(self.owed);
        self.upgraded.add(paid);
        self.owed = 0;
        Poll::Ready(())
    }

    /// Holds at least `want` bytes of budget in `ready` (or the whole
    /// budget, when `want` is larger).
    fn poll_budget(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<()> {
        loop {
            let have = self.ready.bytes();
            if have >= want {
                return Poll::Ready(());
            }
            if self.acquiring.is_none() {
                if let Some(p) = self.budget.try_acquire(want - have) {
                    self.ready.merge(p);
                    continue;
                }
                let budget = self.budget.clone();
                let more = want - have;
                self.acquiring = Some(Box::pin(async move { budget.acquire(more).await }));
            }
            let acquiring = self.acquiring.as_mut().expect("set above");
            let p = std::task::ready!(acquiring.as_mut().poll(cx));
            self.acquiring = None;
            let clamped = p.bytes() < want - have;
            self.ready.merge(p);
            if clamped {
                // A request larger than the whole budget is clamped to it.
                return Poll::Ready(());
            }
        }
    }
}

impl AsyncRead for TrackedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if !this.prefix.is_empty() {
            let n = buf.remaining().min(this.prefix.len());
            let head = this.prefix.split_to(n);
            buf.put_slice(&head);
            if this.prefix.is_empty() {
                this.prefix = Bytes::new(); // let the head's buffer go
            }
            this.clock.bytes_read(this.origin);
            return Poll::Ready(Ok(()));
        }
        let metered = this.clock.upgraded.load(Ordering::Relaxed);
        if metered && this.owed > 0 {
            std::task::ready!(this.poll_pay(cx));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.stream).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            this.clock.bytes_read(this.origin);
            if metered {
                match this.budget.try_acquire(n) {
                    Some(p) => this.upgraded.add(p),
                    None => this.owed = n,
                }
            }
        }
        r
    }
}

impl AsyncWrite for TrackedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
