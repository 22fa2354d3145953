//! `tidegate bench conns`: what connections that send nothing, or too
//! little, cost a listener in memory, and what the server does with them.
//!
//! Opens `--connections` TCP connections (default 10,000) to one listener of
//! a spawned `tidegate serve` (`--listener forward|s2s|wire|http|sockperf`),
//! at most `--connect-concurrency` at a time, spread over the source
//! addresses 127.0.0.1, 127.0.0.2, … so the ephemeral ports last. Each
//! connection, by `--mode`:
//!
//! - `idle`: connects and sends nothing;
//! - `partial`: sends the start of a frame announcing the largest frame the
//!   listener accepts (built with the protocol's own codec, see [`frames`]),
//!   then nothing;
//! - `trickle`: the same start, then one more byte of that frame a second.
//!
//! An S2S connection in `partial` or `trickle` first does the RAW handshake
//! and opens a `SEND_FLOWFILES` transaction; its announced frame is a
//! FlowFile packet.
//!
//! Reported: the server's RSS before, once every connection is open (after
//! `--settle` seconds), its peak while they are held, at the end and after
//! they are closed; the RSS delta divided by the connections asked for
//! (bytes per connection); and over `--duration` seconds, how many were held
//! to the end, refused at connect (the connect failed, or the server closed
//! it within [`CLOSED_AT_ONCE`]: a connection limit), and closed by the
//! server later (its read or idle timeouts), with when. The common report's
//! rate is connections opened per second while opening, its latency the
//! time to open one (connect, handshake, first bytes written); the server's
//! and client's CPU cover the same opening span.
//!
//! Not a throughput test: nothing here carries events.

pub mod frames;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tidegate_s2s::client::{discover, ClientOptions, RawClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{watch, Semaphore};

use self::frames::StalledFrame;
use crate::latency::LatencyRecorder;
use crate::report::{percentile_table, Report, Window};
use crate::sampler::{rss_kb, CpuWindow, Sampler};
use crate::server::{ServerAddrs, ServerUnderTest};
use crate::{CommonArgs, Target};

/// A connection the server closes within this long of its opening was
/// refused (a connection limit), not timed out.
pub const CLOSED_AT_ONCE: Duration = Duration::from_secs(1);
/// File descriptors kept for everything but the connections (the runtime,
/// the sampler, the server's own listeners).
const SPARE_FDS: u64 = 256;
/// How often the server's RSS is sampled while the connections are held.
const RSS_EVERY: Duration = Duration::from_millis(500);
/// How long after closing every connection the server's RSS is read again.
const AFTER_CLOSE: Duration = Duration::from_secs(2);
/// Bytes read at a time while waiting for the server to close (it should
/// send nothing; this only counts what it does send).
const READ_BYTES: usize = 256;

/// Which listener the connections go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Listener {
    /// `[forward]`: Fluentd Forward.
    Forward,
    /// `[s2s]`: NiFi Site-to-Site RAW.
    S2s,
    /// `[wire]`: the framed publish/subscribe/echo protocol.
    Wire,
    /// `[http]`: metrics, status and the S2S HTTP transport.
    Http,
    /// `[sockperf]`: the sockperf-compatible echo.
    Sockperf,
}

/// What each connection sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Connect, send nothing.
    Idle,
    /// Send the start of a frame announcing the largest size, then nothing.
    Partial,
    /// Send that start, then one byte a second.
    Trickle,
}

/// Parameters of the conns scenario.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnsArgs {
    /// Connections to open (N).
    #[arg(long, default_value_t = 10_000)]
    pub connections: usize,
    /// Listener to connect to.
    #[arg(long, value_enum, default_value_t = Listener::Forward)]
    pub listener: Listener,
    /// What each connection sends.
    #[arg(long, value_enum, default_value_t = Mode::Idle)]
    pub mode: Mode,
    /// Seconds to hold the connections once all are open.
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Seconds after the last connection opened before the "after" RSS is
    /// read (part of `--duration`).
    #[arg(long, default_value_t = 2.0)]
    pub settle: f64,
    /// Connections being opened at the same time.
    #[arg(long, default_value_t = 200)]
    pub connect_concurrency: usize,
    /// Longest time to open one connection (connect, handshake, first
    /// bytes), milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub connect_timeout_ms: u64,
    /// Source addresses 127.0.0.1 … 127.0.0.`n` the connections are spread
    /// over (loopback targets only).
    #[arg(long, default_value_t = 16)]
    pub source_addresses: u8,
    /// Size the partial frame announces, bytes (default: the listener's
    /// default maximum).
    #[arg(long)]
    pub announce_bytes: Option<u64>,
    /// Extra TOML for the spawned server (e.g. raising a listener's
    /// `max_connections`).
    #[arg(long)]
    pub server_toml: Option<String>,
    /// Target (`--target` is the listener's address; for `s2s`, the
    /// `[http]` address used for discovery) and output options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Where and what the connections send.
struct Plan {
    addr: SocketAddr,
    listener: Listener,
    mode: Mode,
    frame: Option<StalledFrame>,
    /// The S2S input port to open transactions on.
    s2s_port_id: Option<String>,
    sources: Vec<IpAddr>,
    connect_timeout: Duration,
    /// Longer than the whole run: the S2S client's read timeout must not end
    /// a held connection.
    s2s_read_timeout: Duration,
}

impl Plan {
    fn source(&self, i: usize) -> Option<IpAddr> {
        (!self.sources.is_empty()).then(|| self.sources[i % self.sources.len()])
    }
}

/// Counters the connections bump and the hold loop reads.
#[derive(Debug, Default)]
struct Live {
    attempted: AtomicU64,
    opened: AtomicU64,
    closed: AtomicU64,
}

/// One open connection.
enum Session {
    Plain(TcpStream),
    S2s(Box<RawClient<TcpStream>>),
}

impl Session {
    /// Waits until the server closes the connection and says how; counts
    /// what the server sent meanwhile (bytes, or S2S responses).
    async fn closed(&mut self, from_server: &mut u64) -> String {
        match self {
            Session::Plain(s) => {
                let mut buf = [0u8; READ_BYTES];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) => return "eof".into(),
                        Ok(n) => *from_server += n as u64,
                        Err(e) => return io_kind(&e),
                    }
                }
            }
            Session::S2s(c) => loop {
                match c.read_response().await {
                    Ok(_) => *from_server += 1,
                    Err(e) => return e.kind().to_owned(),
                }
            },
        }
    }

    /// Writes `bytes`.
    async fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        match self {
            Session::Plain(s) => Ok(s.write_all(bytes).await?),
            Session::S2s(c) => {
                c.write_raw(bytes);
                Ok(c.flush().await?)
            }
        }
    }
}

/// What became of one connection.
#[derive(Debug, Clone)]
enum Fate {
    /// Never opened: why.
    NotOpened(String),
    /// Open until the end of the hold.
    Held,
    /// Closed by the server this long after it opened, and how it showed.
    Closed { after: Duration, how: String },
}

/// One connection's record.
#[derive(Debug, Clone)]
struct ConnRecord {
    open_time: Option<Duration>,
    fate: Fate,
    from_server: u64,
    trickled: u64,
}

/// Runs the scenario and prints its report.
pub async fn run(args: &ConnsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(
        args.connect_concurrency > 0,
        "--connect-concurrency must be at least 1"
    );
    anyhow::ensure!(
        args.duration > 0.0 && args.settle >= 0.0,
        "--duration must be positive and --settle not negative"
    );
    let nofile = raise_nofile_limit(args.connections as u64 + SPARE_FDS)?;

    // Spawned (inheriting the raised limit) or external.
    let target = match args.common.target {
        Some(a) => Target::External(a),
        None => {
            let extra = args.server_toml.clone().unwrap_or_default();
            let s = tokio::task::spawn_blocking(move || {
                ServerUnderTest::spawn_with_log(&extra, "error")
            })
            .await??;
            Target::Spawned(Box::new(s))
        }
    };
    let pid = match &target {
        Target::Spawned(s) => Some(s.pid()),
        Target::External(_) => None,
    };
    let plan = Arc::new(plan(args, &target).await?);
    let client_sampler = Sampler::start_self(Duration::from_secs(1));
    let marker = target.marker().and(&client_sampler.marker());

    // Let the server's start-up settle, then the baseline.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = pid.and_then(rss_kb);

    let live = Arc::new(Live::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let opening = Arc::new(Semaphore::new(args.connect_concurrency));
    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let open_mark = marker.mark();
    let open_start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..args.connections {
        tasks.spawn(connection(
            i,
            plan.clone(),
            live.clone(),
            opening.clone(),
            opened_tx.clone(),
            stop_rx.clone(),
        ));
    }
    drop(opened_tx);
    // Every attempt ends (each is bounded by the connect timeout).
    let mut attempts_done = 0usize;
    while attempts_done < args.connections && opened_rx.recv().await.is_some() {
        attempts_done += 1;
    }
    let open_end = Instant::now();
    // The window the rate covers: the opening, as marked around it.
    let cpu_window = Some(CpuWindow {
        from: open_mark,
        to: marker.mark(),
    });
    let hold_end = open_end + Duration::from_secs_f64(args.duration);
    let settle_end = open_end + Duration::from_secs_f64(args.settle.min(args.duration));

    tokio::time::sleep_until(settle_end.into()).await;
    let rss_after_open = pid.and_then(rss_kb);
    let mut rss_peak = rss_after_open;
    let mut held_min = live_now(&live);
    while Instant::now() < hold_end {
        tokio::time::sleep_until((Instant::now() + RSS_EVERY).min(hold_end).into()).await;
        let r = pid.and_then(rss_kb);
        rss_peak = rss_peak.max(r);
        held_min = held_min.min(live_now(&live));
    }
    let rss_hold_end = pid.and_then(rss_kb);
    let held_at_end = live_now(&live);

    // Stop holding; every connection is dropped by its task.
    let _ = stop_tx.send(true);
    let mut records = Vec::with_capacity(args.connections);
    let collect = async {
        while let Some(r) = tasks.join_next().await {
            records.push(r.context("connection task")?);
        }
        anyhow::Ok(())
    };
    if tokio::time::timeout(Duration::from_secs(30), collect)
        .await
        .is_err()
    {
        bail!("connections did not stop within 30 s of the end of the hold");
    }
    tokio::time::sleep(AFTER_CLOSE).await;
    let rss_after_close = pid.and_then(rss_kb);
    let client = client_sampler.finish_over(cpu_window);
    let server = tokio::task::spawn_blocking(move || target.finish(cpu_window)).await??;

    let summary = Summary::of(&records);
    let rss = RssFigures {
        before_kb: rss_before,
        after_open_kb: rss_after_open,
        peak_while_held_kb: rss_peak,
        hold_end_kb: rss_hold_end,
        after_close_kb: rss_after_close,
    };
    if pid.is_some() && (rss.before_kb.is_none() || rss.after_open_kb.is_none()) {
        bail!("could not read the server's RSS from /proc (did it exit?)");
    }
    let per_conn = rss.per_connection_bytes(args.connections as u64);
    let per_held = rss.per_connection_bytes(summary.opened.saturating_sub(summary.closed_at_once));

    let mut report = Report::new(
        "conns",
        "connection",
        serde_json::json!({
            "connections": args.connections,
            "listener": args.listener,
            "mode": args.mode,
            "duration": args.duration,
            "settle": args.settle,
            "connect_concurrency": args.connect_concurrency,
            "connect_timeout_ms": args.connect_timeout_ms,
            "source_addresses": plan.sources.len(),
            "announce_bytes": plan.frame.as_ref().map(|f| f.announced),
            "target": plan.addr.to_string(),
            "nofile_limit": nofile,
        }),
    );
    report.sent = live.attempted.load(Ordering::Relaxed);
    report.received = summary.opened;
    report.set_window(Window {
        seconds: open_end.duration_since(open_start).as_secs_f64(),
        due: None,
        sent: report.sent,
        delivered: summary.opened,
    });
    report.latency_us = summary.open_latency.summary_us();
    report.latency_expected = true;
    for (kind, n) in &summary.refused {
        report.error(&format!("refused_{kind}"), *n);
    }
    report.server = server;
    report.client = client;
    report.extra = serde_json::json!({
        "held_to_the_end": summary.held,
        "held_at_end_of_hold": held_at_end,
        "held_min_while_holding": held_min,
        "refused_at_connect": summary.refused_total(),
        "refused": summary.refused,
        "closed_at_once": summary.closed_at_once,
        "closed_by_server": summary.closed_later,
        "closed_by_server_how": summary.closed_how,
        "closed_after_s": summary.closed_after_s(),
        "server_sent": summary.from_server,
        "trickled_bytes": summary.trickled,
        "head_bytes": plan.frame.as_ref().map(|f| f.head.len()),
        "rss_kb": rss,
        "rss_delta_kb": rss.delta_kb(),
        "rss_per_connection_bytes": per_conn,
        "rss_per_held_connection_bytes": per_held,
    });
    let human = human(args, &plan, &summary, &rss, per_conn, per_held);
    report.emit(args.common.json, &human)
}

/// Resolves the address, the partial frame and the source addresses.
async fn plan(args: &ConnsArgs, target: &Target) -> anyhow::Result<Plan> {
    let connect_timeout = Duration::from_millis(args.connect_timeout_ms);
    let pick = |a: &ServerAddrs| match args.listener {
        Listener::Forward => a.forward,
        Listener::S2s => a.http,
        Listener::Wire => a.wire,
        Listener::Http => a.http,
        Listener::Sockperf => a.sockperf,
    };
    let mut addr = target.addr(pick);
    let mut s2s_port_id = None;
    if args.listener == Listener::S2s {
        // `addr` is the [http] listener: discovery names the RAW port and
        // the input port's id, as the stock client finds them.
        let d = discover(addr, connect_timeout)
            .await
            .context("S2S discovery")?;
        let raw = d
            .raw_port
            .context("the server advertises no S2S RAW port")?;
        s2s_port_id = d.input_ports.first().map(|(_, id)| id.clone());
        addr = SocketAddr::new(addr.ip(), raw);
    }
    let announce = |default: u64| args.announce_bytes.unwrap_or(default);
    let frame = match (args.mode, args.listener) {
        (Mode::Idle, _) => None,
        (_, Listener::Wire) => Some(frames::wire(announce(
            tidegate_wire::config::DEFAULT_MAX_FRAME as u64,
        ) as usize)?),
        (_, Listener::Forward) => Some(frames::forward(announce(
            tidegate_forward::config::DEFAULT_MAX_CHUNK_BYTES as u64,
        ) as usize)?),
        (_, Listener::S2s) => {
            anyhow::ensure!(
                s2s_port_id.is_some(),
                "the server has no S2S input port to open a transaction on"
            );
            Some(frames::s2s(announce(
                tidegate_s2s::config::DEFAULT_MAX_CONTENT_BYTES,
            )))
        }
        (_, Listener::Sockperf) => Some(frames::sockperf(announce(
            tidegate_wire::config::DEFAULT_SOCKPERF_MAX_MESSAGE as u64,
        ) as usize)?),
        (_, Listener::Http) => {
            if args.announce_bytes.is_some() {
                bail!("--announce-bytes does not apply to http (it announces a 1 TiB body)");
            }
            Some(frames::http(&addr.to_string(), "input"))
        }
    };
    let sources = match addr.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => (1..=args.source_addresses.max(1))
            .map(|x| IpAddr::V4(Ipv4Addr::new(127, 0, 0, x)))
            .collect(),
        _ => Vec::new(),
    };
    Ok(Plan {
        addr,
        listener: args.listener,
        mode: args.mode,
        frame,
        s2s_port_id,
        sources,
        connect_timeout,
        s2s_read_timeout: Duration::from_secs_f64(args.duration)
            + connect_timeout
            + Duration::from_secs(3600),
    })
}

/// Opens connection `i`, holds it until `stop` (or until the server closes
/// it) and says what became of it.
async fn connection(
    i: usize,
    plan: Arc<Plan>,
    live: Arc<Live>,
    opening: Arc<Semaphore>,
    opened: tokio::sync::mpsc::UnboundedSender<()>,
    mut stop: watch::Receiver<bool>,
) -> ConnRecord {
    let permit = opening.acquire().await.expect("never closed");
    live.attempted.fetch_add(1, Ordering::Relaxed);
    let t0 = Instant::now();
    let result = tokio::time::timeout(plan.connect_timeout, open(&plan, i)).await;
    drop(permit);
    let _ = opened.send(());
    let mut session = match result {
        Ok(Ok(s)) => s,
        Ok(Err(kind)) => return not_opened(kind),
        Err(_) => return not_opened("timeout".into()),
    };
    let opened_at = Instant::now();
    live.opened.fetch_add(1, Ordering::Relaxed);
    let mut rec = ConnRecord {
        open_time: Some(opened_at - t0),
        fate: Fate::Held,
        from_server: 0,
        trickled: 0,
    };
    let tail = match (plan.mode, &plan.frame) {
        (Mode::Trickle, Some(f)) => f.tail.clone(),
        _ => bytes::Bytes::new(),
    };
    loop {
        let next_byte = (rec.trickled < tail.len() as u64)
            .then(|| opened_at + Duration::from_secs(rec.trickled + 1));
        let wait = async {
            match next_byte {
                Some(t) => tokio::time::timeout_at(t.into(), session.closed(&mut rec.from_server))
                    .await
                    .ok(),
                None => Some(session.closed(&mut rec.from_server).await),
            }
        };
        let closed = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            c = wait => c,
        };
        let how = match closed {
            Some(how) => how,
            None => {
                let k = rec.trickled as usize;
                match session.send(&tail[k..k + 1]).await {
                    Ok(()) => {
                        rec.trickled += 1;
                        continue;
                    }
                    Err(e) => format!("write_{}", error_kind(&e)),
                }
            }
        };
        rec.fate = Fate::Closed {
            after: opened_at.elapsed(),
            how,
        };
        live.closed.fetch_add(1, Ordering::Relaxed);
        break;
    }
    rec
}

fn not_opened(kind: String) -> ConnRecord {
    ConnRecord {
        open_time: None,
        fate: Fate::NotOpened(kind),
        from_server: 0,
        trickled: 0,
    }
}

/// Connects from connection `i`'s source address and sends what its mode
/// sends first; the error is a short kind.
async fn open(plan: &Plan, i: usize) -> Result<Session, String> {
    let socket = match plan.addr {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(|e| io_kind(&e))?;
    if let Some(src) = plan.source(i) {
        bind_address_no_port(&socket);
        socket
            .bind(SocketAddr::new(src, 0))
            .map_err(|e| format!("bind_{}", io_kind(&e)))?;
    }
    let stream = socket.connect(plan.addr).await.map_err(|e| io_kind(&e))?;
    stream.set_nodelay(true).map_err(|e| io_kind(&e))?;
    let Some(frame) = &plan.frame else {
        return Ok(Session::Plain(stream));
    };
    if plan.listener == Listener::S2s {
        let opts = ClientOptions {
            gzip: false,
            timeout: plan.s2s_read_timeout,
            batch_count: None,
        };
        let mut c = RawClient::handshake_on(stream, plan.s2s_port_id.as_deref(), opts)
            .await
            .map_err(|e| format!("s2s_{}", e.kind()))?;
        c.begin_send()
            .await
            .map_err(|e| format!("s2s_{}", e.kind()))?;
        let mut s = Session::S2s(Box::new(c));
        s.send(&frame.head)
            .await
            .map_err(|e| format!("write_{}", error_kind(&e)))?;
        return Ok(s);
    }
    let mut s = Session::Plain(stream);
    s.send(&frame.head)
        .await
        .map_err(|e| format!("write_{}", error_kind(&e)))?;
    Ok(s)
}

/// Lets many sockets share a source port towards different destinations:
/// the port is chosen at connect, not at bind (`IP_BIND_ADDRESS_NO_PORT`).
/// Best effort: without it a bound source address still has its own ports.
fn bind_address_no_port(socket: &TcpSocket) {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on a socket this function borrows (the fd is open
    // for the call's duration) with a pointer to a live c_int and its size.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Raises this process's soft `RLIMIT_NOFILE` to at least `want` (up to the
/// hard limit; a child spawned afterwards inherits it) and returns it.
fn raise_nofile_limit(want: u64) -> anyhow::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct through a pointer to a
    // live, correctly typed local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        bail!(
            "getrlimit(RLIMIT_NOFILE): {}",
            std::io::Error::last_os_error()
        );
    }
    if lim.rlim_cur >= want {
        return Ok(lim.rlim_cur);
    }
    if lim.rlim_max < want {
        bail!(
            "RLIMIT_NOFILE hard limit {} is below the {want} descriptors needed; \
             raise it (ulimit -Hn) or lower --connections",
            lim.rlim_max
        );
    }
    lim.rlim_cur = want;
    // SAFETY: setrlimit reads one rlimit struct from a live local.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        bail!(
            "setrlimit(RLIMIT_NOFILE, {want}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(want)
}

fn io_kind(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match (e.kind(), e.raw_os_error()) {
        (K::ConnectionRefused, _) => "connection_refused".into(),
        (K::ConnectionReset, _) => "reset".into(),
        (K::BrokenPipe, _) => "broken_pipe".into(),
        (K::TimedOut, _) => "timeout".into(),
        (K::AddrNotAvailable, _) => "address_not_available".into(),
        (_, Some(libc::EMFILE)) | (_, Some(libc::ENFILE)) => "too_many_open_files".into(),
        (k, _) => format!("{k:?}").to_lowercase(),
    }
}

fn error_kind(e: &anyhow::Error) -> String {
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return io_kind(io);
    }
    if let Some(c) = e.downcast_ref::<tidegate_s2s::client::ClientError>() {
        return c.kind().to_owned();
    }
    "other".into()
}

fn live_now(live: &Live) -> u64 {
    live.opened
        .load(Ordering::Relaxed)
        .saturating_sub(live.closed.load(Ordering::Relaxed))
}

/// The server's RSS at each step, KiB (`None` for an external target).
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct RssFigures {
    before_kb: Option<u64>,
    after_open_kb: Option<u64>,
    peak_while_held_kb: Option<u64>,
    hold_end_kb: Option<u64>,
    after_close_kb: Option<u64>,
}

impl RssFigures {
    /// RSS after opening minus before, KiB.
    fn delta_kb(&self) -> Option<i64> {
        Some(self.after_open_kb? as i64 - self.before_kb? as i64)
    }

    /// The delta divided by `n` connections, bytes.
    fn per_connection_bytes(&self, n: u64) -> Option<f64> {
        (n > 0).then_some(())?;
        Some(self.delta_kb()? as f64 * 1024.0 / n as f64)
    }
}

/// The connections' records, counted.
#[derive(Debug, Default)]
struct Summary {
    opened: u64,
    held: u64,
    /// Connect failures by kind, plus `closed_at_once`.
    refused: BTreeMap<String, u64>,
    closed_at_once: u64,
    closed_later: u64,
    closed_how: BTreeMap<String, u64>,
    closed_after: Vec<Duration>,
    open_latency: LatencyRecorder,
    from_server: u64,
    trickled: u64,
}

impl Summary {
    fn of(records: &[ConnRecord]) -> Self {
        let mut s = Summary::default();
        for r in records {
            if let Some(t) = r.open_time {
                s.opened += 1;
                s.open_latency.record(t);
            }
            s.from_server += r.from_server;
            s.trickled += r.trickled;
            match &r.fate {
                Fate::NotOpened(kind) => *s.refused.entry(kind.clone()).or_default() += 1,
                Fate::Held => s.held += 1,
                Fate::Closed { after, how } if *after <= CLOSED_AT_ONCE => {
                    s.closed_at_once += 1;
                    *s.refused
                        .entry(format!("closed_at_once_{how}"))
                        .or_default() += 1;
                }
                Fate::Closed { after, how } => {
                    s.closed_later += 1;
                    s.closed_after.push(*after);
                    *s.closed_how.entry(how.clone()).or_default() += 1;
                }
            }
        }
        s.closed_after.sort();
        s
    }

    fn refused_total(&self) -> u64 {
        self.refused.values().sum()
    }

    /// Seconds after opening at which the server closed connections
    /// (`null` when it closed none after [`CLOSED_AT_ONCE`]).
    fn closed_after_s(&self) -> serde_json::Value {
        let v = &self.closed_after;
        if v.is_empty() {
            return serde_json::Value::Null;
        }
        serde_json::json!({
            "min": v[0].as_secs_f64(),
            "p50": v[v.len() / 2].as_secs_f64(),
            "max": v[v.len() - 1].as_secs_f64(),
        })
    }
}

fn human(
    args: &ConnsArgs,
    plan: &Plan,
    s: &Summary,
    rss: &RssFigures,
    per_conn: Option<f64>,
    per_held: Option<f64>,
) -> String {
    let kb = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    let bytes = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0}"));
    let listener = format!("{:?}", args.listener).to_lowercase();
    let mode = format!("{:?}", args.mode).to_lowercase();
    let what = match &plan.frame {
        None => "sending nothing".to_owned(),
        Some(f) => format!(
            "{} B at once announcing a {} B frame{}",
            f.head.len(),
            f.announced,
            if args.mode == Mode::Trickle {
                ", then 1 B/s"
            } else {
                ", then nothing"
            }
        ),
    };
    let mut out = format!(
        "conns: {} connections to the {listener} listener at {} ({mode}: {what}), held {} s, from {} source address(es)\n",
        args.connections,
        plan.addr,
        args.duration,
        plan.sources.len().max(1),
    );
    out.push_str("| listener | mode | connections | connected | refused at connect | closed by server | held to the end | server RSS before (KiB) | after opening (KiB) | RSS delta / connection (B) | per connection held (B) | peak while held (KiB) | end of hold (KiB) | after closing (KiB) |\n");
    out.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    out.push_str(&format!(
        "| {listener} | {mode} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        args.connections,
        s.opened,
        s.refused_total(),
        s.closed_later,
        s.held,
        kb(rss.before_kb),
        kb(rss.after_open_kb),
        bytes(per_conn),
        bytes(per_held),
        kb(rss.peak_while_held_kb),
        kb(rss.hold_end_kb),
        kb(rss.after_close_kb),
    ));
    if !s.refused.is_empty() {
        let r: Vec<String> = s.refused.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!("refused at connect: {}\n", r.join(" ")));
    }
    if !s.closed_after.is_empty() {
        let v = &s.closed_after;
        let how: Vec<String> = s
            .closed_how
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        out.push_str(&format!(
            "closed by the server {:.1} s (first) / {:.1} s (median) / {:.1} s (last) after opening ({})\n",
            v[0].as_secs_f64(),
            v[v.len() / 2].as_secs_f64(),
            v[v.len() - 1].as_secs_f64(),
            how.join(" ")
        ));
    }
    if s.from_server > 0 {
        out.push_str(&format!(
            "the server sent {} {} to the stalled connections\n",
            s.from_server,
            if args.listener == Listener::S2s {
                "responses"
            } else {
                "bytes"
            }
        ));
    }
    if args.mode == Mode::Trickle {
        out.push_str(&format!("trickled {} bytes in all\n", s.trickled));
    }
    out.push_str(&percentile_table(
        "time to open a connection",
        s.open_latency.summary_us().as_ref(),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_per_connection_is_the_delta_over_n_in_bytes() {
        let r = RssFigures {
            before_kb: Some(10_000),
            after_open_kb: Some(30_000),
            peak_while_held_kb: None,
            hold_end_kb: None,
            after_close_kb: None,
        };
        assert_eq!(r.delta_kb(), Some(20_000));
        assert_eq!(r.per_connection_bytes(10_000), Some(2048.0));
        assert_eq!(r.per_connection_bytes(0), None);
    }

    #[test]
    fn a_close_within_the_first_second_is_a_refusal_and_later_a_timeout() {
        let rec = |fate| ConnRecord {
            open_time: Some(Duration::from_millis(1)),
            fate,
            from_server: 0,
            trickled: 0,
        };
        let records = vec![
            rec(Fate::Held),
            rec(Fate::Closed {
                after: Duration::from_millis(5),
                how: "eof".into(),
            }),
            rec(Fate::Closed {
                after: Duration::from_secs(30),
                how: "eof".into(),
            }),
            not_opened("connection_refused".into()),
        ];
        let s = Summary::of(&records);
        assert_eq!(s.opened, 3);
        assert_eq!(s.held, 1);
        assert_eq!(s.closed_at_once, 1);
        assert_eq!(s.closed_later, 1);
        assert_eq!(s.refused_total(), 2);
        assert_eq!(s.refused["connection_refused"], 1);
        assert_eq!(s.closed_after_s()["min"], 30.0);
    }
}
