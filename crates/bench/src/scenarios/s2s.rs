//! `tidegate bench s2s`: seed 000, NiFi Site-to-Site clients doing
//! transactions. Each simulated client is its own connection (RAW socket or
//! HTTP) and runs `--tx` transactions of `--packets` FlowFiles ("id,i,p\n",
//! no attributes), one every `--interval-ms`, timing the four phases the seed
//! reports:
//!
//! - create: getting a connection and opening the transaction (the first
//!   includes REST discovery, the RAW peer list and the handshake, as the
//!   stock client does);
//! - send: writing the packets;
//! - confirm: FINISH → the server's CONFIRM with its checksum (HTTP: the
//!   `flow-files` POST);
//! - complete: CONFIRM → TRANSACTION_FINISHED, i.e. the server's commit
//!   (HTTP: the `DELETE`).
//!
//! Transaction `k` of a client is due at `start + k × interval` (clients
//! start `--ramp-ms` apart, as the seed's 10 ms); the common report's
//! latency is the whole transaction measured from its due time, so a server
//! stall shows up instead of slowing the schedule.
//!
//! Every transaction that was due is reported, not only those done: the run
//! ends when every client is done or at a deadline (`--timeout-ms` after the
//! schedule's end, when the clients still running are stopped), and a
//! transaction that failed or never completed by then counts as failed,
//! with its latency from when it was due to the end of the run.
//!
//! The measured window is the schedule's span: from the first due time to
//! one interval after the last. Within it the offered rate counts
//! transactions due, the sent rate transactions begun, and the rate
//! transactions completed (the server's TRANSACTION_FINISHED); the server's
//! and client's CPU are read at its start and end (a run whose clients all
//! finished sooner waits for the window's end before stopping the server).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use tidegate_s2s::client::{
    discover, http_peers, ClientError, ClientOptions, DynStream, HttpS2sClient, RawClient,
};
use tidegate_s2s::codec::DataPacket;

use crate::latency::{LatencyRecorder, LatencySummary};
use crate::report::{Report, Window};
use crate::sampler::TimedWindow;
use crate::{CommonArgs, Progress, Target};

/// Transport the simulated clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// The RAW socket transport.
    Raw,
    /// The HTTP transport.
    Http,
}

/// Parameters of the s2s scenario (seed 000's names).
#[derive(Debug, Clone, clap::Args)]
pub struct S2sArgs {
    /// numOfClient: simulated clients, one connection each.
    #[arg(long, default_value_t = 10)]
    pub clients: usize,
    /// numOfTx: transactions per client.
    #[arg(long, default_value_t = 10)]
    pub tx: u64,
    /// numOfPacketsPerTx: FlowFiles per transaction.
    #[arg(long, default_value_t = 5)]
    pub packets: usize,
    /// txIntervalMillis: time between a client's transactions.
    #[arg(long = "interval-ms", default_value_t = 1000)]
    pub interval_ms: u64,
    /// Transport.
    #[arg(long, value_enum, default_value_t = Transport::Raw)]
    pub transport: Transport,
    /// RAW over TLS with client certificates (a throw-away PKI is generated).
    #[arg(long)]
    pub tls: bool,
    /// Compress packets (GZIP handshake property).
    #[arg(long)]
    pub gzip: bool,
    /// Delay between client starts (the seed starts clients 10 ms apart).
    #[arg(long = "ramp-ms", default_value_t = 10)]
    pub ramp_ms: u64,
    /// Input port name.
    #[arg(long, default_value = "input")]
    pub port: String,
    /// Per-read timeout of the clients (the seed's clients use 60 s).
    #[arg(long = "timeout-ms", default_value_t = 60_000)]
    pub timeout_ms: u64,
    /// Also write the seed's per-client CSV lines to this file.
    #[arg(long)]
    pub csv: Option<std::path::PathBuf>,
    /// Target (`--target` is the `[http]` address) and output options.
    #[command(flatten)]
    pub common: CommonArgs,
}

const PHASES: [&str; 4] = ["create", "send", "confirm", "complete"];

/// Per-client sums for the seed's CSV line.
#[derive(Debug, Default, Clone)]
struct ClientLine {
    ok: u64,
    failed: u64,
    /// Due but not completed when the run ended (in flight or not begun).
    unfinished: u64,
    sums_ns: [u128; 4],
}

/// Everything the clients record.
#[derive(Default)]
struct Recorders {
    phases: [LatencyRecorder; 4],
    total_from_due: LatencyRecorder,
    failures: BTreeMap<String, u64>,
    /// Due times of the failed transactions; their latency runs to the end
    /// of the run and is recorded then.
    failed_due: Vec<Instant>,
}

enum Conn {
    Raw(RawClient<DynStream>),
    Http(HttpS2sClient),
}

struct Shared {
    args: S2sArgs,
    http: SocketAddr,
    rec: Mutex<Recorders>,
    progress: Arc<Progress>,
    tls: Option<tidegate_s2s::tls::ClientTls>,
    /// End of the measured window.
    window_end: Instant,
    /// Transactions begun within the window.
    started_in_window: AtomicU64,
    /// Transactions completed within the window.
    completed_in_window: AtomicU64,
}

fn packets(client: usize, tx: u64, n: usize) -> Vec<DataPacket> {
    (0..n)
        .map(|p| DataPacket {
            attributes: Vec::new(),
            content: Bytes::from(format!("{client},{tx},{p}\n")),
        })
        .collect()
}

/// Opens a client's connection the way the stock client does the first
/// time: REST discovery, the peer list (a RAW connection, or
/// `GET /nifi-api/site-to-site/peers`), then the transfer connection with
/// its handshake.
async fn connect(sh: &Shared) -> Result<Conn, ClientError> {
    let t = Duration::from_millis(sh.args.timeout_ms);
    let d = discover(sh.http, t).await?;
    let port_id = d
        .input_id(&sh.args.port)
        .ok_or_else(|| ClientError::Protocol(format!("no input port named {}", sh.args.port)))?
        .to_owned();
    let opts = ClientOptions {
        gzip: sh.args.gzip,
        timeout: t,
        batch_count: None,
    };
    match sh.args.transport {
        Transport::Http => {
            let addr = SocketAddr::new(sh.http.ip(), d.http_port.unwrap_or(sh.http.port()));
            // NiFi's client asks for the HTTP peers before its first
            // transaction; so does this one.
            http_peers(addr, None, t).await?;
            Ok(Conn::Http(
                HttpS2sClient::connect(addr, &port_id, sh.args.gzip, t).await?,
            ))
        }
        Transport::Raw => {
            let raw = d
                .raw_port
                .ok_or_else(|| ClientError::Protocol("server advertises no RAW port".into()))?;
            let addr = SocketAddr::new(sh.http.ip(), raw);
            if let Some(tls) = &sh.tls {
                let mut peers = tls.connect(addr, None, opts.clone()).await?;
                peers.peer_list().await?;
                peers.shutdown().await;
                return Ok(Conn::Raw(tls.connect(addr, Some(&port_id), opts).await?));
            }
            let mut peers = RawClient::connect(addr, None, opts.clone()).await?;
            peers.peer_list().await?;
            peers.shutdown().await;
            Ok(Conn::Raw(
                RawClient::connect_dyn(addr, Some(&port_id), opts).await?,
            ))
        }
    }
}

/// One transaction; returns the four phase durations.
async fn transaction(
    sh: &Shared,
    conn: &mut Option<Conn>,
    id: usize,
    k: u64,
) -> Result<[Duration; 4], ClientError> {
    let t0 = Instant::now();
    if conn.is_none() {
        *conn = Some(connect(sh).await?);
    }
    let c = conn.as_mut().expect("connected above");
    let pk = packets(id, k, sh.args.packets);
    match c {
        Conn::Raw(r) => {
            r.begin_send().await?;
            let t1 = Instant::now();
            for p in &pk {
                r.send(p).await?;
            }
            let t2 = Instant::now();
            r.confirm().await?;
            let t3 = Instant::now();
            r.complete().await?;
            let t4 = Instant::now();
            Ok([t1 - t0, t2 - t1, t3 - t2, t4 - t3])
        }
        Conn::Http(h) => {
            h.create().await?;
            let t1 = Instant::now();
            for p in &pk {
                h.send(p);
            }
            let t2 = Instant::now();
            h.confirm().await?;
            let t3 = Instant::now();
            h.complete().await?;
            let t4 = Instant::now();
            Ok([t1 - t0, t2 - t1, t3 - t2, t4 - t3])
        }
    }
}

/// One simulated client's schedule and what it has done so far, readable
/// after its task was stopped at the deadline.
struct ClientSlot {
    /// Due time of its transaction 0.
    start: Instant,
    /// The seed's CSV figures.
    line: Mutex<ClientLine>,
    /// Transactions begun (the next one to begin is this index).
    started: AtomicU64,
    /// Transactions ended, completed or failed (sequential: 0..ended).
    ended: AtomicU64,
}

impl ClientSlot {
    fn due(&self, interval: Duration, k: u64) -> Instant {
        self.start + interval * k as u32
    }
}

async fn run_client(sh: Arc<Shared>, id: usize, slot: Arc<ClientSlot>) {
    let mut conn: Option<Conn> = None;
    let interval = Duration::from_millis(sh.args.interval_ms);
    for k in 0..sh.args.tx {
        let due = slot.due(interval, k);
        tokio::time::sleep_until(due.into()).await;
        slot.started.store(k + 1, Ordering::Release);
        if Instant::now() <= sh.window_end {
            sh.started_in_window.fetch_add(1, Ordering::Relaxed);
        }
        sh.progress.sent.fetch_add(1, Ordering::Relaxed);
        match transaction(&sh, &mut conn, id, k).await {
            Ok(ph) => {
                let done = Instant::now();
                if done <= sh.window_end {
                    sh.completed_in_window.fetch_add(1, Ordering::Relaxed);
                }
                let mut line = slot.line.lock().expect("client line lock");
                line.ok += 1;
                let mut rec = sh.rec.lock().expect("recorder lock");
                for (i, d) in ph.iter().enumerate() {
                    line.sums_ns[i] += d.as_nanos();
                    rec.phases[i].record(*d);
                }
                rec.total_from_due.record(done.duration_since(due));
                drop((rec, line));
                sh.progress.received.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                conn = None;
                slot.line.lock().expect("client line lock").failed += 1;
                sh.progress.errors.fetch_add(1, Ordering::Relaxed);
                let mut rec = sh.rec.lock().expect("recorder lock");
                *rec.failures.entry(e.kind().to_owned()).or_default() += 1;
                rec.failed_due.push(due);
            }
        }
        slot.ended.store(k + 1, Ordering::Release);
    }
    if let Some(Conn::Raw(r)) = conn {
        r.shutdown().await;
    }
}

/// The average in ms of `n` durations summing to `sum_ns`; `None` when
/// nothing completed (printed "-", `null` in JSON — never a figure).
fn avg_ms(sum_ns: u128, n: u64) -> Option<f64> {
    (n > 0).then(|| sum_ns as f64 / n as f64 / 1e6)
}

/// An average with `decimals`, or "-" when there is none.
fn avg_text(avg: Option<f64>, decimals: usize) -> String {
    avg.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

fn ms(s: Option<&LatencySummary>) -> String {
    match s {
        Some(s) => format!(
            "{:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            s.mean / 1e3,
            s.p50 / 1e3,
            s.p99 / 1e3,
            s.max / 1e3
        ),
        None => format!("{:>9} {:>9} {:>9} {:>9}", "-", "-", "-", "-"),
    }
}

/// Runs the scenario and prints its report.
pub async fn run(args: &S2sArgs) -> anyhow::Result<()> {
    let (report, human) = measure(args).await?;
    report.emit(args.common.json, &human)
}

/// Runs the clients to the end of the schedule (or the deadline) and
/// returns the report with its human text.
async fn measure(args: &S2sArgs) -> anyhow::Result<(Report, String)> {
    anyhow::ensure!(
        args.interval_ms > 0 && args.clients > 0 && args.tx > 0,
        "--interval-ms, --clients and --tx must be at least 1"
    );
    let tls_files = if args.tls {
        Some(
            tidegate_s2s::tls::TestPki::generate()
                .context("generating a throw-away PKI for --tls")?,
        )
    } else {
        None
    };
    let mut extra = format!(
        "[s2s]\nhost = \"127.0.0.1\"\nmax_connections = {}\n",
        (args.clients * 2 + 100).max(20_000)
    );
    if let Some(p) = &tls_files {
        extra.push_str(&p.server_toml());
    }
    let target = Target::resolve(&args.common, &extra)?;
    let http = target.addr(|a| a.http);
    let progress = Progress::start("s2s");
    let client_sampler = crate::Sampler::start_self(Duration::from_secs(1));
    let interval = Duration::from_millis(args.interval_ms);
    let ramp = Duration::from_millis(args.ramp_ms);
    let t0 = Instant::now();
    // The measured window: the schedule's span, from the first due time to
    // one interval after the last.
    let last_due = t0 + ramp * (args.clients - 1) as u32 + interval * (args.tx - 1) as u32;
    let window_end = last_due + interval;
    let cpu = TimedWindow::spawn(
        &target.marker().and(&client_sampler.marker()),
        t0,
        window_end,
    );
    let deadline = window_end + Duration::from_millis(args.timeout_ms);
    let sh = Arc::new(Shared {
        args: args.clone(),
        http,
        rec: Mutex::new(Recorders::default()),
        progress: progress.clone(),
        tls: tls_files.as_ref().map(|p| p.client()).transpose()?,
        window_end,
        started_in_window: AtomicU64::new(0),
        completed_in_window: AtomicU64::new(0),
    });
    let slots: Vec<Arc<ClientSlot>> = (0..args.clients)
        .map(|id| {
            Arc::new(ClientSlot {
                start: t0 + ramp * id as u32,
                line: Mutex::new(ClientLine::default()),
                started: AtomicU64::new(0),
                ended: AtomicU64::new(0),
            })
        })
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    for (id, slot) in slots.iter().enumerate() {
        tasks.spawn(run_client(sh.clone(), id, slot.clone()));
    }
    // Every client finishes by itself, or is stopped at the deadline (its
    // timeout after the schedule's end): a stalled server ends the run, it
    // does not stretch it without bound.
    let mut stopped_at_deadline = false;
    loop {
        match tokio::time::timeout_at(deadline.into(), tasks.join_next()).await {
            Ok(None) => break,
            Ok(Some(r)) => r.context("client task")?,
            Err(_) => {
                stopped_at_deadline = true;
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
                break;
            }
        }
    }
    let end = Instant::now();
    let duration = end - t0;
    progress.finish();
    let window = tokio::task::spawn_blocking(move || cpu.finish()).await?;
    let client = client_sampler.finish_over(window);
    let server = target.finish(window)?;

    // Every transaction that was due counts: one that failed, or never
    // completed before the run ended, is late, its latency the whole time
    // from when it was due to the end of the run.
    let mut rec = sh.rec.lock().expect("recorder lock");
    for due in std::mem::take(&mut rec.failed_due) {
        rec.total_from_due.record(end.duration_since(due));
    }
    let (mut unfinished, mut never_started) = (0u64, 0u64);
    let mut lines = Vec::with_capacity(args.clients);
    for slot in &slots {
        let (started, ended) = (
            slot.started.load(Ordering::Acquire),
            slot.ended.load(Ordering::Acquire),
        );
        let mut line = slot.line.lock().expect("client line lock").clone();
        for k in ended..args.tx {
            let due = slot.due(interval, k);
            if due <= end {
                rec.total_from_due.record(end.duration_since(due));
                line.unfinished += 1;
                if k < started {
                    unfinished += 1;
                } else {
                    never_started += 1;
                }
            }
        }
        lines.push(line);
    }
    let due_total = args.clients as u64 * args.tx;

    let ok: u64 = lines.iter().map(|l| l.ok).sum();
    let failed: u64 = lines.iter().map(|l| l.failed).sum();
    let late = unfinished + never_started;
    let mut sums = [0u128; 4];
    for l in &lines {
        for (sum, v) in sums.iter_mut().zip(l.sums_ns) {
            *sum += v;
        }
    }
    if let Some(path) = &args.csv {
        let mut f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        writeln!(f, "clientId,numOfTx,totalSuccessfulTx,totalFailureTx,avgCreateTxMillis,avgSendMillis,avgConfirmMillis,avgCompleteMillis")?;
        for (id, l) in lines.iter().enumerate() {
            writeln!(
                f,
                "{id},{},{},{},{},{},{},{}",
                args.tx,
                l.ok,
                l.failed + l.unfinished,
                avg_text(avg_ms(l.sums_ns[0], l.ok), 3),
                avg_text(avg_ms(l.sums_ns[1], l.ok), 3),
                avg_text(avg_ms(l.sums_ns[2], l.ok), 3),
                avg_text(avg_ms(l.sums_ns[3], l.ok), 3)
            )?;
        }
    }
    let avgs: Vec<Option<f64>> = (0..4).map(|i| avg_ms(sums[i], ok)).collect();
    let a0: Vec<String> = avgs.iter().map(|a| avg_text(*a, 0)).collect();
    let a3: Vec<String> = avgs.iter().map(|a| avg_text(*a, 3)).collect();
    let summary_line = format!(
        "numOfClient={}, numOfTx={}, numOfPacketsPerTx={}, txIntervalMillis={}, totalSuccessfulTx={ok}, totalFailureTx={}, avgCreateTxMillis={}, avgSendMillis={}, avgConfirmMillis={}, avgCompleteMillis={}\n",
        args.clients, args.tx, args.packets, args.interval_ms, failed + late, a0[0], a0[1], a0[2], a0[3]
    );
    let mut human = summary_line.clone();
    human.push_str(&format!(
        "transactions due {due_total}: completed {ok}, failed {failed}, never completed by the end of the run {late} ({unfinished} in flight, {never_started} never started){}\n",
        if stopped_at_deadline { "; stopped at the deadline" } else { "" }
    ));
    human.push_str(&format!(
        "avg ms: create {}  send {}  confirm {}  complete {}\n",
        a3[0], a3[1], a3[2], a3[3]
    ));
    human.push_str("phase (ms)      mean       p50       p99       max\n");
    let mut phase_json = serde_json::Map::new();
    for (i, name) in PHASES.iter().enumerate() {
        let s = rec.phases[i].summary_us();
        human.push_str(&format!("{name:<9}{}\n", ms(s.as_ref())));
        phase_json.insert((*name).into(), serde_json::to_value(s)?);
    }
    let total = rec.total_from_due.summary_us();
    human.push_str(&format!("{:<9}{}\n", "tx(due)", ms(total.as_ref())));

    let mut report = Report::new(
        "s2s",
        "transaction",
        serde_json::json!({
            "clients": args.clients, "tx": args.tx, "packets": args.packets,
            "interval_ms": args.interval_ms, "transport": format!("{:?}", args.transport).to_lowercase(),
            "tls": args.tls, "gzip": args.gzip, "ramp_ms": args.ramp_ms,
            "timeout_ms": args.timeout_ms,
        }),
    );
    report.sent = slots
        .iter()
        .map(|s| s.started.load(Ordering::Acquire))
        .sum::<u64>();
    report.received = ok;
    for (k, v) in &rec.failures {
        report.error(k, *v);
    }
    report.error("unfinished", unfinished);
    report.error("never_started", never_started);
    report.set_window(Window {
        seconds: (window_end - t0).as_secs_f64(),
        due: Some(due_total),
        sent: sh.started_in_window.load(Ordering::Relaxed),
        delivered: sh.completed_in_window.load(Ordering::Relaxed),
    });
    report.latency_us = total;
    report.latency_expected = true;
    report.server = server;
    report.client = client;
    report.extra = serde_json::json!({
        "numOfClient": args.clients, "numOfTx": args.tx, "numOfPacketsPerTx": args.packets,
        "txIntervalMillis": args.interval_ms, "totalSuccessfulTx": ok,
        "totalFailureTx": failed + late, "totalDueTx": due_total, "totalLateTx": late,
        "run_s": duration.as_secs_f64(), "stopped_at_deadline": stopped_at_deadline,
        "avgCreateTxMillis": avgs[0], "avgSendMillis": avgs[1], "avgConfirmMillis": avgs[2],
        "avgCompleteMillis": avgs[3], "phases_us": phase_json,
    });
    drop(rec);
    Ok((report, human))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_server_shows_every_due_transaction_as_late() {
        // Accepts and never answers: discovery hangs until the client's
        // timeout, so no transaction completes.
        let addr = crate::silent_server::silent_server().await;
        let args = S2sArgs {
            clients: 2,
            tx: 3,
            packets: 1,
            interval_ms: 100,
            transport: Transport::Raw,
            tls: false,
            gzip: false,
            ramp_ms: 10,
            port: "input".into(),
            timeout_ms: 500,
            csv: None,
            common: CommonArgs {
                target: Some(addr),
                json: true,
            },
        };
        let t = Instant::now();
        let (report, human) = measure(&args).await.unwrap();
        // Stopped at the deadline (schedule 0.31 s + timeout 0.5 s), not
        // after every client timed out on every transaction.
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(v["extra"]["totalDueTx"], 6, "{v}");
        assert_eq!(v["extra"]["totalSuccessfulTx"], 0, "{v}");
        assert_eq!(v["extra"]["totalFailureTx"], 6, "{v}");
        assert_eq!(v["extra"]["stopped_at_deadline"], true, "{v}");
        // Each client: transaction 0 timed out, 1 was in flight, 2 never
        // began — all in the latency histogram, up to the end of the run.
        assert_eq!(v["errors"]["timeout"], 2, "{v}");
        assert_eq!(v["errors"]["unfinished"], 2, "{v}");
        assert_eq!(v["errors"]["never_started"], 2, "{v}");
        let l = report.latency_us.expect("late transactions recorded");
        assert!(l.max >= 700_000.0, "{l:?}");
        assert_eq!(report.offered_rate.map(|r| r.round()), Some(19.0), "{v}");
        assert_eq!(report.rate, Some(0.0));
        // No transaction completed: no average of any phase, never -1.
        for k in [
            "avgCreateTxMillis",
            "avgSendMillis",
            "avgConfirmMillis",
            "avgCompleteMillis",
        ] {
            assert!(v["extra"][k].is_null(), "{k} in {v}");
        }
        assert!(
            human.contains("avgCreateTxMillis=-, avgSendMillis=-"),
            "{human}"
        );
        assert!(!human.contains("-1"), "{human}");
        assert!(report.measured_nothing().is_some());
        assert!(human.contains("transactions due 6"), "{human}");
    }
}
