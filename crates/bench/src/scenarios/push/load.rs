//! The seed-001 load against one server: `users` sessions connect, then
//! all subscribe at once (the subscribe storm: each sends one `subscribe`
//! with its `subs` topics and waits for the ack), then publishers send
//! `rounds` passes over every topic at `publish_rate`, each payload
//! stamped with the time it was due; every subscriber records each
//! message's delivery latency (now − stamp) until it received everything
//! it subscribed to, or the drain deadline passes.
//!
//! Publishers are Socket.IO websocket clients (`/ws` clients under
//! `--transport ws`) whatever the subscribers' transport, so the
//! subscribers' transport is the one measured. Publishing starts once
//! every subscription is acknowledged, so the expected deliveries are
//! exact: each user receives `rounds × subs` messages, and any shortfall
//! is reported as lost — and recorded in the latency histogram, late, not
//! missing: each lost delivery with the time from when publishing ended
//! (after every due time) to the end of the run, and never less than the
//! drain (lost means not delivered within the drain after the last
//! publish; a dead session's deliveries never come). Which publish a user
//! missed is not known, so that is a lower bound of its latency; leaving
//! it out would drop exactly the worst deliveries from the tail.
//!
//! The samplers are read when publishing starts and again shortly (at
//! most [`END_MARK_EVERY`]) after each newest delivery, so that the CPU
//! figures cover the delivery window, first publish to last delivery.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, watch, Notify, Semaphore};

use super::session::ClientSession;
use super::stamp::{self, Delivered};
use super::wsclient::{WsMessage, WsReader, WsWriter};
use super::Transport;
use crate::latency::LatencyRecorder;
use crate::pacer::Schedule;
use crate::sampler::{CpuWindow, Mark, Marker};
use crate::Progress;

/// Sessions being opened at once (a storm of SYNs beyond the accept
/// backlog only measures retransmission timers).
pub const CONNECT_CONCURRENCY: usize = 256;
/// Longest a session may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest the subscribe storm may take before the run is abandoned.
pub const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(120);
/// Messages a publisher writes in one go at most.
const PUBLISH_BATCH: u64 = 1024;
/// How often the samplers are read while deliveries go on: the delivery
/// window's end is marked at most this long after the last delivery.
pub const END_MARK_EVERY: Duration = Duration::from_millis(50);

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Subscriber sessions.
    pub users: usize,
    /// Distinct topics per user.
    pub subs: usize,
    /// Topic pool.
    pub topics: usize,
    /// Payload size.
    pub msg_bytes: usize,
    /// Passes of the publishers over every topic.
    pub rounds: u64,
    /// Subscribers' transport.
    pub transport: Transport,
    /// Publishes per second over all publishers (0: as fast as writes go).
    pub publish_rate: f64,
    /// Publisher connections.
    pub publishers: usize,
    /// How long subscribers may still receive after the last publish.
    pub drain: Duration,
    /// Seed of the users' topic choice (same load for every server).
    pub seed: u64,
    /// Publishers connect here instead of to the subscribers' server (two
    /// nodes of a cluster: cross-node delivery).
    pub publish_to: Option<SocketAddr>,
}

impl Plan {
    /// Messages each user receives: every publish of each of its topics.
    pub fn per_user(&self) -> u64 {
        self.rounds * self.subs as u64
    }

    /// Publishes over the whole run.
    pub fn publishes(&self) -> u64 {
        self.rounds * self.topics as u64
    }
}

/// What one run against one server measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Seconds until every session was open.
    pub connect_s: f64,
    /// Seconds from the storm's start to the last subscribe ack.
    pub subscribe_s: f64,
    /// Sessions that opened.
    pub sessions: usize,
    /// Messages published.
    pub published: u64,
    /// Messages delivered to subscribers.
    pub delivered: u64,
    /// Messages that should have been delivered.
    pub expected: u64,
    /// From the first publish to the last delivery, seconds.
    pub window_s: f64,
    /// Bytes the subscribers read from their sockets.
    pub wire_bytes: u64,
    /// Delivery latency.
    pub latency: LatencyRecorder,
    /// Errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// The delivery window as marked on the samplers (`None`: nothing was
    /// delivered).
    pub cpu_window: Option<CpuWindow>,
}

/// A small deterministic generator (splitmix64) for the topic choice.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// User `u`'s topics: `subs` distinct ones out of `topics`.
pub fn topics_of(u: usize, plan: &Plan) -> Vec<String> {
    let mut rng = Rng(plan.seed ^ (u as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let subs = plan.subs.min(plan.topics);
    let picked: Vec<usize> = if subs * 2 > plan.topics {
        // Dense: shuffle the pool and take a prefix.
        let mut all: Vec<usize> = (0..plan.topics).collect();
        for i in (1..all.len()).rev() {
            all.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        all.truncate(subs);
        all
    } else {
        let mut seen = HashSet::with_capacity(subs);
        let mut v = Vec::with_capacity(subs);
        while v.len() < subs {
            let t = (rng.next() % plan.topics as u64) as usize;
            if seen.insert(t) {
                v.push(t);
            }
        }
        v
    };
    picked.into_iter().map(stamp::topic).collect()
}

/// Shared between the run and its user tasks.
struct Shared {
    connected: AtomicUsize,
    subscribed: AtomicUsize,
    changed: Notify,
    /// Latest subscribe ack, µs on the stamp clock.
    last_ack_us: AtomicU64,
    /// Latest delivery, µs on the stamp clock.
    last_delivery_us: AtomicU64,
    progress: Arc<Progress>,
}

#[derive(Default)]
struct UserResult {
    opened: bool,
    received: u64,
    wire_bytes: u64,
    latency: LatencyRecorder,
    error: Option<&'static str>,
    refused: bool,
}

async fn user(
    u: usize,
    server: SocketAddr,
    plan: Arc<Plan>,
    sh: Arc<Shared>,
    permits: Arc<Semaphore>,
    mut go: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) -> UserResult {
    let mut r = UserResult::default();
    let topics = topics_of(u, &plan);
    let permit = permits.acquire().await;
    let opened = tokio::time::timeout(
        CONNECT_TIMEOUT,
        ClientSession::open(plan.transport, server, u),
    )
    .await;
    drop(permit);
    let mut s = match opened {
        Ok(Ok(s)) => s,
        Ok(Err(_)) | Err(_) => {
            r.error = Some("connect");
            sh.connected.fetch_add(1, Ordering::AcqRel);
            sh.subscribed.fetch_add(1, Ordering::AcqRel);
            sh.changed.notify_one();
            return r;
        }
    };
    r.opened = true;
    sh.connected.fetch_add(1, Ordering::AcqRel);
    sh.changed.notify_one();
    if go.wait_for(|g| *g).await.is_err() {
        return r;
    }
    let request = match plan.transport {
        Transport::Ws => stamp::ws_subscribe(&topics),
        _ => stamp::socketio_subscribe(&topics),
    };
    let classify = match plan.transport {
        Transport::Ws => stamp::classify_ws,
        _ => stamp::classify_socketio,
    };
    let expected = plan.per_user();
    let mut acked = false;
    let mut received = 0u64;
    let mut latency = LatencyRecorder::default();
    let mut refused = false;
    let result: std::io::Result<()> = async {
        s.send(&request).await?;
        while received < expected {
            let was_acked = acked;
            let before = received;
            let mut on_packet = |p: &[u8]| match classify(p) {
                Delivered::Message => {
                    let now = stamp::now_us();
                    if let Some(t) = stamp::read_stamp(p) {
                        latency.record_ns(now.saturating_sub(t) * 1000);
                    }
                    received += 1;
                }
                Delivered::SubscribeAck { refused: any } => {
                    acked = true;
                    refused |= any;
                }
                Delivered::Other => {}
            };
            let open = tokio::select! {
                r = s.recv(&mut on_packet) => r?,
                _ = stop.wait_for(|s| *s) => break,
            };
            if !was_acked && acked {
                sh.last_ack_us.fetch_max(stamp::now_us(), Ordering::AcqRel);
                sh.subscribed.fetch_add(1, Ordering::AcqRel);
                sh.changed.notify_one();
            }
            if received > before {
                sh.progress
                    .received
                    .fetch_add(received - before, Ordering::Relaxed);
                sh.last_delivery_us
                    .fetch_max(stamp::now_us(), Ordering::AcqRel);
            }
            if !open {
                return Err(std::io::ErrorKind::ConnectionAborted.into());
            }
            s.answer().await?;
        }
        Ok(())
    }
    .await;
    if !acked {
        // Counted as done with the storm so the run does not wait for it.
        sh.subscribed.fetch_add(1, Ordering::AcqRel);
        sh.changed.notify_one();
    }
    if result.is_err() {
        r.error = Some(if acked { "session" } else { "subscribe" });
    }
    r.received = received;
    r.latency = latency;
    r.refused = refused;
    r.wire_bytes = s.bytes_read();
    r
}

/// Topic indices of publisher `p` of `n`.
fn publisher_topics(p: usize, n: usize, topics: usize) -> Vec<usize> {
    (p..topics).step_by(n).collect()
}

/// A publisher's connection, kept open after its last publish until the
/// run ends: closing it with the server's replies unread would reset the
/// connection and lose publishes the server had not read yet.
pub struct PublisherHold {
    _writer: WsWriter,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for PublisherHold {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Drains what the server sends a publisher (publish replies, pings) and
/// asks the writer for the answers pings need.
async fn drain_publisher(mut rd: WsReader, engine_io: bool, answers: mpsc::Sender<(u8, Bytes)>) {
    loop {
        match rd.next_message().await {
            Ok(WsMessage::Text(t)) if engine_io && &t[..] == b"2" => {
                let _ = answers.try_send((0x1, Bytes::from_static(b"3")));
            }
            Ok(WsMessage::Close) | Err(_) => return,
            Ok(_) => {}
        }
        for p in rd.take_pings() {
            let _ = answers.try_send((0xA, p));
        }
    }
}

async fn publisher(
    s: ClientSession,
    mine: Vec<usize>,
    plan: Arc<Plan>,
    start: Instant,
    start_us: u64,
    progress: Arc<Progress>,
) -> std::io::Result<(u64, PublisherHold)> {
    let (rd, mut wr) = s
        .into_ws_halves()
        .ok_or_else(|| std::io::Error::other("publishers use websockets"))?;
    let (answers_tx, mut answers) = mpsc::channel(64);
    let engine_io = plan.transport.publisher() == Transport::Websocket;
    let reader = tokio::spawn(drain_publisher(rd, engine_io, answers_tx));
    let total = plan.rounds * mine.len() as u64;
    let rate = plan.publish_rate / plan.publishers as f64;
    let sched = (rate > 0.0).then(|| Schedule::new(start, rate));
    let names: Vec<String> = mine.iter().map(|&t| stamp::topic(t)).collect();
    let mut k = 0u64;
    let mut out = Vec::new();
    while k < total {
        let due_n = match &sched {
            Some(sc) => sc.due_by(Instant::now()).min(total),
            None => total,
        };
        if due_n <= k {
            let next = sched
                .as_ref()
                .map(|sc| sc.due(k))
                .unwrap_or_else(Instant::now);
            tokio::time::sleep_until(next.into()).await;
            continue;
        }
        let end = due_n.min(k + PUBLISH_BATCH);
        out.clear();
        while let Ok((opcode, p)) = answers.try_recv() {
            wr.encode_frame(opcode, &p, &mut out);
        }
        for j in k..end {
            let due_us = match &sched {
                Some(sc) => start_us + (sc.due(j) - start).as_micros() as u64,
                None => stamp::now_us(),
            };
            let topic = &names[(j % names.len() as u64) as usize];
            let payload = stamp::payload(due_us, plan.msg_bytes);
            let text = match plan.transport {
                Transport::Ws => stamp::ws_publish(topic, &payload),
                _ => stamp::socketio_publish(topic, &payload),
            };
            wr.encode_frame(0x1, text.as_bytes(), &mut out);
        }
        wr.send_raw(&out).await?;
        progress.sent.fetch_add(end - k, Ordering::Relaxed);
        k = end;
    }
    Ok((
        k,
        PublisherHold {
            _writer: wr,
            reader,
        },
    ))
}

/// Reads `marker`'s samplers whenever a delivery came since the last
/// look, every [`END_MARK_EVERY`], and once more when `stop` is set;
/// returns the last mark: the first one taken after the last delivery.
async fn mark_deliveries(
    marker: Marker,
    sh: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) -> Option<Mark> {
    let (mut seen, mut mark) = (0, None);
    loop {
        let stopped = tokio::select! {
            _ = tokio::time::sleep(END_MARK_EVERY) => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        let last = sh.last_delivery_us.load(Ordering::Acquire);
        if last != seen {
            seen = last;
            mark = Some(marker.mark());
        }
        if stopped {
            return mark;
        }
    }
}

/// Records `lost` deliveries that never came, each with the time from
/// `published_by_us` (when every publish had been made: after every due
/// time) to `end_us` (the end of the run), on the stamp clock, and at
/// least `drain`: a lower bound of each one's latency.
fn record_lost(
    latency: &mut LatencyRecorder,
    lost: u64,
    published_by_us: u64,
    end_us: u64,
    drain: Duration,
) {
    let waited = Duration::from_micros(end_us.saturating_sub(published_by_us));
    latency.record_n(waited.max(drain).max(Duration::from_micros(1)), lost);
}

async fn wait_until(sh: &Shared, what: &AtomicUsize, n: usize, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let notified = sh.changed.notified();
        if what.load(Ordering::Acquire) >= n {
            return true;
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return what.load(Ordering::Acquire) >= n;
        }
    }
}

/// Runs the plan against `server`; `marker` reads the samplers whose CPU
/// is reported (the server's, the client's) over the delivery window.
pub async fn run(
    server: SocketAddr,
    plan: &Plan,
    progress: Arc<Progress>,
    marker: &Marker,
) -> anyhow::Result<Outcome> {
    let plan = Arc::new(plan.clone());
    let mut out = Outcome::default();
    let sh = Arc::new(Shared {
        connected: AtomicUsize::new(0),
        subscribed: AtomicUsize::new(0),
        changed: Notify::new(),
        last_ack_us: AtomicU64::new(0),
        last_delivery_us: AtomicU64::new(0),
        progress: progress.clone(),
    });
    // Publishers first: they are ready before the storm.
    let mut pubs = Vec::new();
    for p in 0..plan.publishers {
        let s = tokio::time::timeout(
            CONNECT_TIMEOUT,
            ClientSession::open(
                plan.transport.publisher(),
                plan.publish_to.unwrap_or(server),
                plan.users + p,
            ),
        )
        .await
        .map_err(|_| anyhow::anyhow!("publisher {p} did not connect within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| anyhow::anyhow!("publisher {p} could not connect: {e}"))?;
        pubs.push(s);
    }
    let permits = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
    let (go_tx, go_rx) = watch::channel(false);
    let (stop_tx, stop_rx) = watch::channel(false);
    let t0 = Instant::now();
    let users: Vec<_> = (0..plan.users)
        .map(|u| {
            tokio::spawn(user(
                u,
                server,
                plan.clone(),
                sh.clone(),
                permits.clone(),
                go_rx.clone(),
                stop_rx.clone(),
            ))
        })
        .collect();
    let all_connected = wait_until(
        &sh,
        &sh.connected,
        plan.users,
        CONNECT_TIMEOUT + Duration::from_secs(plan.users as u64 / 100),
    )
    .await;
    out.connect_s = t0.elapsed().as_secs_f64();
    if !all_connected {
        let _ = stop_tx.send(true);
        anyhow::bail!(
            "only {} of {} sessions opened within the connect timeout",
            sh.connected.load(Ordering::Acquire),
            plan.users
        );
    }
    // The subscribe storm.
    let storm_us = stamp::now_us();
    let _ = go_tx.send(true);
    let all_subscribed = wait_until(&sh, &sh.subscribed, plan.users, SUBSCRIBE_TIMEOUT).await;
    let last_ack = sh.last_ack_us.load(Ordering::Acquire);
    out.subscribe_s = last_ack.saturating_sub(storm_us) as f64 / 1e6;
    if !all_subscribed {
        let _ = stop_tx.send(true);
        anyhow::bail!("the subscribe storm did not end within {SUBSCRIBE_TIMEOUT:?}");
    }
    // Publishing.
    let cpu_from = marker.mark();
    let end_mark = tokio::spawn(mark_deliveries(marker.clone(), sh.clone(), stop_rx.clone()));
    let start = Instant::now();
    let start_us = stamp::now_us();
    let mut pub_tasks = Vec::new();
    for (p, s) in pubs.into_iter().enumerate() {
        let mine = publisher_topics(p, plan.publishers, plan.topics);
        pub_tasks.push(tokio::spawn(publisher(
            s,
            mine,
            plan.clone(),
            start,
            start_us,
            progress.clone(),
        )));
    }
    let schedule_s = if plan.publish_rate > 0.0 {
        plan.publishes() as f64 / plan.publish_rate
    } else {
        0.0
    };
    let pub_deadline =
        start + Duration::from_secs_f64(schedule_s) + plan.drain + Duration::from_secs(30);
    let mut holds = Vec::new();
    for t in pub_tasks {
        match tokio::time::timeout_at(pub_deadline.into(), t).await {
            Ok(Ok(Ok((n, hold)))) => {
                out.published += n;
                holds.push(hold);
            }
            Ok(Ok(Err(_))) => *out.errors.entry("publisher".into()).or_default() += 1,
            Ok(Err(_)) | Err(_) => *out.errors.entry("publisher_stalled".into()).or_default() += 1,
        }
    }
    let published_by_us = stamp::now_us();
    // Subscribers get `drain` after the last publish to receive the rest.
    let drain_deadline = Instant::now() + plan.drain;
    let mut results = Vec::with_capacity(users.len());
    let mut stopped = false;
    for t in users {
        let r = if stopped {
            t.await
        } else {
            let mut t = t;
            match tokio::time::timeout_at(drain_deadline.into(), &mut t).await {
                Ok(r) => r,
                Err(_) => {
                    stopped = true;
                    let _ = stop_tx.send(true);
                    t.await
                }
            }
        };
        results.push(r.unwrap_or_default());
    }
    let end_us = stamp::now_us();
    let _ = stop_tx.send(true);
    drop(holds);
    out.cpu_window = end_mark
        .await
        .ok()
        .flatten()
        .map(|to| CpuWindow { from: cpu_from, to });
    for r in &results {
        out.sessions += usize::from(r.opened);
        out.delivered += r.received;
        out.wire_bytes += r.wire_bytes;
        out.latency.merge(&r.latency);
        if let Some(e) = r.error {
            *out.errors.entry(e.into()).or_default() += 1;
        }
        if r.refused {
            *out.errors.entry("subscribe_refused".into()).or_default() += 1;
        }
    }
    out.expected = plan.per_user() * plan.users as u64;
    let lost = out.expected.saturating_sub(out.delivered);
    if lost > 0 {
        out.errors.insert("lost".into(), lost);
        record_lost(&mut out.latency, lost, published_by_us, end_us, plan.drain);
    }
    let last = sh.last_delivery_us.load(Ordering::Acquire);
    out.window_s = last.saturating_sub(start_us) as f64 / 1e6;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(subs: usize, topics: usize) -> Plan {
        Plan {
            users: 3,
            subs,
            topics,
            msg_bytes: 64,
            rounds: 2,
            transport: Transport::Websocket,
            publish_rate: 0.0,
            publishers: 2,
            drain: Duration::from_secs(1),
            seed: 7,
            publish_to: None,
        }
    }

    #[test]
    fn users_get_distinct_topics_the_same_every_run() {
        for (subs, topics) in [(10, 1000), (90, 100), (100, 100)] {
            let p = plan(subs, topics);
            let a = topics_of(1, &p);
            assert_eq!(a.len(), subs);
            assert_eq!(a.iter().collect::<HashSet<_>>().len(), subs);
            assert_eq!(a, topics_of(1, &p));
            assert_ne!(a, topics_of(2, &p));
        }
        assert_eq!(plan(10, 1000).per_user(), 20);
    }

    /// A delivery that never came was counted as lost but left out of the
    /// histogram, so the tail showed only what arrived. Now each is in it,
    /// at least as late as the drain it was waited for.
    #[test]
    fn lost_deliveries_are_in_the_tail_at_least_as_late_as_the_drain() {
        let mut l = LatencyRecorder::default();
        for _ in 0..97 {
            l.record_ns(2_000_000);
        }
        let drain = Duration::from_secs(10);
        record_lost(&mut l, 3, 5_000_000, 15_000_000, drain);
        assert_eq!(l.count(), 100);
        let s = l.summary_us().unwrap();
        assert!(s.max >= 10_000_000.0 * 0.999, "{s:?}");
        assert!(s.p99 >= 10_000_000.0 * 0.999, "{s:?}");
        assert!(s.p50 < 3_000.0, "{s:?}");
        // Nothing lost: nothing recorded.
        record_lost(&mut l, 0, 5, 5, drain);
        assert_eq!(l.count(), 100);
        // A run that ended at once after publishing (the only users left
        // had died): the drain, never a latency of about 0.
        let mut m = LatencyRecorder::default();
        record_lost(&mut m, 1, 7, 7, Duration::from_secs(2));
        assert!(m.summary_us().unwrap().max >= 2_000_000.0 * 0.999);
    }

    #[test]
    fn publishers_share_every_topic_once() {
        let mut all: Vec<usize> = (0..3).flat_map(|p| publisher_topics(p, 3, 10)).collect();
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }
}
