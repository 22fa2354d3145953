//! `tidegate bench echo`: seed 002 (AsyncTCP's `SourcingConnectionApplication`)
//! over the wire protocol's ECHO frame.
//!
//! One connection; a sender thread writes ECHO frames at a fixed rate, open
//! model: frame `n` carries its *scheduled* send time `start + n / rate`, and
//! every wake-up writes all frames due by then in one write. Every
//! `--respond-every`-th frame asks for a reply; a receiver thread records the
//! round trip of each reply (receive time − scheduled send time) in an
//! HdrHistogram once the first `--warmup` replies have been skipped; an
//! asked reply that never comes (by `DRAIN_TIMEOUT` after the last send, or
//! the server closing) is counted (`missing_replies`) and recorded with its
//! latency from its scheduled send to when the receiver gave up
//! (`tally`). The report is the seed's table ("~one way" = RTT / 2, and
//! round trip) plus the common JSON object.
//!
//! With `--busy-poll` one thread does both (`busy`), as AsyncTCP's client
//! does: it never sleeps, writes what is due and reads what has arrived on
//! a non-blocking socket in one loop. `--cpu N` pins the client thread(s).
//!
//! The measured window is the schedule's span after the warm-up: from the due
//! time of the first message whose reply is measured to one interval after
//! the last message. Within it, the offered rate counts messages due, the
//! sent rate messages written, and the rate messages delivered — the server
//! handles one connection's frames in order, so a reply to message `n`
//! received inside the window confirms every message up to `n`. The
//! server's and client's CPU are read at the window's start and end.

mod tally;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::BytesMut;
use tidegate_wire::codec::encode_echo;
use tidegate_wire::Echo;

use self::tally::{Received, ReplyTally};
use crate::latency::LatencyRecorder;
use crate::report::one_way_round_trip_table;
use crate::sampler::{CpuWindow, Marker, TimedWindow};
use crate::{CommonArgs, Progress, Report, Sampler, Schedule, Target, Window};

/// How long the receiver waits for missing replies after the last send.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes one sender write carries (a sender that fell behind catches up
/// in writes of this size).
const MAX_WRITE: usize = 256 * 1024;

/// Parameters of the echo scenario (seed 002's names).
#[derive(Debug, Clone, clap::Args)]
pub struct EchoArgs {
    /// Messages per second (sendingRatePerSecond).
    #[arg(long, default_value_t = 600_000)]
    pub rate: u64,
    /// Messages to send in all (messagesSent).
    #[arg(long, default_value_t = 12_000_000)]
    pub messages: u64,
    /// Replies skipped before measuring (skippedWarmUpResponses).
    #[arg(long, default_value_t = 60_000)]
    pub warmup: u64,
    /// Ask for a reply to every n-th message (respondOnlyToNthRequest).
    #[arg(long, default_value_t = 100)]
    pub respond_every: u64,
    /// Padding bytes per message, not echoed (extraDataLength).
    #[arg(long, default_value_t = 64)]
    pub extra_bytes: usize,
    /// Sender wake-up period in microseconds: each wake-up writes every
    /// message due by then in one write.
    #[arg(long, default_value_t = 20)]
    pub tick_us: u64,
    /// Busy-poll like AsyncTCP's client: one thread sends when due and reads
    /// replies on a non-blocking socket, never sleeping (costs a core).
    #[arg(long)]
    pub busy_poll: bool,
    /// Pin the client thread(s) to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Also run the same-run anchor: stock `sockperf under-load` (same rate,
    /// reply ratio and message size) against stock `sockperf server`.
    #[arg(long)]
    pub anchor: bool,
    /// Target and output options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs the scenario and prints its report.
pub async fn run(args: &EchoArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rate > 0, "--rate must be positive");
    anyhow::ensure!(args.respond_every > 0, "--respond-every must be positive");
    let target = tokio::task::spawn_blocking({
        let common = args.common.clone();
        move || Target::resolve(&common, "")
    })
    .await??;
    let addr = target.addr(|a| a.wire);
    let params = args.clone();
    let client_sampler = Sampler::start(std::process::id(), Duration::from_secs(1));
    let marker = target.marker().and(&client_sampler.marker());
    let outcome = tokio::task::spawn_blocking(move || {
        if params.busy_poll {
            busy::drive(addr, &params, &marker)
        } else {
            drive(addr, &params, &marker)
        }
    })
    .await?;
    let window = outcome.as_ref().ok().and_then(|o| o.cpu_window);
    let client = client_sampler.finish_over(window);
    let server = tokio::task::spawn_blocking(move || target.finish(window)).await??;
    let outcome = outcome?;
    let anchor = if args.anchor {
        let a = args.clone();
        Some(tokio::task::spawn_blocking(move || anchor::run(&a)).await??)
    } else {
        None
    };

    let mut report = Report::new(
        "echo",
        "message",
        serde_json::json!({
            "rate": args.rate,
            "messages": args.messages,
            "warmup": args.warmup,
            "respond_every": args.respond_every,
            "extra_bytes": args.extra_bytes,
            "tick_us": args.tick_us,
            "busy_poll": args.busy_poll,
            "cpu": args.cpu,
            "target": addr.to_string(),
        }),
    );
    report.sent = outcome.sent;
    report.received = outcome.replies;
    report.set_window(outcome.window);
    report.latency_expected = true;
    report.error(
        "missing_replies",
        outcome.expected_replies.saturating_sub(outcome.replies),
    );
    report.error("server_error", outcome.server_errors);
    report.latency_us = outcome.rtt.summary_us();
    report.server = server;
    report.client = client;
    report.extra = serde_json::json!({
        "measurements": outcome.rtt.count(),
        "late_replies_recorded": outcome.late_replies,
        "expected_replies": outcome.expected_replies,
        "measured_span_ms": outcome.measured_span.as_secs_f64() * 1000.0,
        "send_duration_s": outcome.send_duration.as_secs_f64(),
        "max_send_lag_us": outcome.max_send_lag.as_secs_f64() * 1e6,
        "one_way_us": report.latency_us.map(|l| l.halved()),
        "anchor": anchor.as_ref().map(|a| serde_json::json!({
            "name": "sockperf under-load vs sockperf server",
            "sent_rate": a.sent_rate,
            "one_way_us": a.one_way_us,
            "sent_rate_ratio": report.sent_rate.map(|r| r / a.sent_rate.max(1e-9)),
            "mean_ratio": report.latency_us.map(|l| l.halved().mean / a.one_way_us.mean.max(1e-9)),
        })),
    });

    let human = format!(
        "Scenario: target {addr}, sendingRatePerSecond {}, skippedWarmUpResponses {}, messagesSent {}, {} expected responses with a response rate 1 for {}, extra data {} bytes\n\n\
         Based on {} measurements{}.\n\
         It took {} ms between the first measured message sent and the last received\n\
         {}; worst sender lag behind schedule {:.0} µs\n\n{}",
        args.rate,
        args.warmup,
        args.messages,
        outcome.expected_replies,
        args.respond_every,
        args.extra_bytes,
        outcome.rtt.count(),
        match outcome.late_replies {
            0 => String::new(),
            n => format!(
                " ({n} of them replies that never came, recorded up to when the receiver gave up)"
            ),
        },
        outcome.measured_span.as_millis(),
        window_line(&report),
        outcome.max_send_lag.as_secs_f64() * 1e6,
        match &report.latency_us {
            Some(l) => one_way_round_trip_table(l),
            None => "Results: no reply was measured\n".to_owned(),
        },
    );
    let human = match &anchor {
        Some(a) => format!("{human}\n{}", anchor::comparison(&report, a)),
        None => human,
    };
    report.emit(args.common.json, &human)
}

/// The measured window's rates; an empty window (every message a warm-up
/// one) has none, and says so instead of printing rates of 0.
fn window_line(report: &Report) -> String {
    match (report.offered_rate, report.sent_rate, report.rate) {
        (Some(offered), Some(sent), Some(rate)) => format!(
            "Measured window {:.3} s: offered rate {offered:.0} msg/s, sent rate {sent:.0} msg/s ({:.1}% of offered), \
             rate {rate:.0} msg/s delivered (confirmed by replies)",
            report.duration_s,
            100.0 * sent / offered.max(1e-9),
        ),
        _ => format!(
            "Measured window {:.3} s: empty (--warmup x --respond-every covers every message), rates -",
            report.duration_s
        ),
    }
}

/// What one run measured.
struct Outcome {
    sent: u64,
    expected_replies: u64,
    replies: u64,
    server_errors: u64,
    /// From the start to the last write.
    send_duration: Duration,
    /// From the scheduled send of the first measured message to the last reply.
    measured_span: Duration,
    max_send_lag: Duration,
    /// Round trips, the replies that never came included (late).
    rtt: LatencyRecorder,
    /// Measured replies that never came.
    late_replies: u64,
    /// Counts of the measured window.
    window: Window,
    /// The measured window as marked on the samplers.
    cpu_window: Option<CpuWindow>,
}

/// The measured window of a run, in offsets from the start of the schedule
/// and in message sequence numbers.
#[derive(Debug, Clone, Copy)]
struct EchoWindow {
    /// First measured message: the first whose reply is not a warm-up reply.
    first: u64,
    /// Due time of `first`.
    from: Duration,
    /// One interval after the last message's due time.
    to: Duration,
}

impl EchoWindow {
    /// Marks the window on `marker`'s samplers when it comes, the schedule
    /// starting at `start`.
    fn mark(&self, marker: &Marker, start: Instant) -> TimedWindow {
        TimedWindow::spawn(marker, start + self.from, start + self.to)
    }

    fn of(args: &EchoArgs) -> Self {
        let first = args
            .warmup
            .saturating_mul(args.respond_every)
            .min(args.messages);
        let at = |n: u64| Duration::from_secs_f64(n as f64 / args.rate as f64);
        EchoWindow {
            first,
            from: at(first),
            to: at(args.messages),
        }
    }
}

/// Connects and runs the sender and receiver threads to completion.
fn drive(addr: SocketAddr, args: &EchoArgs, marker: &Marker) -> anyhow::Result<Outcome> {
    let stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    let reader = stream.try_clone()?;
    let progress = Progress::start("echo");
    let sender_done = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let expected_replies = args.messages.div_ceil(args.respond_every);
    let window = EchoWindow::of(args);
    let cpu_window = window.mark(marker, start);

    let receiver = std::thread::Builder::new()
        .name("echo-receiver".into())
        .spawn({
            let (progress, done) = (progress.clone(), sender_done.clone());
            let tally = ReplyTally::new(start, args, window.to);
            let cpu = args.cpu;
            move || {
                pin(cpu);
                receive(reader, tally, expected_replies, &progress, &done)
            }
        })?;
    pin(args.cpu);
    let sent = send(stream, start, args, window.to, &progress);
    sender_done.store(true, Ordering::Release);
    let received = receiver
        .join()
        .map_err(|_| anyhow::anyhow!("receiver thread panicked"))?;
    progress.finish();
    let sent = sent?;
    let r = received?;
    let counts = Window {
        seconds: (window.to - window.from).as_secs_f64(),
        due: Some(args.messages - window.first),
        sent: sent.sent_in_window.saturating_sub(window.first),
        delivered: r.confirmed_in_window.saturating_sub(window.first),
    };
    Ok(Outcome {
        sent: sent.sent,
        expected_replies,
        replies: r.replies,
        server_errors: r.server_errors,
        send_duration: sent.duration,
        measured_span: r.measured_span,
        max_send_lag: sent.max_lag,
        rtt: r.rtt,
        late_replies: r.late,
        window: counts,
        cpu_window: cpu_window.finish(),
    })
}

/// What the sender did.
struct Sent {
    /// Messages written in all.
    sent: u64,
    /// Messages written by the end of the measured window.
    sent_in_window: u64,
    /// From the start to the last write.
    duration: Duration,
    /// Worst lag of a write behind its schedule.
    max_lag: Duration,
}

/// Writes every message when due.
fn send(
    mut s: TcpStream,
    start: Instant,
    args: &EchoArgs,
    window_end: Duration,
    progress: &Progress,
) -> anyhow::Result<Sent> {
    let schedule = Schedule::new(start, args.rate as f64);
    let interval_ns = 1e9 / args.rate as f64;
    let extra = vec![0u8; args.extra_bytes];
    let tick = Duration::from_micros(args.tick_us);
    let mut buf = BytesMut::with_capacity(MAX_WRITE + 1024);
    let mut n = 0u64;
    let mut sent_in_window = 0u64;
    let mut max_lag = Duration::ZERO;
    while n < args.messages {
        let now = Instant::now();
        let due = schedule.due_by(now).min(args.messages);
        if n < due {
            max_lag = max_lag.max(now.saturating_duration_since(schedule.due(n)));
        }
        while n < due {
            while n < due && buf.len() < MAX_WRITE {
                let options = if n.is_multiple_of(args.respond_every) {
                    Echo::RESPOND
                } else {
                    0
                };
                let send_time_ns = (n as f64 * interval_ns) as i64;
                encode_echo(options, send_time_ns, n as i64, &extra, &mut buf)?;
                n += 1;
            }
            // A write that starts inside the window counts in it (so a
            // reply received inside the window is never for a message
            // counted as sent after it).
            if start.elapsed() <= window_end {
                sent_in_window = n;
            }
            s.write_all(&buf).context("sending echo frames")?;
            buf.clear();
        }
        progress.sent.store(n, Ordering::Relaxed);
        if n < args.messages {
            std::thread::sleep(tick);
        }
    }
    Ok(Sent {
        sent: n,
        sent_in_window,
        duration: start.elapsed(),
        max_lag,
    })
}

/// Pins the calling thread when `--cpu` is set (a warning otherwise).
fn pin(cpu: Option<usize>) {
    if let Some(cpu) = cpu {
        if !tidegate_wire::pin::pin_current_thread(cpu) {
            tracing::warn!(cpu, "--cpu: cannot pin the client thread; running unpinned");
        }
    }
}

/// Reads replies until all are in, or `DRAIN_TIMEOUT` after the sender
/// finished.
fn receive(
    mut s: TcpStream,
    mut tally: ReplyTally,
    expected: u64,
    progress: &Progress,
    sender_done: &AtomicBool,
) -> anyhow::Result<Received> {
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut chunk = vec![0u8; 64 * 1024];
    let mut done_at: Option<Instant> = None;
    while tally.replies() < expected {
        let n = match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if sender_done.load(Ordering::Acquire) {
                    let t = *done_at.get_or_insert_with(Instant::now);
                    if t.elapsed() > DRAIN_TIMEOUT {
                        break;
                    }
                }
                continue;
            }
            Err(e) => return Err(e).context("reading echo replies"),
        };
        tally.on_bytes(&chunk[..n])?;
        progress.received.store(tally.replies(), Ordering::Relaxed);
    }
    Ok(tally.finish())
}

/// `--busy-poll`: one thread, never sleeping, sends what is due and reads
/// what arrived on a non-blocking socket (AsyncTCP's client shape).
mod busy {
    use super::*;

    /// How often (loop passes) the shared progress counters are updated.
    const PROGRESS_EVERY: u32 = 4096;

    /// Connects and runs the loop to completion.
    pub(super) fn drive(
        addr: SocketAddr,
        args: &EchoArgs,
        marker: &Marker,
    ) -> anyhow::Result<Outcome> {
        pin(args.cpu);
        let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        let progress = Progress::start("echo");
        let start = Instant::now();
        let expected_replies = args.messages.div_ceil(args.respond_every);
        let window = EchoWindow::of(args);
        let cpu_window = window.mark(marker, start);
        let schedule = Schedule::new(start, args.rate as f64);
        let interval_ns = 1e9 / args.rate as f64;
        let extra = vec![0u8; args.extra_bytes];
        let mut out = BytesMut::with_capacity(MAX_WRITE + 1024);
        let mut out_pos = 0usize;
        let mut chunk = vec![0u8; 64 * 1024];
        let mut tally = ReplyTally::new(start, args, window.to);
        let (mut n, mut sent_in_window) = (0u64, 0u64);
        let mut max_lag = Duration::ZERO;
        let mut send_duration = Duration::ZERO;
        let mut done_at: Option<Instant> = None;
        // The server closed: no reply can come any more.
        let mut closed = false;
        let mut pass = 0u32;
        // Until every message is written and every asked reply is in: the
        // last reply can come before the last (unanswered) messages are due.
        while tally.replies() < expected_replies || n < args.messages || out_pos < out.len() {
            let now = Instant::now();
            // Write what is due (whole frames are queued; the socket may
            // take part of them).
            if n < args.messages && out.len() - out_pos < MAX_WRITE {
                let due = schedule.due_by(now).min(args.messages);
                if n < due {
                    max_lag = max_lag.max(now.saturating_duration_since(schedule.due(n)));
                }
                while n < due && out.len() - out_pos < MAX_WRITE {
                    let options = if n.is_multiple_of(args.respond_every) {
                        Echo::RESPOND
                    } else {
                        0
                    };
                    let send_time_ns = (n as f64 * interval_ns) as i64;
                    encode_echo(options, send_time_ns, n as i64, &extra, &mut out)?;
                    n += 1;
                }
            }
            while out_pos < out.len() {
                match s.write(&out[out_pos..]) {
                    Ok(w) => out_pos += w,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("sending echo frames"),
                }
            }
            if out_pos == out.len() {
                out.clear();
                out_pos = 0;
                // Everything up to `n` has been handed to the socket.
                if start.elapsed() <= window.to {
                    sent_in_window = n;
                }
                if n == args.messages && send_duration.is_zero() {
                    send_duration = start.elapsed();
                }
            }
            // Read what arrived, until the socket would block.
            loop {
                match s.read(&mut chunk) {
                    Ok(0) => {
                        done_at.get_or_insert_with(Instant::now);
                        closed = true;
                        break;
                    }
                    Ok(r) => tally.on_bytes(&chunk[..r])?,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("reading echo replies"),
                }
            }
            if closed {
                if n < args.messages {
                    anyhow::bail!(
                        "the server closed the connection after {n} of {} messages",
                        args.messages
                    );
                }
                // Nothing more can arrive: spinning out the drain timeout
                // would only burn the core.
                break;
            }
            if n == args.messages {
                let t = *done_at.get_or_insert_with(Instant::now);
                if t.elapsed() > DRAIN_TIMEOUT {
                    break;
                }
            }
            pass = pass.wrapping_add(1);
            if pass.is_multiple_of(PROGRESS_EVERY) {
                progress.sent.store(n, Ordering::Relaxed);
                progress.received.store(tally.replies(), Ordering::Relaxed);
            }
        }
        progress.finish();
        if send_duration.is_zero() {
            send_duration = start.elapsed();
        }
        let r = tally.finish();
        let counts = Window {
            seconds: (window.to - window.from).as_secs_f64(),
            due: Some(args.messages - window.first),
            sent: sent_in_window.saturating_sub(window.first),
            delivered: r.confirmed_in_window.saturating_sub(window.first),
        };
        Ok(Outcome {
            sent: n,
            expected_replies,
            replies: r.replies,
            server_errors: r.server_errors,
            send_duration,
            measured_span: r.measured_span,
            max_send_lag: max_lag,
            rtt: r.rtt,
            late_replies: r.late,
            window: counts,
            cpu_window: cpu_window.finish(),
        })
    }
}

/// The same-run anchor: stock `sockperf under-load --tcp` (the seed-002 shape:
/// same rate, one reply in `--respond-every`, 14-byte header plus the same
/// extra bytes) against stock `sockperf server`, both started here and
/// killed on drop.
mod anchor {
    use std::net::TcpListener;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use anyhow::{bail, Context};

    use super::EchoArgs;
    use crate::{LatencySummary, Report};

    /// What stock sockperf reported (sockperf's latency is one-way: RTT / 2).
    pub(super) struct AnchorResult {
        /// Messages sent per second over sockperf's valid duration (its sent
        /// rate; sockperf does not report deliveries).
        pub(super) sent_rate: f64,
        /// One-way latency, µs.
        pub(super) one_way_us: LatencySummary,
    }

    struct KillOnDrop(Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Runs the anchor for as long as the Tidegate run lasted.
    pub(super) fn run(args: &EchoArgs) -> anyhow::Result<AnchorResult> {
        let port = TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port()
            .to_string();
        let server = Command::new("sockperf")
            .args(["server", "--tcp", "-i", "127.0.0.1", "-p", &port])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting `sockperf server` (install it with scripts/setup/wire.sh)")?;
        let _server = KillOnDrop(server);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(format!("127.0.0.1:{port}")).is_err() {
            if Instant::now() > deadline {
                bail!("`sockperf server` did not listen on port {port}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let seconds = args.messages.div_ceil(args.rate).max(2).to_string();
        let size = (14 + args.extra_bytes).to_string();
        let out = Command::new("sockperf")
            .args([
                "under-load",
                "--tcp",
                "-i",
                "127.0.0.1",
                "-p",
                &port,
                "-m",
                &size,
                "-t",
                &seconds,
            ])
            .args([
                "--mps",
                &args.rate.to_string(),
                "--reply-every",
                &args.respond_every.to_string(),
            ])
            .stdin(Stdio::null())
            .output()
            .context("running `sockperf under-load`")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        parse(&text).with_context(|| format!("reading sockperf's output:\n{text}"))
    }

    /// Extracts the valid-duration rate and the percentiles.
    fn parse(text: &str) -> Option<AnchorResult> {
        let field = |line: &str, key: &str| -> Option<f64> {
            let at = line.find(key)? + key.len();
            let v: String = line[at..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            v.parse().ok()
        };
        let valid = text.lines().find(|l| l.contains("[Valid Duration]"))?;
        let runtime = field(valid, "RunTime=")?;
        let sent = field(valid, "SentMessages=")?;
        let pct = |p: &str| {
            text.lines()
                .find(|l| l.contains(&format!("percentile {p} =")))
                .and_then(|l| field(l, "="))
        };
        let max = text.lines().find(|l| l.contains("<MAX> observation"))?;
        let avg = text.lines().find(|l| l.contains("avg-latency="))?;
        Some(AnchorResult {
            sent_rate: sent / runtime.max(1e-9),
            one_way_us: LatencySummary {
                mean: field(avg, "avg-latency=")?,
                p50: pct("50.000")?,
                p90: pct("90.000")?,
                p99: pct("99.000")?,
                p999: pct("99.900")?,
                p9999: pct("99.990")?,
                p99999: pct("99.999")?,
                max: field(max, "=")?,
            },
        })
    }

    /// Tidegate next to the anchor, one-way µs, with ratios.
    pub(super) fn comparison(report: &Report, a: &AnchorResult) -> String {
        let (Some(t), Some(sent_rate)) = (report.latency_us.map(|l| l.halved()), report.sent_rate)
        else {
            return "Anchor (same run): not compared, Tidegate measured no reply\n".into();
        };
        let s = &a.one_way_us;
        let rows = [
            ("sent rate (msg/s)", sent_rate, a.sent_rate),
            ("mean", t.mean, s.mean),
            ("50th percentile", t.p50, s.p50),
            ("99th percentile", t.p99, s.p99),
            ("99.9th percentile", t.p999, s.p999),
            ("99.99th percentile", t.p9999, s.p9999),
            ("99.999th percentile", t.p99999, s.p99999),
            ("worst", t.max, s.max),
        ];
        let mut out = String::from(
            "Anchor (same run): stock sockperf under-load -> sockperf server, one way (µs)\n\
             ------------------------------------------------------------------------------\n\
             \x20                      |      tidegate |  sockperf srv |  tidegate/anchor |\n",
        );
        for (name, t, s) in rows {
            out.push_str(&format!(
                "{name:<23}|{t:>14.0} |{s:>14.0} |{:>17.2} |\n",
                t / s.max(1e-9)
            ));
        }
        out
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn sockperf_output_is_parsed() {
            let text = "sockperf: [Valid Duration] RunTime=3.547 sec; SentMessages=768601; ReceivedMessages=7687\n\
                sockperf: ====> avg-latency=1905.342 (std-dev=3895.059)\n\
                sockperf: ---> <MAX> observation = 32216.264\n\
                sockperf: ---> percentile 99.999 = 32216.264\n\
                sockperf: ---> percentile 99.990 = 32138.930\n\
                sockperf: ---> percentile 99.900 = 31714.887\n\
                sockperf: ---> percentile 99.000 = 22634.841\n\
                sockperf: ---> percentile 90.000 = 4277.799\n\
                sockperf: ---> percentile 50.000 =  784.398\n";
            let a = super::parse(text).unwrap();
            assert!((a.sent_rate - 768601.0 / 3.547).abs() < 1.0);
            assert_eq!(a.one_way_us.p50, 784.398);
            assert_eq!(a.one_way_us.max, 32216.264);
            assert_eq!(a.one_way_us.mean, 1905.342);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidegate_hub::Hub;
    use tidegate_wire::{CancellationToken, ListenerConfig, WireConfig, WireMode, WireServer};

    #[test]
    fn an_empty_window_prints_no_rates() {
        let mut r = Report::new("echo", "message", serde_json::Value::Null);
        r.set_window(Window {
            seconds: 0.0,
            due: Some(0),
            sent: 0,
            delivered: 0,
        });
        let line = window_line(&r);
        assert!(line.contains("empty") && line.contains("rates -"), "{line}");
        assert!(!line.contains("0 msg/s"), "{line}");
        r.set_window(Window {
            seconds: 2.0,
            due: Some(200),
            sent: 100,
            delivered: 50,
        });
        let line = window_line(&r);
        assert!(
            line.contains(
                "offered rate 100 msg/s, sent rate 50 msg/s (50.0% of offered), rate 25 msg/s"
            ),
            "{line}"
        );
    }

    /// A wire echo server that answers every ECHO asking for a reply but
    /// the one for message `skip`, and closes once it has read `messages`
    /// frames.
    fn dropping_server(skip: i64, messages: u64) -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let (mut buf, mut out) = (BytesMut::new(), BytesMut::new());
            let mut chunk = vec![0u8; 64 * 1024];
            let mut seen = 0u64;
            while seen < messages {
                let n = s.read(&mut chunk).unwrap();
                assert!(n > 0, "the client closed first");
                buf.extend_from_slice(&chunk[..n]);
                while let Some(f) = tidegate_wire::codec::decode_frame(&mut buf, 1 << 20).unwrap() {
                    let tidegate_wire::Frame::Echo(e) = f else {
                        continue;
                    };
                    seen += 1;
                    if e.wants_reply() && e.correlation_id != skip {
                        encode_echo(e.options, e.send_time_ns, e.correlation_id, &[], &mut out)
                            .unwrap();
                    }
                }
                s.write_all(&out).unwrap();
                out.clear();
            }
        });
        addr
    }

    /// 4,000 messages at 20,000/s to `addr` (a [`dropping_server`]), one in
    /// ten answered, the first ten answers warm-up.
    fn against_dropping_server(addr: SocketAddr, busy_poll: bool) -> EchoArgs {
        EchoArgs {
            rate: 20_000,
            messages: 4_000,
            warmup: 10,
            respond_every: 10,
            extra_bytes: 16,
            tick_us: 20,
            busy_poll,
            cpu: None,
            anchor: false,
            common: CommonArgs {
                target: Some(addr),
                json: true,
            },
        }
    }

    /// The fix for the understated tail: an asked reply that never came
    /// was counted (`missing_replies`) but not recorded, so the worst
    /// message of the run was missing from the percentiles. The server
    /// here drops one reply, 50 ms into a 200 ms schedule, and closes
    /// after the last message: that message's latency runs to the end of
    /// the schedule at least, while every other round trip is on loopback.
    #[test]
    fn an_asked_reply_that_never_came_is_recorded_late() {
        let addr = dropping_server(1_000, 4_000);
        let args = against_dropping_server(addr, false);
        let o = drive(addr, &args, &Marker::default()).unwrap();
        assert_eq!(o.expected_replies, 400);
        assert_eq!(o.replies, 399);
        assert_eq!(o.late_replies, 1);
        // 390 measured replies (past the 10 warm-up ones), the missing
        // one among them.
        assert_eq!(o.rtt.count(), 390);
        let l = o.rtt.summary_us().unwrap();
        assert!(l.max >= 140_000.0, "{l:?}");
    }

    /// A dropped warm-up reply does not push a measured one into the
    /// warm-up: warm-up is decided by the reply's place in the schedule,
    /// so every measured reply (past the first `warmup`) is recorded.
    #[test]
    fn a_dropped_warmup_reply_leaves_every_measured_one_recorded() {
        let addr = dropping_server(0, 4_000);
        let args = against_dropping_server(addr, false);
        let o = drive(addr, &args, &Marker::default()).unwrap();
        assert_eq!(o.replies, 399);
        // The dropped reply was a warm-up one: nothing measured is late.
        assert_eq!(o.late_replies, 0);
        assert_eq!(o.rtt.count(), 390);
    }

    /// The busy-poll driver stops once the server has closed after the
    /// last message, a reply still missing: nothing more can arrive, so
    /// spinning out the 5 s drain timeout would only burn a core.
    #[test]
    fn the_busy_poll_driver_stops_when_the_server_closed() {
        let addr = dropping_server(1_000, 4_000);
        let args = against_dropping_server(addr, true);
        let started = Instant::now();
        let o = busy::drive(addr, &args, &Marker::default()).unwrap();
        assert_eq!(o.replies, 399);
        assert!(
            started.elapsed() < DRAIN_TIMEOUT,
            "took {:?}",
            started.elapsed()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_driver_gets_every_asked_reply_from_an_in_process_server() {
        check_driver(WireMode::Default, false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_busy_poll_driver_gets_every_asked_reply_from_a_low_latency_server() {
        check_driver(WireMode::LowLatency, true).await;
    }

    async fn check_driver(mode: WireMode, busy_poll: bool) {
        let config = WireConfig {
            listener: ListenerConfig::on("127.0.0.1:0".parse().unwrap()),
            mode,
            ..Default::default()
        };
        let server = WireServer::bind(config).unwrap();
        let addr = server.local_addr();
        let stop = CancellationToken::new();
        tokio::spawn(server.run(Hub::default(), stop.clone()));
        let args = EchoArgs {
            rate: 20_000,
            messages: 4_000,
            warmup: 100,
            respond_every: 10,
            extra_bytes: 64,
            tick_us: 20,
            busy_poll,
            cpu: None,
            anchor: false,
            common: CommonArgs {
                target: Some(addr),
                json: true,
            },
        };
        let o = tokio::task::spawn_blocking(move || {
            if busy_poll {
                busy::drive(addr, &args, &Marker::default())
            } else {
                drive(addr, &args, &Marker::default())
            }
        })
        .await
        .unwrap()
        .unwrap();
        stop.cancel();
        assert_eq!(o.sent, 4_000);
        assert_eq!(o.expected_replies, 400);
        assert_eq!(o.replies, 400);
        assert_eq!(o.rtt.count(), 300);
        assert_eq!(o.server_errors, 0);
        // 100 warm-up replies cover messages 0..1000; the window is the
        // 3,000 messages after them, 0.15 s at 20,000/s.
        assert_eq!(o.window.due, Some(3_000));
        assert!((o.window.seconds - 0.15).abs() < 1e-9, "{:?}", o.window);
        assert!(
            o.window.sent <= 3_000 && o.window.sent > 0,
            "{:?}",
            o.window
        );
        assert!(o.window.delivered <= o.window.sent, "{:?}", o.window);
    }
}
