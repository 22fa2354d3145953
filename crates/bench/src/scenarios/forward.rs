//! `tidegate bench forward`: seed 004's load — Fluentd Forward clients
//! sending PackedForward chunks (with chunk ids and acks, as Fluency does)
//! into Tidegate, routed to the null sink (or, with `--kafka`, wherever the
//! extra config routes `logs.>`).
//!
//! Open model: each connection's chunks are *due* on a fixed schedule that
//! adds up to `--rate` lines/s; ack latency is measured from the due time, so
//! a stalled server shows as latency instead of a slower sender. A chunk
//! holds `--batch` records, or fewer at low rates so that a chunk leaves at
//! least every `--flush-interval-ms` (Fluentd's buffer flushes on time too).
//! `--rate 0` sends as fast as the window of unacked chunks allows.
//!
//! Reported: records/s accepted by the hub (from the server's `/metrics`
//! when it was spawned; acked records otherwise), ack latency percentiles,
//! client and server CPU % and RSS. `--sweep-rate 10,100,…` runs once per
//! rate and prints one row each, in the seed's table layout.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tidegate_forward::client::AckReader;
use tidegate_forward::codec::encode::{
    packed_entries, record_from_json, write_option, MessageOption, TimeForm,
};
use tidegate_forward::codec::EventTime;
use tidegate_forward::{ClientOptions, ClientTls, ForwardClient};
use tokio::sync::Semaphore;

use crate::latency::LatencyRecorder;
use crate::pacer::{sleep_until, Schedule};
use crate::progress::Progress;
use crate::report::{percentile_table, Report};
use crate::sampler::Sampler;
use crate::server::ServerAddrs;
use crate::{CommonArgs, Target};

/// Parameters of the forward scenario (names follow seed 004 where it has them).
#[derive(Debug, Clone, clap::Args)]
pub struct ForwardArgs {
    /// Target and output options.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Rate of writing, lines (records) per second over all connections; 0
    /// sends as fast as acks (or the socket) allow.
    #[arg(long, default_value_t = 100_000)]
    pub rate: u64,
    /// Run once per rate (comma-separated lines/s) and print one row each.
    #[arg(long, value_delimiter = ',')]
    pub sweep_rate: Vec<u64>,
    /// Client connections (each an agent with its own schedule).
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Records per PackedForward chunk (at most).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Approximate size of one msgpack record, bytes.
    #[arg(long, default_value_t = 100)]
    pub record_bytes: usize,
    /// A chunk leaves at least this often, even if not full (low rates).
    #[arg(long, default_value_t = 100)]
    pub flush_interval_ms: u64,
    /// Ask for acks (a `chunk` option) and measure their latency.
    #[arg(long)]
    pub ack: bool,
    /// Unacked chunks allowed per connection before the sender waits.
    #[arg(long, default_value_t = 16)]
    pub window: usize,
    /// TLS to the server (the spawned server gets a throw-away certificate;
    /// an external `--target` must present one for `localhost` signed by
    /// `--ca`).
    #[arg(long)]
    pub tls: bool,
    /// CA certificate (PEM) to trust with `--tls` and `--target`.
    #[arg(long)]
    pub ca: Option<std::path::PathBuf>,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before measuring starts.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Tag of every chunk (the topic is `logs.<tag>`).
    #[arg(long, default_value = "bench.app")]
    pub tag: String,
    /// Extra TOML for the spawned server (e.g. a `[sinks.kafka]` section and
    /// a route replacing the null route).
    #[arg(long)]
    pub server_toml: Option<String>,
}

/// One run's figures.
#[derive(Debug, Clone, Default, serde::Serialize)]
struct RunResult {
    rate: u64,
    sent_records: u64,
    acked_records: u64,
    accepted_records: u64,
    accepted_per_s: f64,
    duration_s: f64,
    latency: crate::LatencySummary,
    server: crate::ProcessStats,
    client: crate::ProcessStats,
    errors: u64,
}

/// Runs the scenario and prints its report.
pub async fn run(args: &ForwardArgs) -> anyhow::Result<()> {
    if args.connections == 0 || args.batch == 0 || args.window == 0 {
        bail!("--connections, --batch and --window must be at least 1");
    }
    let rates = if args.sweep_rate.is_empty() {
        vec![args.rate]
    } else {
        args.sweep_rate.clone()
    };
    let mut rows = Vec::new();
    let mut last_report = None;
    for &rate in &rates {
        let (row, report) = run_once(args, rate).await?;
        if !args.common.json {
            eprintln!(
                "rate {rate}: accepted {:.0} records/s, server cpu {:.1}%",
                row.accepted_per_s, row.server.cpu_pct_avg
            );
        }
        rows.push(row);
        last_report = Some(report);
    }
    let mut report = last_report.expect("at least one rate");
    if rates.len() > 1 {
        report.extra = serde_json::json!({ "rows": rows });
    }
    report.emit(args.common.json, &human_table(args, &rows));
    Ok(())
}

fn human_table(args: &ForwardArgs, rows: &[RunResult]) -> String {
    let mut s = format!(
        "Forward {} (PackedForward, {} conn, batch {}, ~{} B records{}{})\n",
        if args.tls { "with TLS" } else { "without TLS" },
        args.connections,
        args.batch,
        args.record_bytes,
        if args.ack { ", ack" } else { "" },
        if args.server_toml.is_some() {
            ", custom route"
        } else {
            ", null route"
        },
    );
    s.push_str("| rate of writing (lines/sec) | accepted (records/s) | server CPU (%) | server RSS (kB) | client CPU (%) | client RSS (kB) | ack p50 (ms) | ack p99 (ms) | ack max (ms) | errors |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let rate = if r.rate == 0 {
            "max".to_owned()
        } else {
            r.rate.to_string()
        };
        let ms = |us: f64| {
            if args.ack {
                format!("{:.2}", us / 1000.0)
            } else {
                "-".into()
            }
        };
        s.push_str(&format!(
            "| {rate} | {:.0} | {:.1} | {} | {:.1} | {} | {} | {} | {} | {} |\n",
            r.accepted_per_s,
            r.server.cpu_pct_avg,
            r.server.rss_kb_max,
            r.client.cpu_pct_avg,
            r.client.rss_kb_max,
            ms(r.latency.p50),
            ms(r.latency.p99),
            ms(r.latency.max),
            r.errors
        ));
    }
    if let (true, Some(r)) = (args.ack && rows.len() == 1, rows.first()) {
        s.push_str(&percentile_table("ack latency", &r.latency));
    }
    s
}

/// The server config the spawned server gets: topics `logs.<tag>`, routed to
/// the null sink unless `--server-toml` says otherwise; TLS files if asked.
fn server_toml(args: &ForwardArgs, tls: Option<&tidegate_forward::TlsConfig>) -> String {
    let mut s = String::from("[forward]\ntopic_prefix = \"logs.\"\n");
    if let Some(t) = tls {
        s.push_str(&format!(
            "[forward.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
            t.cert.display(),
            t.key.display()
        ));
    }
    match &args.server_toml {
        Some(extra) => {
            s.push_str(extra);
            s.push('\n');
        }
        None => s.push_str("[[routes]]\ntopics = \"logs.>\"\nsink = \"null\"\n"),
    }
    s
}

/// Deletes a directory when dropped (the throw-away TLS certificates).
struct RemoveDirOnDrop(std::path::PathBuf);

impl Drop for RemoveDirOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn run_once(args: &ForwardArgs, rate: u64) -> anyhow::Result<(RunResult, Report)> {
    let pki_dir =
        std::env::temp_dir().join(format!("tidegate-bench-forward-{}", std::process::id()));
    // Removed however the run ends, including a server that fails to start.
    let _pki_cleanup = RemoveDirOnDrop(pki_dir.clone());
    let mut ca_pem = None;
    let mut tls_cfg = None;
    if args.tls {
        if let Some(ca) = &args.ca {
            ca_pem = Some(std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?);
        } else if args.common.target.is_none() {
            std::fs::create_dir_all(&pki_dir)?;
            let (cfg, pem) = tidegate_forward::tls::generate_test_pki(&pki_dir)?;
            ca_pem = Some(pem.into_bytes());
            tls_cfg = Some(cfg);
        } else {
            bail!("--tls with --target needs --ca");
        }
    }
    let target = Target::resolve(&args.common, &server_toml(args, tls_cfg.as_ref()))?;
    let addr = target.addr(|a: &ServerAddrs| a.forward);
    let metrics_addr = match &target {
        Target::Spawned(s) => Some(s.addrs().http),
        Target::External(_) => None,
    };
    let options = ClientOptions {
        tls: ca_pem.map(|pem| ClientTls {
            ca_pem: pem,
            server_name: "localhost".into(),
        }),
        ..Default::default()
    };
    let client_sampler = Sampler::start_self(Duration::from_secs(1));
    let result = drive(args, rate, addr, options, metrics_addr).await;
    let client = client_sampler.finish();
    let server = target.finish();
    let (mut row, mut report) = result?;
    row.client = client;
    row.server = server;
    report.client = client;
    report.server = server;
    Ok((row, report))
}

/// Counters shared by every connection of a run.
#[derive(Debug, Default)]
struct Totals {
    sent_records: AtomicU64,
    acked_records: AtomicU64,
    acked_in_window: AtomicU64,
    errors: AtomicU64,
}

/// One connection's plan.
#[derive(Debug, Clone)]
struct ConnPlan {
    id: usize,
    schedule: Option<Schedule>,
    records_per_chunk: usize,
    measure_from: Instant,
    stop_at: Instant,
}

async fn drive(
    args: &ForwardArgs,
    rate: u64,
    addr: SocketAddr,
    options: ClientOptions,
    metrics_addr: Option<SocketAddr>,
) -> anyhow::Result<(RunResult, Report)> {
    let record = make_record(args.record_bytes);
    let per_conn_rate = rate as f64 / args.connections as f64;
    let records_per_chunk = if rate == 0 {
        args.batch
    } else {
        let by_time = (per_conn_rate * args.flush_interval_ms as f64 / 1000.0).ceil() as usize;
        by_time.clamp(1, args.batch)
    };
    let entries = packed_entries(
        &vec![(EventTime::now(), record.as_slice()); records_per_chunk],
        TimeForm::FixExt8,
    );
    let head = chunk_head(&args.tag, entries.len());
    let mut clients = Vec::new();
    for _ in 0..args.connections {
        clients.push(
            ForwardClient::connect(addr, options.clone())
                .await
                .context("connecting")?,
        );
    }
    let start = Instant::now() + Duration::from_millis(50);
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let stop_at = measure_from + Duration::from_secs_f64(args.duration);
    let totals = Arc::new(Totals::default());
    let progress = Progress::start("forward");
    let mut tasks = Vec::new();
    for (id, c) in clients.into_iter().enumerate() {
        // Stagger connections evenly within one chunk interval.
        let schedule = (rate > 0).then(|| {
            let chunk_rate = per_conn_rate / records_per_chunk as f64;
            let offset = Duration::from_secs_f64(id as f64 / args.connections as f64 / chunk_rate);
            Schedule::new(start + offset, chunk_rate)
        });
        let plan = ConnPlan {
            id,
            schedule,
            records_per_chunk,
            measure_from,
            stop_at,
        };
        tasks.push(tokio::spawn(run_connection(
            c,
            plan,
            head.clone(),
            entries.clone(),
            args.ack,
            args.window,
            totals.clone(),
            progress.clone(),
        )));
    }
    sleep_until(measure_from).await;
    let published_before = scrape_published(metrics_addr).await;
    let scraped_from = Instant::now();
    sleep_until(stop_at).await;
    let published_after = scrape_published(metrics_addr).await;
    let scraped_to = Instant::now();
    let mut latency = LatencyRecorder::default();
    for t in tasks {
        match t.await {
            Ok(Ok(l)) => latency.merge(&l),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "forward bench connection failed");
                totals.errors.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => bail!("connection task panicked: {e}"),
        }
    }
    progress.finish();
    // Server-side count between the two scrapes (timed by the scrapes
    // themselves), else records acked inside the measured window.
    let (accepted, measured) = match (published_before, published_after) {
        (Some(a), Some(b)) => (
            b.saturating_sub(a),
            scraped_to.duration_since(scraped_from).as_secs_f64(),
        ),
        _ => (
            totals.acked_in_window.load(Ordering::Relaxed),
            stop_at.duration_since(measure_from).as_secs_f64(),
        ),
    };
    let row = RunResult {
        rate,
        sent_records: totals.sent_records.load(Ordering::Relaxed),
        acked_records: totals.acked_records.load(Ordering::Relaxed),
        accepted_records: accepted,
        accepted_per_s: accepted as f64 / measured,
        duration_s: measured,
        latency: latency.summary_us(),
        errors: totals.errors.load(Ordering::Relaxed),
        ..Default::default()
    };
    let mut report = Report::new(
        "forward",
        serde_json::json!({
            "rate": rate, "connections": args.connections, "batch": args.batch,
            "records_per_chunk": records_per_chunk, "record_bytes": args.record_bytes,
            "ack": args.ack, "window": args.window, "tls": args.tls,
            "duration": args.duration, "warmup": args.warmup,
            "route": if args.server_toml.is_some() { "custom" } else { "null" },
        }),
    );
    report.sent = row.sent_records;
    report.received = if args.ack {
        row.acked_records
    } else {
        accepted
    };
    report.duration_s = measured;
    report.rate = row.accepted_per_s;
    report.latency_us = row.latency;
    report.error("connection", row.errors);
    if args.ack {
        report.error(
            "unacked_records",
            row.sent_records.saturating_sub(row.acked_records),
        );
    }
    report.extra =
        serde_json::json!({ "accepted_records": accepted, "acked_records": row.acked_records });
    Ok((row, report))
}

/// A msgpack record `{"message": "xxxx…"}` of about `bytes` bytes.
fn make_record(bytes: usize) -> Vec<u8> {
    let overhead = record_from_json(&serde_json::json!({"message": ""})).len() + 4;
    let text: String = "abcdefghijklmnopqrstuvwxyz0123456789"
        .chars()
        .cycle()
        .take(bytes.saturating_sub(overhead).max(1))
        .collect();
    record_from_json(&serde_json::json!({ "message": text }))
}

/// `[tag, str32 header` — the part of a PackedForward chunk before the entries.
fn chunk_head(tag: &str, entries_len: usize) -> Vec<u8> {
    let mut out = vec![0x93];
    rmp_str(&mut out, tag);
    out.push(0xdb);
    out.extend_from_slice(&(entries_len as u32).to_be_bytes());
    out
}

fn rmp_str(out: &mut Vec<u8>, s: &str) {
    // A str8/str32 header by hand keeps this file free of an rmp dependency.
    if s.len() < 32 {
        out.push(0xa0 | s.len() as u8);
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

#[allow(clippy::too_many_arguments)]
async fn run_connection(
    client: ForwardClient,
    plan: ConnPlan,
    head: Vec<u8>,
    entries: Vec<u8>,
    ack: bool,
    window: usize,
    totals: Arc<Totals>,
    progress: Arc<Progress>,
) -> anyhow::Result<LatencyRecorder> {
    let (mut writer, reader) = client.into_split();
    let window = Arc::new(Semaphore::new(window));
    // Due (or send) time of chunk `seq`, for latency, kept by the sender for
    // the unthrottled mode where there is no schedule to recompute it from.
    let sent_at: Arc<send_times::SendTimes> = Arc::new(send_times::SendTimes::default());
    let acks = ack.then(|| {
        tokio::spawn(read_acks(
            reader,
            plan.clone(),
            window.clone(),
            sent_at.clone(),
            totals.clone(),
            progress.clone(),
        ))
    });
    let mut frame = Vec::with_capacity(head.len() + entries.len() + 64);
    let mut seq: u64 = 0;
    let result: anyhow::Result<()> = async {
        loop {
            let due = match &plan.schedule {
                Some(s) => s.due(seq),
                None => Instant::now(),
            };
            if due >= plan.stop_at {
                break;
            }
            if plan.schedule.is_some() {
                sleep_until(due).await;
            }
            if ack {
                window.acquire().await.expect("never closed").forget();
            }
            frame.clear();
            frame.extend_from_slice(&head);
            frame.extend_from_slice(&entries);
            let chunk = format!("{}-{seq}", plan.id);
            let opt = MessageOption {
                chunk: ack.then_some(chunk.as_str()),
                size: Some(plan.records_per_chunk as u64),
                gzip: false,
            };
            write_option(&mut frame, &opt);
            sent_at.set(
                seq,
                if plan.schedule.is_some() {
                    due
                } else {
                    Instant::now()
                },
            );
            writer.write_all(&frame).await?;
            totals
                .sent_records
                .fetch_add(plan.records_per_chunk as u64, Ordering::Relaxed);
            progress
                .sent
                .fetch_add(plan.records_per_chunk as u64, Ordering::Relaxed);
            seq += 1;
        }
        Ok(())
    }
    .await;
    // Closing our side makes the server answer what is pending and close.
    let _ = writer.shutdown().await;
    let latency = match acks {
        Some(h) => match tokio::time::timeout(Duration::from_secs(30), h).await {
            Ok(Ok(lat)) => lat,
            _ => LatencyRecorder::default(),
        },
        None => LatencyRecorder::default(),
    };
    result?;
    Ok(latency)
}

async fn read_acks(
    mut reader: AckReader,
    plan: ConnPlan,
    window: Arc<Semaphore>,
    sent_at: Arc<send_times::SendTimes>,
    totals: Arc<Totals>,
    progress: Arc<Progress>,
) -> LatencyRecorder {
    let mut latency = LatencyRecorder::default();
    let n = plan.records_per_chunk as u64;
    loop {
        let chunk = match reader.next_ack().await {
            Ok(c) => c,
            Err(_) => break,
        };
        let now = Instant::now();
        window.add_permits(1);
        let Some(seq) = chunk.rsplit('-').next().and_then(|s| s.parse::<u64>().ok()) else {
            totals.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let due = sent_at.get(seq);
        totals.acked_records.fetch_add(n, Ordering::Relaxed);
        progress.received.fetch_add(n, Ordering::Relaxed);
        if now >= plan.measure_from && now < plan.stop_at {
            totals.acked_in_window.fetch_add(n, Ordering::Relaxed);
        }
        if let Some(due) = due {
            if due >= plan.measure_from {
                latency.record(now.duration_since(due));
            }
        }
    }
    latency
}

/// Send times of in-flight chunks, shared between a connection's sender and
/// its ack reader (a small ring indexed by sequence number).
mod send_times {
    use std::sync::Mutex;
    use std::time::Instant;

    const RING: usize = 4096;

    /// Ring of (sequence, send time).
    #[derive(Debug)]
    pub struct SendTimes {
        ring: Mutex<Vec<Option<(u64, Instant)>>>,
    }

    impl Default for SendTimes {
        fn default() -> Self {
            SendTimes {
                ring: Mutex::new(vec![None; RING]),
            }
        }
    }

    impl SendTimes {
        /// Records chunk `seq`'s due/send time.
        pub fn set(&self, seq: u64, t: Instant) {
            let mut g = self.ring.lock().expect("not poisoned");
            g[(seq as usize) % RING] = Some((seq, t));
        }

        /// The time of chunk `seq`, if still in the ring.
        pub fn get(&self, seq: u64) -> Option<Instant> {
            let g = self.ring.lock().expect("not poisoned");
            match g[(seq as usize) % RING] {
                Some((s, t)) if s == seq => Some(t),
                _ => None,
            }
        }
    }
}

/// `tidegate_hub_published_total` from the spawned server's `/metrics`.
async fn scrape_published(addr: Option<SocketAddr>) -> Option<u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = addr?;
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut body))
        .await
        .ok()?
        .ok()?;
    body.lines()
        .find(|l| l.starts_with("tidegate_hub_published_total "))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
}
