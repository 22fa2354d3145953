//! The load itself: `--connections` keep-alive connections, one request in
//! flight each, driven either at a fixed rate (wrk2's method) or, with
//! `--rate 0`, as fast as answers come back (wrk's closed loop).
//!
//! Fixed rate, corrected for coordinated omission: request `n` is *due* at
//! `start + n / rate` and belongs to connection `n mod connections`. One
//! pacer thread (a plain thread: `nanosleep` wakes within tens of µs,
//! tokio's timer only to the millisecond) hands each request to its
//! connection's bounded queue when it falls due; the connection sends it as
//! soon as the previous answer arrived, and its latency is counted from the
//! *due* time. A server that stalls therefore shows the whole stall in the
//! percentiles, for every request that queued behind it, instead of
//! slowing the schedule down. A request whose connection queue is full
//! (the server is far behind) is dropped and counted (`dropped_by_client`);
//! one still queued when the window ended is not sent and counted
//! (`unsent_due`) — never silently skipped. Both are late, not missing:
//! when due in the window, each is recorded with its latency from its due
//! time to the end of the run. Likewise a request that was sent and never
//! answered — it timed out (`timeout`), its connection failed
//! (`connection`) or could not be opened (`connect`) — is an error *and* a
//! latency, from its due time to when it was abandoned (at least
//! `timeout` for a timed-out one): leaving it out would drop exactly the
//! worst requests from the tail.
//!
//! The measured window is `[start + warmup, start + warmup + duration)`:
//! requests due in it are counted due; those written before the window's
//! end are counted sent; those answered with the expected status (by the
//! end of the run: at most `timeout` later) are counted delivered. The
//! latencies of the window's answered requests are recorded, and of its
//! unanswered, dropped and unsent ones as above. Nothing is sent after the
//! window's end. The samplers of the server (and of this client) are read
//! at the window's start and end ([`LoadSpec::marker`]), so their CPU
//! covers the same span as the rates.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::http::Conn;
use super::request::{Method, RequestPlan};
use crate::latency::LatencyRecorder;
use crate::sampler::{CpuWindow, Marker, TimedWindow};
use crate::{Progress, Schedule, Window};

/// Requests waiting per connection before the pacer drops new ones.
const CONN_QUEUE: usize = 4096;
/// Shortest sleep of the pacer thread between two hand-outs (wrk2's event
/// loop sleeps in whole milliseconds).
const PACER_QUANTUM: Duration = Duration::from_micros(200);
/// Pause after a failed connect, so a dead server does not spin the client.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);

/// The statuses a server that handled a request well answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// For a PUT.
    pub put: u16,
    /// For a GET.
    pub get: u16,
}

impl Expect {
    /// Tidegate KV: 201 Created, 200 OK.
    pub const KV: Expect = Expect { put: 201, get: 200 };
    /// A server answering a trivial 200 to everything (the anchor).
    pub const ANY_200: Expect = Expect { put: 200, get: 200 };

    fn status(&self, m: Method) -> u16 {
        match m {
            Method::Put => self.put,
            Method::Get => self.get,
        }
    }
}

/// One measured run.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Servers; connection `i` goes to `addrs[i mod len]`.
    pub addrs: Vec<SocketAddr>,
    /// Requests per second, or 0 for the closed loop.
    pub rate: u64,
    /// Connections.
    pub connections: usize,
    /// Not measured, before the window.
    pub warmup: Duration,
    /// The measured window.
    pub duration: Duration,
    /// Longest wait for one answer (then the connection is dropped).
    pub timeout: Duration,
    /// What each request is.
    pub plan: RequestPlan,
    /// What a good answer is.
    pub expect: Expect,
    /// Reads the samplers whose CPU is reported (the server's, the
    /// client's) at the window's start and end.
    pub marker: Marker,
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct LoadOutcome {
    /// Counts of the measured window.
    pub window: Window,
    /// Requests written over the whole run.
    pub sent: u64,
    /// Answers over the whole run (any status).
    pub received: u64,
    /// Errors by kind (`status_404`, `timeout`, `connection`,
    /// `dropped_by_client`, `unsent_due`…).
    pub errors: BTreeMap<String, u64>,
    /// Latencies of the window's answered requests (from their due time),
    /// and of its dropped and unsent ones (up to the end of the run).
    pub latency: LatencyRecorder,
    /// Worst delay between a request's due time and its write.
    pub max_send_lag: Duration,
    /// The measured window as marked on the samplers (`None`: the run
    /// failed before its window ended).
    pub cpu_window: Option<CpuWindow>,
}

impl LoadOutcome {
    fn merge(&mut self, o: ConnStats) {
        self.window.sent += o.sent_window;
        self.window.delivered += o.delivered_window;
        self.sent += o.sent;
        self.received += o.received;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_default() += v;
        }
        self.latency.merge(&o.latency);
        self.max_send_lag = self.max_send_lag.max(o.max_send_lag);
    }
}

#[derive(Default)]
struct ConnStats {
    sent: u64,
    received: u64,
    sent_window: u64,
    delivered_window: u64,
    errors: BTreeMap<String, u64>,
    latency: LatencyRecorder,
    /// The window's requests never sent, each recorded from its due time
    /// to the window's end (carried to the run's end once it is known).
    late: LatencyRecorder,
    max_send_lag: Duration,
}

impl ConnStats {
    fn error(&mut self, kind: &str) {
        *self.errors.entry(kind.to_owned()).or_default() += 1;
    }
}

/// A connection that reconnects after a failure.
struct Link {
    addr: SocketAddr,
    conn: Option<Conn>,
    timeout: Duration,
    /// The last connect failed: pause before the next one.
    pause: bool,
}

impl Link {
    fn new(addr: SocketAddr, conn: Option<Conn>, timeout: Duration) -> Link {
        Link {
            addr,
            conn,
            timeout,
            pause: false,
        }
    }

    /// One round trip: the status, or the error kind. It returns when the
    /// request is answered or abandoned (the latency of an unanswered one
    /// runs to then, so the pause after a failed connect is taken before
    /// the next attempt, not here).
    async fn exchange(&mut self, request: &[u8]) -> Result<u16, &'static str> {
        if !self.conn.as_ref().is_some_and(Conn::is_open) {
            if std::mem::take(&mut self.pause) {
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
            match tokio::time::timeout(self.timeout, Conn::connect(self.addr)).await {
                Ok(Ok(c)) => self.conn = Some(c),
                _ => {
                    self.conn = None;
                    self.pause = true;
                    return Err("connect");
                }
            }
        }
        let conn = self.conn.as_mut().expect("connected above");
        match tokio::time::timeout(self.timeout, conn.round_trip(request)).await {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "kv bench: request failed");
                self.conn = None;
                Err("connection")
            }
            Err(_) => {
                self.conn = None;
                Err("timeout")
            }
        }
    }
}

/// Runs one load and returns what it measured.
pub async fn run(spec: &LoadSpec, progress: &Arc<Progress>) -> anyhow::Result<LoadOutcome> {
    anyhow::ensure!(spec.connections > 0, "--connections must be positive");
    anyhow::ensure!(!spec.addrs.is_empty(), "no server to load");
    let mut links = Vec::with_capacity(spec.connections);
    for i in 0..spec.connections {
        let addr = spec.addrs[i % spec.addrs.len()];
        let conn = tokio::time::timeout(spec.timeout, Conn::connect(addr))
            .await
            .map_err(|_| anyhow::anyhow!("connecting to {addr}: timed out"))?
            .map_err(|e| anyhow::anyhow!("connecting to {addr}: {e}"))?;
        links.push(Link::new(addr, Some(conn), spec.timeout));
    }
    let start = Instant::now() + Duration::from_millis(20);
    let window_start = start + spec.warmup;
    let end = window_start + spec.duration;
    let cpu = TimedWindow::spawn(&spec.marker, window_start, end);
    let spec = Arc::new(spec.clone());
    let mut outcome = LoadOutcome::default();
    if spec.rate == 0 {
        let next = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = links
            .into_iter()
            .map(|link| {
                let (spec, next, progress) = (spec.clone(), next.clone(), progress.clone());
                tokio::spawn(closed_loop(
                    link,
                    spec,
                    next,
                    progress,
                    start,
                    window_start,
                    end,
                ))
            })
            .collect();
        for t in tasks {
            outcome.merge(t.await?);
        }
        outcome.window.due = None;
    } else {
        let mut senders = Vec::with_capacity(links.len());
        let mut tasks = Vec::with_capacity(links.len());
        for link in links {
            let (tx, rx) = mpsc::channel(CONN_QUEUE);
            senders.push(tx);
            let (spec, progress) = (spec.clone(), progress.clone());
            tasks.push(tokio::spawn(paced_conn(
                link,
                rx,
                spec,
                progress,
                window_start,
                end,
            )));
        }
        let rate = spec.rate as f64;
        let pacer = std::thread::Builder::new()
            .name("kv-bench-pacer".into())
            .spawn(move || pace(senders, Schedule::new(start, rate), window_start, end))?;
        let mut stats = Vec::with_capacity(tasks.len());
        for t in tasks {
            stats.push(t.await?);
        }
        let (due, dropped, mut late) = pacer
            .join()
            .map_err(|_| anyhow::anyhow!("the pacer thread panicked"))?;
        for s in stats {
            late.merge(&s.late);
            outcome.merge(s);
        }
        // Dropped and unsent requests were recorded up to the window's
        // end; the run ends now, and none of them was answered by then.
        let run_end = Instant::now();
        outcome
            .latency
            .merge_shifted(&late, run_end.saturating_duration_since(end));
        outcome.window.due = Some(due);
        if dropped > 0 {
            outcome.errors.insert("dropped_by_client".into(), dropped);
        }
    }
    outcome.window.seconds = spec.duration.as_secs_f64();
    // Every task ends at or after the window's end: this does not wait.
    outcome.cpu_window = cpu.finish();
    Ok(outcome)
}

/// Hands each request to its connection's queue when it falls due; returns
/// (requests due in the window, requests dropped because a queue was full,
/// the latencies of the window's dropped requests up to the window's end).
fn pace(
    senders: Vec<mpsc::Sender<(u64, Instant)>>,
    schedule: Schedule,
    window_start: Instant,
    end: Instant,
) -> (u64, u64, LatencyRecorder) {
    let (mut n, mut due_in_window, mut dropped) = (0u64, 0u64, 0u64);
    let mut late = LatencyRecorder::default();
    let conns = senders.len() as u64;
    let mut woke = Instant::now();
    loop {
        let next = schedule.due(n);
        if next >= end {
            break;
        }
        // Wake at most once per quantum and hand out everything due by
        // then: a wake-up per request would cost the client more CPU than
        // the server spends on it. A request handed out late is still
        // measured from its due time, so this only counts against the server.
        let wake = next.max(woke + PACER_QUANTUM).min(end);
        let now = Instant::now();
        if wake > now {
            std::thread::sleep(wake - now);
        }
        let now = Instant::now();
        woke = now;
        loop {
            let due = schedule.due(n);
            if due > now || due >= end {
                break;
            }
            if due >= window_start {
                due_in_window += 1;
            }
            if senders[(n % conns) as usize].try_send((n, due)).is_err() {
                dropped += 1;
                if due >= window_start {
                    late.record(end.saturating_duration_since(due));
                }
            }
            n += 1;
        }
    }
    (due_in_window, dropped, late)
}

/// One connection of the fixed-rate load.
async fn paced_conn(
    mut link: Link,
    mut rx: mpsc::Receiver<(u64, Instant)>,
    spec: Arc<LoadSpec>,
    progress: Arc<Progress>,
    window_start: Instant,
    end: Instant,
) -> ConnStats {
    let mut stats = ConnStats::default();
    let mut buf = Vec::with_capacity(spec.plan.value_bytes + 256);
    while let Some((n, due)) = rx.recv().await {
        let sent_at = Instant::now();
        if sent_at >= end {
            // Due in time but not sent by the window's end: not sent,
            // counted, and late (its latency runs to the end of the run).
            stats.error("unsent_due");
            progress.errors.fetch_add(1, Ordering::Relaxed);
            if due >= window_start {
                stats.late.record(end.saturating_duration_since(due));
            }
            continue;
        }
        stats.max_send_lag = stats
            .max_send_lag
            .max(sent_at.saturating_duration_since(due));
        let method = spec.plan.write(n, &mut buf);
        let in_window = due >= window_start;
        stats.sent += 1;
        stats.sent_window += u64::from(in_window);
        progress.sent.fetch_add(1, Ordering::Relaxed);
        let answer = link.exchange(&buf).await;
        account(&mut stats, &spec, &progress, method, answer, in_window, due);
    }
    stats
}

/// One connection of the closed loop: the next request as soon as the
/// previous answer arrived; latency from the write.
async fn closed_loop(
    mut link: Link,
    spec: Arc<LoadSpec>,
    next: Arc<AtomicU64>,
    progress: Arc<Progress>,
    start: Instant,
    window_start: Instant,
    end: Instant,
) -> ConnStats {
    let mut stats = ConnStats::default();
    let mut buf = Vec::with_capacity(spec.plan.value_bytes + 256);
    tokio::time::sleep_until(start.into()).await;
    loop {
        let sent_at = Instant::now();
        if sent_at >= end {
            break;
        }
        let n = next.fetch_add(1, Ordering::Relaxed);
        let method = spec.plan.write(n, &mut buf);
        let in_window = sent_at >= window_start;
        stats.sent += 1;
        stats.sent_window += u64::from(in_window);
        progress.sent.fetch_add(1, Ordering::Relaxed);
        let answer = link.exchange(&buf).await;
        account(
            &mut stats, &spec, &progress, method, answer, in_window, sent_at,
        );
    }
    stats
}

/// Counts one answer (or failure) of a request due (or sent) at `from`.
fn account(
    stats: &mut ConnStats,
    spec: &LoadSpec,
    progress: &Progress,
    method: Method,
    answer: Result<u16, &'static str>,
    in_window: bool,
    from: Instant,
) {
    match answer {
        Ok(status) => {
            stats.received += 1;
            progress.received.fetch_add(1, Ordering::Relaxed);
            if in_window {
                stats.latency.record(from.elapsed());
            }
            if status == spec.expect.status(method) {
                stats.delivered_window += u64::from(in_window);
            } else {
                progress.errors.fetch_add(1, Ordering::Relaxed);
                stats.error(&format!("status_{status}"));
            }
        }
        Err(kind) => {
            // Not answered: an error, and a latency up to now, when it was
            // abandoned (for a timeout, at least the timeout).
            progress.errors.fetch_add(1, Ordering::Relaxed);
            stats.error(kind);
            if in_window {
                stats.latency.record(from.elapsed());
            }
        }
    }
}

/// What filling the nodes did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FillOutcome {
    /// Keys written (answered 201).
    pub written: u64,
    /// Keys that failed every attempt.
    pub failed: u64,
    /// Attempts that failed and were made again (a 504 while the engine
    /// compacts under the fill, a dropped connection).
    pub retried: u64,
    /// How long it took, seconds.
    pub seconds: f64,
}

/// Attempts per key when filling: a fill is there to load the data set the
/// measured run reads, so a key that got a 504 (fewer replicas than `ack`
/// in time, e.g. while a node's engine stalls writes under the fill's
/// compactions) is written again rather than left out.
const FILL_ATTEMPTS: u32 = 5;
/// Pause before writing a failed key again.
const FILL_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Writes keys `0..count` once each as fast as the servers answer, over
/// `connections` connections spread over `addrs` (closed loop); a key that
/// fails is tried again, up to [`FILL_ATTEMPTS`] times in all.
pub async fn fill(
    addrs: &[SocketAddr],
    connections: usize,
    plan: &RequestPlan,
    count: u64,
    timeout: Duration,
) -> anyhow::Result<FillOutcome> {
    let t0 = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..connections.max(1) {
        let mut link = Link::new(addrs[i % addrs.len()], None, timeout);
        let (next, plan) = (next.clone(), plan.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed, mut retried) = (0u64, 0u64, 0u64);
            let mut buf = Vec::with_capacity(plan.value_bytes + 256);
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= count {
                    return (ok, failed, retried);
                }
                plan.write(n, &mut buf);
                let mut attempt = 1;
                loop {
                    if let Ok(201) = link.exchange(&buf).await {
                        ok += 1;
                        break;
                    }
                    if attempt == FILL_ATTEMPTS {
                        failed += 1;
                        break;
                    }
                    attempt += 1;
                    retried += 1;
                    tokio::time::sleep(FILL_RETRY_PAUSE).await;
                }
            }
        }));
    }
    let mut out = FillOutcome::default();
    for t in tasks {
        let (ok, failed, retried) = t.await?;
        out.written += ok;
        out.failed += failed;
        out.retried += retried;
    }
    out.seconds = t0.elapsed().as_secs_f64();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::kv::request::Op;

    fn spec(addr: SocketAddr, rate: u64, duration: Duration, timeout: Duration) -> LoadSpec {
        LoadSpec {
            addrs: vec![addr],
            rate,
            connections: 1,
            warmup: Duration::ZERO,
            duration,
            timeout,
            plan: RequestPlan {
                op: Op::Put,
                value_bytes: 16,
                keys: 100,
                offset: 0,
                query: String::new(),
                host: addr.to_string(),
            },
            expect: Expect::KV,
            marker: Marker::default(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_never_sent_by_the_windows_end_are_counted_and_late() {
        // Accepts and never answers: request 0 waits out its 1 s timeout,
        // the rest of the half-second window queues behind it.
        let addr = crate::silent_server::silent_server().await;
        let s = spec(
            addr,
            200,
            Duration::from_millis(500),
            Duration::from_secs(1),
        );
        let o = run(&s, &Progress::start("test")).await.unwrap();
        let due = o.window.due.unwrap();
        assert!((99..=101).contains(&due), "{due}");
        assert_eq!(o.errors["timeout"], 1, "{:?}", o.errors);
        assert_eq!(o.errors["unsent_due"], due - 1, "{:?}", o.errors);
        assert_eq!(o.window.delivered, 0);
        // Every one is in the histogram: the timed-out one up to when it
        // was abandoned, every unsent one from its due time (within the
        // first 0.5 s) to the end of the run (after the 1 s timeout).
        assert_eq!(o.latency.count(), due);
        let l = o.latency.summary_us().unwrap();
        assert!(l.p50 >= 500_000.0 && l.max < 3_000_000.0, "{l:?}");
        assert!(l.max >= 1_000_000.0, "{l:?}");
    }

    /// An HTTP/1.1 server answering `201` to every request, except that
    /// it closes the connection on the `close_on`-th request (counted
    /// from 1 over all connections) and never answers the `hold`-th.
    async fn one_unanswered(close_on: usize, hold: usize) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(AtomicU64::new(0));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        // One request: a head, then its Content-Length body.
                        let mut headers = [httparse::EMPTY_HEADER; 16];
                        let mut req = httparse::Request::new(&mut headers);
                        let parsed = req.parse(&buf).unwrap();
                        let httparse::Status::Complete(head) = parsed else {
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                            continue;
                        };
                        let body: usize = req
                            .headers
                            .iter()
                            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                            .map_or(0, |h| {
                                std::str::from_utf8(h.value).unwrap().parse().unwrap()
                            });
                        while buf.len() < head + body {
                            match s.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        buf.drain(..head + body);
                        let n = seen.fetch_add(1, Ordering::SeqCst) as usize + 1;
                        if n == close_on {
                            return;
                        }
                        if n == hold {
                            // Read on (the client gives up and closes),
                            // never answer.
                            while s.read(&mut chunk).await.unwrap_or(0) > 0 {}
                            return;
                        }
                        let ok = b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    /// The fix for the understated tail: a request that timed out was
    /// counted as an error but its latency never recorded, so the max (and
    /// p99) showed only the answered ones. Requests are 250 ms apart, so
    /// none queues behind the unanswered one: without its own latency,
    /// the max would be a round trip of about a millisecond.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_timed_out_or_failed_request_is_an_error_and_a_latency() {
        let addr = one_unanswered(2, 4).await;
        let timeout = Duration::from_millis(150);
        // Due at 0, 250, 500, 750, 1000 ms.
        let s = spec(addr, 4, Duration::from_millis(1250), timeout);
        let o = run(&s, &Progress::start("test")).await.unwrap();
        assert_eq!(o.window.due, Some(5));
        assert_eq!(o.errors["connection"], 1, "{:?}", o.errors);
        assert_eq!(o.errors["timeout"], 1, "{:?}", o.errors);
        assert_eq!(o.errors.len(), 2, "{:?}", o.errors);
        assert_eq!(o.window.delivered, 3);
        // Every request of the window has a latency, the unanswered ones
        // too; the timed-out one's is at least the timeout.
        let l = o.latency.summary_us().unwrap();
        assert!(l.max >= 150_000.0, "{l:?}");
        assert!(l.max < 1_000_000.0, "{l:?}");
        assert_eq!(o.latency.count(), 5);
    }

    #[test]
    fn requests_dropped_on_a_full_queue_are_recorded_late() {
        // One connection whose queue nobody reads: past CONN_QUEUE
        // requests, every due one is dropped.
        let (tx, _rx) = mpsc::channel(CONN_QUEUE);
        let start = Instant::now();
        let end = start + Duration::from_millis(20);
        let (due, dropped, late) = pace(vec![tx], Schedule::new(start, 1e6), start, end);
        assert!(due > CONN_QUEUE as u64, "{due}");
        assert_eq!(dropped, due - CONN_QUEUE as u64);
        assert_eq!(late.count(), dropped);
        assert!(late.summary_us().unwrap().max <= 20_000.0);
    }
}
