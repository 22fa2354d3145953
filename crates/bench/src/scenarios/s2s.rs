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

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use tidegate_s2s::client::{
    discover, ClientError, ClientOptions, DynStream, HttpS2sClient, RawClient,
};
use tidegate_s2s::codec::DataPacket;

use crate::latency::{LatencyRecorder, LatencySummary};
use crate::report::Report;
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
    sums_ns: [u128; 4],
}

/// Everything the clients record.
#[derive(Default)]
struct Recorders {
    phases: [LatencyRecorder; 4],
    total_from_due: LatencyRecorder,
    failures: BTreeMap<String, u64>,
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
/// time: REST discovery, a peer-list connection (RAW), then the transfer
/// connection with its handshake.
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

async fn run_client(sh: Arc<Shared>, id: usize, start: Instant) -> ClientLine {
    let mut line = ClientLine::default();
    let mut conn: Option<Conn> = None;
    let interval = Duration::from_millis(sh.args.interval_ms);
    for k in 0..sh.args.tx {
        let due = start + interval * k as u32;
        tokio::time::sleep_until(due.into()).await;
        sh.progress
            .sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match transaction(&sh, &mut conn, id, k).await {
            Ok(ph) => {
                line.ok += 1;
                let from_due = due.elapsed();
                let mut rec = sh.rec.lock().expect("recorder lock");
                for (i, d) in ph.iter().enumerate() {
                    line.sums_ns[i] += d.as_nanos();
                    rec.phases[i].record(*d);
                }
                rec.total_from_due.record(from_due);
                drop(rec);
                sh.progress
                    .received
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => {
                line.failed += 1;
                conn = None;
                sh.progress
                    .errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                *sh.rec
                    .lock()
                    .expect("recorder lock")
                    .failures
                    .entry(e.kind().to_owned())
                    .or_default() += 1;
            }
        }
    }
    if let Some(Conn::Raw(r)) = conn {
        r.shutdown().await;
    }
    line
}

fn avg_ms(sum_ns: u128, n: u64) -> f64 {
    if n == 0 {
        -1.0
    } else {
        sum_ns as f64 / n as f64 / 1e6
    }
}

fn ms(s: &LatencySummary) -> String {
    format!(
        "{:>9.3} {:>9.3} {:>9.3} {:>9.3}",
        s.mean / 1e3,
        s.p50 / 1e3,
        s.p99 / 1e3,
        s.max / 1e3
    )
}

/// Runs the scenario and prints its report.
pub async fn run(args: &S2sArgs) -> anyhow::Result<()> {
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
    let sh = Arc::new(Shared {
        args: args.clone(),
        http,
        rec: Mutex::new(Recorders::default()),
        progress: progress.clone(),
        tls: tls_files.as_ref().map(|p| p.client()).transpose()?,
    });
    let t0 = Instant::now();
    let mut tasks = Vec::with_capacity(args.clients);
    for id in 0..args.clients {
        let start = t0 + Duration::from_millis(args.ramp_ms) * id as u32;
        tasks.push(tokio::spawn(run_client(sh.clone(), id, start)));
    }
    let mut lines = Vec::with_capacity(args.clients);
    for t in tasks {
        lines.push(t.await.context("client task")?);
    }
    let duration = t0.elapsed();
    progress.finish();
    let server = target.finish();

    let ok: u64 = lines.iter().map(|l| l.ok).sum();
    let failed: u64 = lines.iter().map(|l| l.failed).sum();
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
                "{id},{},{},{},{:.3},{:.3},{:.3},{:.3}",
                args.tx,
                l.ok,
                l.failed,
                avg_ms(l.sums_ns[0], l.ok),
                avg_ms(l.sums_ns[1], l.ok),
                avg_ms(l.sums_ns[2], l.ok),
                avg_ms(l.sums_ns[3], l.ok)
            )?;
        }
    }
    let rec = sh.rec.lock().expect("recorder lock");
    let avgs: Vec<f64> = (0..4).map(|i| avg_ms(sums[i], ok)).collect();
    let summary_line = format!(
        "numOfClient={}, numOfTx={}, numOfPacketsPerTx={}, txIntervalMillis={}, totalSuccessfulTx={ok}, totalFailureTx={failed}, avgCreateTxMillis={:.0}, avgSendMillis={:.0}, avgConfirmMillis={:.0}, avgCompleteMillis={:.0}\n",
        args.clients, args.tx, args.packets, args.interval_ms, avgs[0], avgs[1], avgs[2], avgs[3]
    );
    let mut human = summary_line.clone();
    human.push_str(&format!(
        "avg ms: create {:.3}  send {:.3}  confirm {:.3}  complete {:.3}\n",
        avgs[0], avgs[1], avgs[2], avgs[3]
    ));
    human.push_str("phase (ms)      mean       p50       p99       max\n");
    let mut phase_json = serde_json::Map::new();
    for (i, name) in PHASES.iter().enumerate() {
        let s = rec.phases[i].summary_us();
        human.push_str(&format!("{name:<9}{}\n", ms(&s)));
        phase_json.insert((*name).into(), serde_json::to_value(s)?);
    }
    let total = rec.total_from_due.summary_us();
    human.push_str(&format!("{:<9}{}\n", "tx(due)", ms(&total)));

    let mut report = Report::new(
        "s2s",
        serde_json::json!({
            "clients": args.clients, "tx": args.tx, "packets": args.packets,
            "interval_ms": args.interval_ms, "transport": format!("{:?}", args.transport).to_lowercase(),
            "tls": args.tls, "gzip": args.gzip, "ramp_ms": args.ramp_ms,
        }),
    );
    report.sent = ok + failed;
    report.received = ok;
    for (k, v) in &rec.failures {
        report.error(k, *v);
    }
    report.duration_s = duration.as_secs_f64();
    report.rate = ok as f64 / report.duration_s.max(1e-9);
    report.latency_us = total;
    report.server = server;
    report.extra = serde_json::json!({
        "numOfClient": args.clients, "numOfTx": args.tx, "numOfPacketsPerTx": args.packets,
        "txIntervalMillis": args.interval_ms, "totalSuccessfulTx": ok, "totalFailureTx": failed,
        "avgCreateTxMillis": avgs[0], "avgSendMillis": avgs[1], "avgConfirmMillis": avgs[2],
        "avgCompleteMillis": avgs[3], "phases_us": phase_json,
    });
    report.emit(args.common.json, &human);
    Ok(())
}
