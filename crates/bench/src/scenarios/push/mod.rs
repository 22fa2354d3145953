//! `tidegate bench push`: seed 001, push fan-out to many subscribers.
//! `--users` sessions each subscribe to `--subs` of `--topics` topics in
//! one storm (all at once, through the protocol: a Socket.IO `subscribe`
//! event, or a `/ws` subscribe request); then publishers send 1 KB
//! (`--msg-bytes`) messages round-robin over every topic at
//! `--publish-rate`, each payload stamped with the time it was due (the
//! seed's timeHandler), until every user has received `--messages`
//! (rounded up to whole passes over the topics). Subscribers measure each
//! message's delivery latency from its stamp.
//!
//! `--anchor socketio` runs the same client load against the npm
//! `socket.io` server (rooms = topics) in the same command and prints both
//! side by side; `--idle-sessions N` instead holds N idle sessions and
//! reports the server's memory per session.
//!
//! Report: one event is one delivered message. The measured window runs
//! from the first publish to the last delivery; `sent` (and `due`, when
//! paced) count the deliveries the publishes asked for (each publish
//! times its subscribers), `delivered` those that arrived. The server's
//! and client's CPU cover the same window (read at the first publish and
//! within 50 ms after the last delivery); with `--idle-sessions`, the
//! opening of the sessions. Client sockets are spread over 127.0.0.0/8
//! source addresses.

pub mod anchor;
pub mod http1;
pub mod idle;
pub mod load;
pub mod net;
pub mod session;
pub mod stamp;
pub mod wsclient;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use crate::report::{Report, Window};
use crate::sampler::{Marker, ProcessStats};
use crate::{CommonArgs, Progress, Sampler, Target};

/// The subscribers' transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// Socket.IO over Engine.IO HTTP long-polling.
    Polling,
    /// Socket.IO over Engine.IO websocket.
    Websocket,
    /// Tidegate's plain `/ws` JSON protocol.
    Ws,
}

impl Transport {
    /// The publishers' transport: websocket, or `/ws` for `/ws` runs.
    pub fn publisher(self) -> Transport {
        match self {
            Transport::Ws => Transport::Ws,
            _ => Transport::Websocket,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Transport::Polling => "polling",
            Transport::Websocket => "websocket",
            Transport::Ws => "ws",
        }
    }
}

/// Servers the same load can be compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Anchor {
    /// The npm `socket.io` server (`crates/bench/anchors/socketio`).
    Socketio,
}

/// Parameters of the push scenario (seed 001's names).
#[derive(Debug, Clone, clap::Args)]
pub struct PushArgs {
    /// Subscriber sessions ("users").
    #[arg(long, default_value_t = 1000)]
    pub users: usize,
    /// Topics each user subscribes to (distinct, chosen at random).
    #[arg(long, default_value_t = 1000)]
    pub subs: usize,
    /// The topic pool.
    #[arg(long, default_value_t = 50_000)]
    pub topics: usize,
    /// Payload bytes per message (the first ones are the stamp).
    #[arg(long = "msg-bytes", default_value_t = 1024)]
    pub msg_bytes: usize,
    /// Messages each user receives before the run ends (rounded up to
    /// whole passes of the publishers over every topic). The seed used
    /// 100,000.
    #[arg(long, default_value_t = 5000)]
    pub messages: u64,
    /// The subscribers' transport.
    #[arg(long, value_enum, default_value_t = Transport::Polling)]
    pub transport: Transport,
    /// Publishes per second over all publishers; 0 = as fast as the
    /// server takes them. Each reaches about users × subs / topics users.
    #[arg(long = "publish-rate", default_value_t = 12_500.0)]
    pub publish_rate: f64,
    /// Publisher connections (the seed's two executors).
    #[arg(long, default_value_t = 2)]
    pub publishers: usize,
    /// How long subscribers may still receive after the last publish.
    #[arg(long = "drain-ms", default_value_t = 10_000)]
    pub drain_ms: u64,
    /// Also run the same load against this server, side by side.
    #[arg(long, value_enum)]
    pub anchor: Option<Anchor>,
    /// Where the socket.io anchor is installed.
    #[arg(long = "anchor-dir")]
    pub anchor_dir: Option<PathBuf>,
    /// Instead of the fan-out: hold this many idle sessions and report the
    /// server's memory per session (websocket or ws transport).
    #[arg(long = "idle-sessions", default_value_t = 0)]
    pub idle_sessions: usize,
    /// Seed of the users' topic choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Publishers connect to this `[http]` address instead of the target:
    /// another node of a cluster, to measure cross-node delivery.
    #[arg(long = "publish-target")]
    pub publish_target: Option<std::net::SocketAddr>,
    /// `[push] write_delay_ms` of the spawned Tidegate server (how long a
    /// session holds its first pending packet to write more at once; the
    /// npm anchor has no such setting).
    #[arg(long = "write-delay-ms", default_value_t = 0)]
    pub write_delay_ms: u64,
    /// `[push] busy_write_delay_ms` of the spawned Tidegate server (how
    /// long a session that wrote recently holds its next first packet);
    /// unset: the server's default.
    #[arg(long = "busy-write-delay-ms")]
    pub busy_write_delay_ms: Option<u64>,
    /// Target (`--target` is the `[http]` address) and output options.
    #[command(flatten)]
    pub common: CommonArgs,
}

impl PushArgs {
    fn rounds(&self) -> u64 {
        self.messages
            .div_ceil(self.subs.min(self.topics).max(1) as u64)
            .max(1)
    }

    fn plan(&self) -> load::Plan {
        load::Plan {
            users: self.users,
            subs: self.subs.min(self.topics),
            topics: self.topics,
            msg_bytes: self.msg_bytes,
            rounds: self.rounds(),
            transport: self.transport,
            publish_rate: self.publish_rate,
            publishers: self.publishers.max(1),
            drain: Duration::from_millis(self.drain_ms),
            seed: self.seed,
            publish_to: self.publish_target,
        }
    }

    fn params(&self) -> serde_json::Value {
        json!({
            "users": self.users, "subs": self.subs, "topics": self.topics,
            "msg_bytes": self.msg_bytes, "messages": self.messages,
            "transport": self.transport.name(), "publish_rate": self.publish_rate,
            "publishers": self.publishers, "drain_ms": self.drain_ms,
            "anchor": self.anchor.map(|_| "socketio"), "idle_sessions": self.idle_sessions,
            "seed": self.seed, "rounds": self.rounds(),
            "publish_target": self.publish_target.map(|a| a.to_string()),
            "write_delay_ms": self.write_delay_ms,
            "busy_write_delay_ms": self.busy_write_delay_ms,
        })
    }
}

/// Raises this process's open-file limit (children inherit it) to what
/// `want` descriptors need, up to what the kernel allows.
fn raise_fd_limit(want: u64) {
    use rlimit::Resource;
    let Ok((soft, hard)) = Resource::NOFILE.get() else {
        return;
    };
    if want <= soft {
        return;
    }
    // Raising the hard limit needs privilege; fall back to the hard limit.
    if Resource::NOFILE
        .set(want.max(hard), want.max(hard))
        .is_err()
    {
        let _ = Resource::NOFILE.set(want.min(hard), hard);
    }
}

/// Runs the scenario and prints its report.
pub async fn run(args: &PushArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.users > 0 && args.subs > 0 && args.topics > 0,
        "--users, --subs and --topics must be at least 1"
    );
    anyhow::ensure!(
        args.msg_bytes >= stamp::MIN_MSG_BYTES,
        "--msg-bytes must be at least {} (the stamp)",
        stamp::MIN_MSG_BYTES
    );
    if args.idle_sessions > 0 {
        anyhow::ensure!(
            args.transport != Transport::Polling,
            "--idle-sessions holds websocket sessions: use --transport websocket or ws"
        );
    }
    if args.anchor.is_some() {
        anyhow::ensure!(
            args.transport != Transport::Ws,
            "the socket.io anchor speaks Socket.IO only: use --transport polling or websocket"
        );
    }
    let conns = if args.idle_sessions > 0 {
        args.idle_sessions
    } else {
        args.users * 2 + args.publishers
    };
    raise_fd_limit(conns as u64 + 4096);
    let (report, human) = if args.idle_sessions > 0 {
        idle_report(args).await?
    } else {
        fanout_report(args).await?
    };
    report.emit(args.common.json, &human)
}

fn tidegate_toml(args: &PushArgs) -> String {
    let conns = args.users * 2 + args.publishers + args.idle_sessions + 1000;
    // Only when set: a server from before the key (TIDEGATE_BENCH_SERVER)
    // refuses keys it does not know.
    let mut delay = match args.write_delay_ms {
        0 => String::new(),
        ms => format!("write_delay_ms = {ms}\n"),
    };
    if let Some(ms) = args.busy_write_delay_ms {
        delay.push_str(&format!("busy_write_delay_ms = {ms}\n"));
    }
    format!(
        "[http]\nmax_connections = {conns}\n[push]\nmax_sessions = {}\n{delay}",
        conns.max(100_000)
    )
}

fn server_pid(t: &Target) -> Option<u32> {
    match t {
        Target::Spawned(s) => Some(s.pid()),
        Target::External(_) => None,
    }
}

fn anchor_dir(args: &PushArgs) -> PathBuf {
    args.anchor_dir.clone().unwrap_or_else(anchor::default_dir)
}

/// One server's fan-out figures.
struct Side {
    out: load::Outcome,
    server: ProcessStats,
    client: ProcessStats,
}

impl Side {
    /// Deliveries per second; `None` for an empty window (nothing
    /// delivered), never a rate of 0 from no time at all.
    fn rate(&self) -> Option<f64> {
        (self.out.window_s > 0.0).then(|| self.out.delivered as f64 / self.out.window_s)
    }

    fn gbps(&self, bytes: f64) -> Option<f64> {
        (self.out.window_s > 0.0).then(|| bytes * 8.0 / self.out.window_s / 1e9)
    }

    fn json(&self, msg_bytes: usize) -> serde_json::Value {
        json!({
            "connect_s": self.out.connect_s,
            "subscribe_s": self.out.subscribe_s,
            "sessions": self.out.sessions,
            "published": self.out.published,
            "expected": self.out.expected,
            "delivered": self.out.delivered,
            "window_s": self.out.window_s,
            "msgs_per_s": self.rate(),
            "gbps_payload": self.gbps(self.out.delivered as f64 * msg_bytes as f64),
            "gbps_wire": self.gbps(self.out.wire_bytes as f64),
            "latency_us": self.out.latency.summary_us(),
            "errors": self.out.errors,
            "server": self.server,
            "client": self.client,
        })
    }
}

/// Runs the fan-out against `addr`, whose server `server` marks; returns
/// the outcome and the client's figures over its delivery window.
async fn fanout_side(
    args: &PushArgs,
    addr: std::net::SocketAddr,
    label: &str,
    server: Marker,
) -> anyhow::Result<(load::Outcome, ProcessStats)> {
    let progress = Progress::start(label);
    let client = Sampler::start_self(Duration::from_secs(1));
    let marker = server.and(&client.marker());
    let out = load::run(addr, &args.plan(), progress.clone(), &marker).await;
    progress.finish();
    let out = out?;
    let client = client.finish_over(out.cpu_window);
    Ok((out, client))
}

async fn fanout_report(args: &PushArgs) -> anyhow::Result<(Report, String)> {
    let target = Target::resolve(&args.common, &tidegate_toml(args))?;
    let addr = target.addr(|a| a.http);
    let run = fanout_side(args, addr, "push tidegate", target.marker()).await;
    let server = target.finish(run.as_ref().ok().and_then(|r| r.0.cpu_window))?;
    let (out, client) = run?;
    let tide = Side {
        out,
        server,
        client,
    };
    let anchor = match args.anchor {
        Some(Anchor::Socketio) => {
            let a = anchor::SocketIoAnchor::spawn(&anchor_dir(args))?;
            let run = fanout_side(args, a.addr(), "push socket.io", a.marker()).await;
            let server = a.stop(run.as_ref().ok().and_then(|r| r.0.cpu_window));
            let (out, client) = run?;
            Some(Side {
                out,
                server,
                client,
            })
        }
        None => None,
    };
    let plan = args.plan();
    let mut report = Report::new("push", "message", args.params());
    report.sent = tide.out.published;
    report.received = tide.out.delivered;
    for (k, v) in &tide.out.errors {
        report.error(k, *v);
    }
    report.set_window(Window {
        seconds: tide.out.window_s,
        due: (args.publish_rate > 0.0).then_some(tide.out.expected),
        sent: tide.out.expected,
        delivered: tide.out.delivered,
    });
    report.latency_us = tide.out.latency.summary_us();
    report.latency_expected = true;
    report.server = tide.server;
    report.client = tide.client;
    let mut extra = tide.json(args.msg_bytes);
    if let Some(a) = &anchor {
        extra["anchor"] = json!({"name": "socket.io (npm)", "result": a.json(args.msg_bytes)});
        extra["ratio_vs_anchor"] = json!({
            "msgs_per_s": tide.rate().zip(a.rate()).and_then(|(t, a)| ratio(t, a)),
            "subscribe_s": ratio(a.out.subscribe_s, tide.out.subscribe_s),
        });
    }
    report.extra = extra;
    let human = fanout_table(args, &plan, &tide, anchor.as_ref());
    if let Some(a) = &anchor {
        if a.out.delivered == 0 {
            print!("{human}");
            anyhow::bail!("push: the socket.io anchor delivered nothing");
        }
    }
    Ok((report, human))
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

/// `value` with `decimals`, or "-" when there is none.
fn or_dash(value: Option<f64>, decimals: usize) -> String {
    value
        .map(|v| format!("{v:.decimals$}"))
        .unwrap_or_else(|| "-".into())
}

/// `value` with no decimals, or "-" for a process that was not sampled.
fn if_measured(stats: &ProcessStats, value: f64) -> String {
    if stats.measured() {
        format!("{value:.0}")
    } else {
        "-".into()
    }
}

fn ms(us: Option<f64>) -> String {
    us.map(|v| format!("{:.1}", v / 1000.0))
        .unwrap_or_else(|| "-".into())
}

fn fanout_table(args: &PushArgs, plan: &load::Plan, t: &Side, a: Option<&Side>) -> String {
    let mut s = format!(
        "push (seed 001): {} users x {} subscriptions over {} topics, {}-byte messages, {} subscribers, {} publishers at {}\n\
         each user receives {} messages ({} passes over the topics); {} publishes, {} deliveries expected\n",
        args.users,
        plan.subs,
        args.topics,
        args.msg_bytes,
        args.transport.name(),
        plan.publishers,
        if args.publish_rate > 0.0 { format!("{:.0} msg/s", args.publish_rate) } else { "full speed".into() },
        plan.per_user(),
        plan.rounds,
        plan.publishes(),
        t.out.expected,
    );
    let cols: Vec<(&str, &Side)> = std::iter::once(("tidegate", t))
        .chain(a.map(|a| ("socket.io (npm)", a)))
        .collect();
    s.push_str(&format!("{:<30}", ""));
    for (n, _) in &cols {
        s.push_str(&format!("{n:>18}"));
    }
    if a.is_some() {
        s.push_str(&format!("{:>12}", "ratio"));
    }
    s.push('\n');
    type Row<'a> = (
        &'a str,
        Box<dyn Fn(&Side) -> String>,
        Option<Box<dyn Fn(&Side) -> Option<f64>>>,
    );
    let mb = args.msg_bytes as f64;
    let rows: Vec<Row> = vec![
        (
            "clients ready (s)",
            Box::new(|x: &Side| format!("{:.2}", x.out.connect_s)),
            None,
        ),
        (
            "subscribe storm (s)",
            Box::new(|x: &Side| format!("{:.2}", x.out.subscribe_s)),
            None,
        ),
        (
            "published",
            Box::new(|x: &Side| x.out.published.to_string()),
            None,
        ),
        (
            "delivered",
            Box::new(|x: &Side| x.out.delivered.to_string()),
            None,
        ),
        (
            "lost",
            Box::new(|x: &Side| x.out.expected.saturating_sub(x.out.delivered).to_string()),
            None,
        ),
        (
            "window (s)",
            Box::new(|x: &Side| format!("{:.2}", x.out.window_s)),
            None,
        ),
        (
            "Total ms/sec (delivered/s)",
            Box::new(|x: &Side| or_dash(x.rate(), 0)),
            Some(Box::new(|x: &Side| x.rate())),
        ),
        (
            "Gb/s payload",
            Box::new(move |x: &Side| or_dash(x.gbps(x.out.delivered as f64 * mb), 2)),
            None,
        ),
        (
            "Gb/s on the wire",
            Box::new(|x: &Side| or_dash(x.gbps(x.out.wire_bytes as f64), 2)),
            None,
        ),
        (
            "latency p50 (ms)",
            Box::new(|x: &Side| ms(x.out.latency.summary_us().map(|l| l.p50))),
            None,
        ),
        (
            "latency p99 (ms)",
            Box::new(|x: &Side| ms(x.out.latency.summary_us().map(|l| l.p99))),
            None,
        ),
        (
            "latency p99.9 (ms)",
            Box::new(|x: &Side| ms(x.out.latency.summary_us().map(|l| l.p999))),
            None,
        ),
        (
            "latency max (ms)",
            Box::new(|x: &Side| ms(x.out.latency.summary_us().map(|l| l.max))),
            None,
        ),
        (
            "server cpu avg (%)",
            Box::new(|x: &Side| or_dash(x.server.cpu_avg(), 0)),
            None,
        ),
        (
            "server rss max (MiB)",
            Box::new(|x: &Side| if_measured(&x.server, x.server.rss_kb_max as f64 / 1024.0)),
            None,
        ),
        (
            "client cpu avg (%)",
            Box::new(|x: &Side| or_dash(x.client.cpu_avg(), 0)),
            None,
        ),
    ];
    for (name, f, r) in rows {
        s.push_str(&format!("{name:<30}"));
        for (_, side) in &cols {
            s.push_str(&format!("{:>18}", f(side)));
        }
        if let (Some(a), Some(r)) = (a, r) {
            match r(t).zip(r(a)).and_then(|(t, a)| ratio(t, a)) {
                Some(x) => s.push_str(&format!("{:>11.2}x", x)),
                None => s.push_str(&format!("{:>12}", "-")),
            }
        }
        s.push('\n');
    }
    for (n, side) in &cols {
        if !side.out.errors.is_empty() {
            let e: Vec<String> = side
                .out
                .errors
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            s.push_str(&format!("{n} errors: {}\n", e.join(" ")));
        }
    }
    s
}

async fn idle_side(
    args: &PushArgs,
    addr: std::net::SocketAddr,
    pid: Option<u32>,
    marker: &Marker,
) -> idle::IdleOutcome {
    idle::run(addr, pid, args.transport, args.idle_sessions, marker).await
}

fn idle_json(o: &idle::IdleOutcome, server: &ProcessStats) -> serde_json::Value {
    json!({
        "held": o.held, "failed": o.failed, "open_s": o.open_s,
        "rss_before_kb": o.rss_before_kb, "rss_after_kb": o.rss_after_kb,
        "kib_per_session": o.kib_per_session(),
        "open_latency_us": o.open_latency.summary_us(),
        "server": server,
    })
}

async fn idle_report(args: &PushArgs) -> anyhow::Result<(Report, String)> {
    let target = Target::resolve(&args.common, &tidegate_toml(args))?;
    let addr = target.addr(|a| a.http);
    let pid = server_pid(&target);
    let client = Sampler::start_self(Duration::from_secs(1));
    let marker = target.marker().and(&client.marker());
    let t = idle_side(args, addr, pid, &marker).await;
    let client = client.finish_over(t.cpu_window);
    let server = target.finish(t.cpu_window)?;
    let anchor = match args.anchor {
        Some(Anchor::Socketio) => {
            let a = anchor::SocketIoAnchor::spawn(&anchor_dir(args))?;
            let o = idle_side(args, a.addr(), Some(a.pid()), &a.marker()).await;
            let stats = a.stop(o.cpu_window);
            Some((o, stats))
        }
        None => None,
    };
    let mut report = Report::new("push", "session", args.params());
    report.sent = args.idle_sessions as u64;
    report.received = t.held as u64;
    report.error("session_failed", t.failed as u64);
    report.set_window(Window {
        seconds: t.open_s,
        due: None,
        sent: args.idle_sessions as u64,
        delivered: t.held as u64,
    });
    report.latency_us = t.open_latency.summary_us();
    report.latency_expected = true;
    report.server = server;
    report.client = client;
    let mut extra = idle_json(&t, &server);
    let mut human = format!(
        "push idle sessions: {} {} sessions, each connected and subscribed to one topic, held {} s\n{:<28}{:>18}",
        args.idle_sessions,
        args.transport.name(),
        idle::SETTLE.as_secs(),
        "",
        "tidegate"
    );
    if anchor.is_some() {
        human.push_str(&format!("{:>18}", "socket.io (npm)"));
    }
    human.push('\n');
    let kib = |o: &idle::IdleOutcome| {
        o.kib_per_session()
            .map(|k| format!("{k:.1}"))
            .unwrap_or_else(|| "-".into())
    };
    // MiB, or "-" for a server whose memory was not read (external --target).
    let mib = |kb: Option<u64>| {
        kb.map(|kb| format!("{:.1}", kb as f64 / 1024.0))
            .unwrap_or_else(|| "-".into())
    };
    let mut rows: Vec<(&str, String, Option<String>)> = vec![
        ("sessions held", t.held.to_string(), None),
        ("failed", t.failed.to_string(), None),
        ("open time (s)", format!("{:.2}", t.open_s), None),
        ("server rss before (MiB)", mib(t.rss_before_kb), None),
        ("server rss held (MiB)", mib(t.rss_after_kb), None),
        ("KiB per idle session", kib(&t), None),
    ];
    if let Some((a, a_server)) = &anchor {
        let vals = [
            a.held.to_string(),
            a.failed.to_string(),
            format!("{:.2}", a.open_s),
            mib(a.rss_before_kb),
            mib(a.rss_after_kb),
            kib(a),
        ];
        for (row, v) in rows.iter_mut().zip(vals) {
            row.2 = Some(v);
        }
        extra["anchor"] = json!({"name": "socket.io (npm)", "result": idle_json(a, a_server)});
    }
    for (name, v, a) in rows {
        human.push_str(&format!(
            "{name:<28}{v:>18}{}\n",
            a.map(|a| format!("{a:>18}")).unwrap_or_default()
        ));
    }
    report.extra = extra;
    if pid.is_none() {
        human.push_str("(external --target: the server's memory is not visible from here)\n");
    }
    Ok((report, human))
}
