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
//! The measured window runs from the end of the warm-up to the end of the
//! schedule, timed by the two scrapes of the server's `/metrics` around it.
//! Within it: the offered rate counts records due, the sent rate records
//! written, and the rate records delivered — accepted by the hub
//! (`tidegate_hub_published_total`) when the server was spawned, acked ones
//! against an external `--target` (which needs `--ack`).
//!
//! Every ack's latency is recorded from its chunk's due time, however slow
//! the acks are; a chunk of the measured window that is never acked (still
//! unacked `--ack-drain-ms` after the schedule ended, or due but never
//! sent because the ack window stayed full or the connection ended) is
//! counted as an error and recorded with its latency up to the end of the
//! run (never before the schedule's end), so a stall cannot hide. Also
//! reported: client and server CPU % (over the measured window, read with
//! the two scrapes) and RSS. `--sweep-rate 10,100,…` runs
//! once per rate and prints one row each, in the seed's table layout.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
use crate::report::{percentile_table, Report, Window};
use crate::sampler::{CpuWindow, Marker, Sampler};
use crate::server::ServerAddrs;
use crate::{CommonArgs, Target};

/// Default of `--ack-drain-ms`: how long a connection waits for its
/// outstanding acks after its last chunk.
pub const DEFAULT_ACK_DRAIN_MS: u64 = 30_000;

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
    /// How long each connection waits for its outstanding acks after its
    /// last chunk, milliseconds; chunks still unacked then are counted
    /// (`unacked_records`) and recorded with their latency up to then.
    #[arg(long, default_value_t = DEFAULT_ACK_DRAIN_MS)]
    pub ack_drain_ms: u64,
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

/// One run's figures (one row of the sweep table).
#[derive(Debug, Clone, Default, serde::Serialize)]
struct RunResult {
    /// The asked `--rate` (the seed's "rate of writing"; 0 = unpaced).
    rate: u64,
    sent_records: u64,
    acked_records: u64,
    /// Records delivered within the window.
    accepted_records: u64,
    /// Records due per second over the window (`None` when unpaced).
    offered_rate: Option<f64>,
    /// Records written per second over the window (`None`: empty window).
    sent_rate: Option<f64>,
    /// Records delivered per second over the window (the rate; `None`:
    /// empty window).
    accepted_per_s: Option<f64>,
    duration_s: f64,
    latency: Option<crate::LatencySummary>,
    server: crate::ProcessStats,
    client: crate::ProcessStats,
    errors: u64,
}

/// Runs the scenario and prints its report.
pub async fn run(args: &ForwardArgs) -> anyhow::Result<()> {
    if args.connections == 0 || args.batch == 0 || args.window == 0 {
        bail!("--connections, --batch and --window must be at least 1");
    }
    if args.common.target.is_some() && !args.ack {
        bail!(
            "--target without --ack: nothing would count the records delivered \
             (an external server's /metrics is not known); add --ack"
        );
    }
    let rates = if args.sweep_rate.is_empty() {
        vec![args.rate]
    } else {
        args.sweep_rate.clone()
    };
    let mut rows = Vec::new();
    let mut empty_runs = Vec::new();
    let mut last_report = None;
    for &rate in &rates {
        let (row, report) = run_once(args, rate).await?;
        if !args.common.json {
            eprintln!(
                "rate {rate}: accepted {} records/s, server cpu {}%",
                or_dash(row.accepted_per_s, 0),
                or_dash(row.server.cpu_avg(), 1)
            );
        }
        if let Some(why) = report.measured_nothing() {
            empty_runs.push(format!("rate {rate}: {why}"));
        }
        rows.push(row);
        last_report = Some(report);
    }
    let mut report = last_report.expect("at least one rate");
    if rates.len() > 1 {
        let extra = std::mem::take(&mut report.extra);
        report.extra = serde_json::json!({ "rows": rows, "last_run": extra });
    }
    report.emit(args.common.json, &human_table(args, &rows))?;
    if !empty_runs.is_empty() {
        bail!("forward measured nothing in {}", empty_runs.join("; "));
    }
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
    s.push_str("| rate of writing (lines/sec) | offered rate (records/s) | sent rate (records/s) | rate: accepted (records/s) | server CPU (%) | server RSS (kB) | client CPU (%) | client RSS (kB) | ack p50 (ms) | ack p99 (ms) | ack max (ms) | errors |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let rate = if r.rate == 0 {
            "max".to_owned()
        } else {
            r.rate.to_string()
        };
        let ms = |pick: fn(&crate::LatencySummary) -> f64| match &r.latency {
            Some(l) => format!("{:.2}", pick(l) / 1000.0),
            None => "-".into(),
        };
        let offered = match r.offered_rate {
            Some(o) => format!("{o:.0}"),
            None if r.rate == 0 => "unpaced".into(),
            None => "-".into(),
        };
        // "-" for what was not measured: an empty window's rates, the
        // resources of a server or client not sampled.
        let cpu = |p: &crate::ProcessStats| or_dash(p.cpu_avg(), 1);
        let rss = |p: &crate::ProcessStats| or_dash(p.measured().then_some(p.rss_kb_max as f64), 0);
        s.push_str(&format!(
            "| {rate} | {offered} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            or_dash(r.sent_rate, 0),
            or_dash(r.accepted_per_s, 0),
            cpu(&r.server),
            rss(&r.server),
            cpu(&r.client),
            rss(&r.client),
            ms(|l| l.p50),
            ms(|l| l.p99),
            ms(|l| l.max),
            r.errors
        ));
    }
    if let (true, Some(r)) = (args.ack && rows.len() == 1, rows.first()) {
        s.push_str(&percentile_table("ack latency", r.latency.as_ref()));
    }
    s
}

/// `value` with `decimals`, or "-" when there is none.
fn or_dash(value: Option<f64>, decimals: usize) -> String {
    value
        .map(|v| format!("{v:.decimals$}"))
        .unwrap_or_else(|| "-".into())
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
    let marker = target.marker().and(&client_sampler.marker());
    let result = drive(args, rate, addr, options, metrics_addr, &marker).await;
    let window = result.as_ref().ok().and_then(|r| r.2);
    let client = client_sampler.finish_over(window);
    let server = target.finish(window)?;
    let (mut row, mut report, _) = result?;
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
    errors: AtomicU64,
    /// Records of the measured window never acked (still in flight when the
    /// connection ended).
    unacked_records: AtomicU64,
    /// Records of the measured window due but never sent (the ack window
    /// stayed full until the schedule ended).
    unsent_records: AtomicU64,
}

/// Snapshots of the counters that give the window's sent and delivered
/// records.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    at: Instant,
    sent: u64,
    acked: u64,
    published: Option<u64>,
}

impl Snapshot {
    async fn take(totals: &Totals, metrics: Option<SocketAddr>) -> Snapshot {
        let published = scrape_published(metrics).await;
        Snapshot {
            at: Instant::now(),
            sent: totals.sent_records.load(Ordering::Relaxed),
            acked: totals.acked_records.load(Ordering::Relaxed),
            published,
        }
    }
}

/// One connection's plan.
#[derive(Debug, Clone)]
struct ConnPlan {
    id: usize,
    schedule: Option<Schedule>,
    records_per_chunk: usize,
    measure_from: Instant,
    stop_at: Instant,
    /// How long to wait for outstanding acks after the last chunk.
    ack_drain: Duration,
}

impl ConnPlan {
    /// Chunks due in `(from, to]` that are part of the schedule (due before
    /// `stop_at`).
    fn due_between(&self, from: Instant, to: Instant) -> u64 {
        let Some(s) = &self.schedule else { return 0 };
        let last = self.stop_at - Duration::from_nanos(1);
        let by = |t: Instant| {
            if t < s.start() {
                0
            } else {
                s.due_by(t.min(last))
            }
        };
        by(to).saturating_sub(by(from))
    }
}

/// Runs the load; returns its row, its report, and its measured window as
/// marked on `marker`'s samplers (with the two scrapes that time it).
async fn drive(
    args: &ForwardArgs,
    rate: u64,
    addr: SocketAddr,
    options: ClientOptions,
    metrics_addr: Option<SocketAddr>,
    marker: &Marker,
) -> anyhow::Result<(RunResult, Report, Option<CpuWindow>)> {
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
    let mut plans = Vec::new();
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
            ack_drain: Duration::from_millis(args.ack_drain_ms),
        };
        plans.push(plan.clone());
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
    let before = Snapshot::take(&totals, metrics_addr).await;
    let cpu_from = marker.mark();
    sleep_until(stop_at).await;
    let after = Snapshot::take(&totals, metrics_addr).await;
    let cpu_window = CpuWindow {
        from: cpu_from,
        to: marker.mark(),
    };
    let mut latency = LatencyRecorder::default();
    for t in tasks {
        let outcome = t.await.context("connection task panicked")?;
        latency.merge(&outcome.latency);
        if let Some(e) = outcome.error {
            tracing::warn!(error = %e, "forward bench connection failed");
            totals.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    progress.finish();
    // The window is timed by the two snapshots; delivered = accepted by the
    // hub between the scrapes, else acked between them.
    let delivered = match (before.published, after.published) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => after.acked.saturating_sub(before.acked),
    };
    let due = (rate > 0).then(|| {
        plans
            .iter()
            .map(|p| p.due_between(before.at, after.at))
            .sum::<u64>()
            * records_per_chunk as u64
    });
    let window = Window {
        seconds: after.at.duration_since(before.at).as_secs_f64(),
        due,
        sent: after.sent.saturating_sub(before.sent),
        delivered,
    };
    let unacked = totals.unacked_records.load(Ordering::Relaxed);
    let unsent = totals.unsent_records.load(Ordering::Relaxed);
    let mut report = Report::new(
        "forward",
        "record",
        serde_json::json!({
            "rate": rate, "connections": args.connections, "batch": args.batch,
            "records_per_chunk": records_per_chunk, "record_bytes": args.record_bytes,
            "ack": args.ack, "window": args.window, "tls": args.tls,
            "duration": args.duration, "warmup": args.warmup,
            "route": if args.server_toml.is_some() { "custom" } else { "null" },
        }),
    );
    report.set_window(window);
    report.sent = totals.sent_records.load(Ordering::Relaxed);
    report.received = if args.ack {
        totals.acked_records.load(Ordering::Relaxed)
    } else {
        delivered
    };
    report.latency_us = latency.summary_us();
    report.latency_expected = args.ack;
    report.error("connection", totals.errors.load(Ordering::Relaxed));
    report.error("unacked_records", unacked);
    report.error("unsent_due_records", unsent);
    report.extra = serde_json::json!({
        "accepted_records": delivered,
        "delivered_by": if before.published.is_some() { "hub_published_total" } else { "acks" },
        "acked_records": totals.acked_records.load(Ordering::Relaxed),
        "latency_samples": latency.count(),
    });
    let row = RunResult {
        rate,
        sent_records: report.sent,
        acked_records: totals.acked_records.load(Ordering::Relaxed),
        accepted_records: delivered,
        offered_rate: report.offered_rate,
        sent_rate: report.sent_rate,
        accepted_per_s: report.rate,
        duration_s: report.duration_s,
        latency: report.latency_us,
        errors: report.total_errors(),
        ..Default::default()
    };
    Ok((row, report, Some(cpu_window)))
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
) -> ConnOutcome {
    let (mut writer, reader) = client.into_split();
    let window = Arc::new(Semaphore::new(window));
    let acks = Arc::new(AckBook::default());
    let reader_task = ack.then(|| {
        tokio::spawn(read_acks(
            reader,
            plan.clone(),
            window.clone(),
            acks.clone(),
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
                // Bounded by the schedule: a window that stays full until
                // the end stops the sender (the chunks it could not send
                // are counted below), it never waits forever.
                match tokio::time::timeout_at(plan.stop_at.into(), window.acquire()).await {
                    Ok(permit) => permit.expect("never closed").forget(),
                    Err(_) => break,
                }
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
            if ack {
                // Open model: latency from the due time; unpaced, from the
                // moment of sending.
                let from = if plan.schedule.is_some() {
                    due
                } else {
                    Instant::now()
                };
                acks.sent(seq, from);
            }
            if let Err(e) = writer.write_all(&frame).await {
                // Not sent after all: counted below as due and never sent
                // (once, not also as in flight).
                acks.lock().in_flight.remove(&seq);
                return Err(e.into());
            }
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
    let Some(reader_task) = reader_task else {
        return ConnOutcome {
            latency: LatencyRecorder::default(),
            error: result.err(),
        };
    };
    let abort = reader_task.abort_handle();
    // Done when every chunk sent is acked, or the server closes, or the
    // drain time is up.
    let drained = async {
        tokio::select! {
            _ = reader_task => {}
            _ = acks.all_acked() => {}
        }
    };
    let timed_out = tokio::time::timeout(plan.ack_drain, drained).await.is_err();
    abort.abort();
    if timed_out {
        tracing::warn!(
            connection = plan.id,
            "acks still outstanding {:?} after the last chunk; counted as unacked",
            plan.ack_drain
        );
    }
    // The end of the run for this connection: now, and never before the
    // schedule's end — a connection that ended early (the server closed
    // it or died) still had chunks due until then, none of them delivered.
    let end = Instant::now().max(plan.stop_at);
    // Whatever is still in flight was never acked; a chunk of the schedule
    // never sent was due all the same. Both count, with their latency up to
    // the end (after every due time, so never 0), so that a stall shows in
    // the tail instead of vanishing.
    let n = plan.records_per_chunk as u64;
    let mut book = acks.lock();
    for due in std::mem::take(&mut book.in_flight).into_values() {
        totals.unacked_records.fetch_add(n, Ordering::Relaxed);
        if due >= plan.measure_from {
            book.latency.record(end.duration_since(due));
        }
    }
    if let Some(s) = &plan.schedule {
        let mut k = seq;
        while s.due(k) < plan.stop_at {
            totals.unsent_records.fetch_add(n, Ordering::Relaxed);
            if s.due(k) >= plan.measure_from {
                book.latency.record(end.duration_since(s.due(k)));
            }
            k += 1;
        }
    }
    let latency = std::mem::take(&mut book.latency);
    drop(book);
    ConnOutcome {
        latency,
        error: result.err(),
    }
}

/// What a connection measured, kept even when it failed.
struct ConnOutcome {
    /// Ack latencies (and the late chunks') of the measured window.
    latency: LatencyRecorder,
    /// Why the connection ended early, if it did.
    error: Option<anyhow::Error>,
}

/// A connection's chunks in flight and the latency of those acked, shared
/// by its sender and its ack reader. The reader records into it as acks
/// arrive, so nothing recorded is lost if the reader has to be stopped.
#[derive(Debug, Default)]
struct AckBook {
    inner: Mutex<AckState>,
    /// Woken after every ack.
    acked: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct AckState {
    /// Sequence number → due time (send time when unpaced) of every chunk
    /// sent and not yet acked; the ack window bounds its size.
    in_flight: BTreeMap<u64, Instant>,
    /// Ack latencies of the measured window.
    latency: LatencyRecorder,
}

impl AckBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, AckState> {
        self.inner.lock().expect("ack book lock not poisoned")
    }

    /// Chunk `seq`, due at `due`, is about to be written.
    fn sent(&self, seq: u64, due: Instant) {
        self.lock().in_flight.insert(seq, due);
    }

    /// Waits until no chunk is in flight.
    async fn all_acked(&self) {
        while !self.lock().in_flight.is_empty() {
            self.acked.notified().await;
        }
    }
}

async fn read_acks(
    mut reader: AckReader,
    plan: ConnPlan,
    window: Arc<Semaphore>,
    acks: Arc<AckBook>,
    totals: Arc<Totals>,
    progress: Arc<Progress>,
) {
    let n = plan.records_per_chunk as u64;
    while let Ok(chunk) = reader.next_ack().await {
        let now = Instant::now();
        window.add_permits(1);
        let Some(seq) = chunk.rsplit('-').next().and_then(|s| s.parse::<u64>().ok()) else {
            totals.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let mut book = acks.lock();
        let Some(due) = book.in_flight.remove(&seq) else {
            // An ack for a chunk not in flight (a duplicate or a stranger).
            drop(book);
            totals.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        if due >= plan.measure_from {
            book.latency.record(now.duration_since(due));
        }
        drop(book);
        acks.acked.notify_one();
        totals.acked_records.fetch_add(n, Ordering::Relaxed);
        progress.received.fetch_add(n, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use tidegate_forward::codec::encode::write_ack;
    use tidegate_forward::codec::{ForwardDecoder, Limits};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A Forward peer that reads chunks and acks each `ack_delay` later, or
    /// never; it keeps the connection open after the client's end.
    async fn slow_acker(ack_delay: Option<Duration>) -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let (mut r, w) = s.into_split();
            let w = Arc::new(tokio::sync::Mutex::new(w));
            let mut decoder = ForwardDecoder::new(Limits::default());
            let (mut buf, mut events) = (BytesMut::new(), Vec::new());
            while r.read_buf(&mut buf).await.unwrap_or(0) > 0 {
                while let Some(f) = decoder.decode(&mut buf, &mut events).unwrap() {
                    events.clear();
                    if let (Some(chunk), Some(delay)) = (f.chunk, ack_delay) {
                        let w = w.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let mut out = Vec::new();
                            write_ack(&mut out, &chunk);
                            let _ = w.lock().await.write_all(&out).await;
                        });
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(w);
        });
        addr
    }

    /// A Forward peer that takes the connection, reads for `after` and
    /// closes it without acking anything: a server that dies mid-run.
    async fn closing_peer(after: Duration) -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 64 * 1024];
            let _ = tokio::time::timeout(after, async {
                while s.read(&mut buf).await.unwrap_or(0) > 0 {}
            })
            .await;
        });
        addr
    }

    fn args(window: usize, warmup: f64, ack_drain_ms: u64) -> ForwardArgs {
        ForwardArgs {
            common: CommonArgs {
                target: None,
                json: true,
            },
            rate: 2_000,
            sweep_rate: Vec::new(),
            connections: 1,
            batch: 100,
            record_bytes: 100,
            flush_interval_ms: 100,
            ack: true,
            window,
            ack_drain_ms,
            tls: false,
            ca: None,
            duration: 1.0,
            warmup,
            tag: "bench.app".into(),
            server_toml: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slow_acks_are_all_recorded_from_the_due_time() {
        let addr = slow_acker(Some(Duration::from_millis(300))).await;
        let a = args(16, 0.2, 5_000);
        let (row, report, _) = drive(
            &a,
            a.rate,
            addr,
            ClientOptions::default(),
            None,
            &Marker::default(),
        )
        .await
        .unwrap();
        // 20 chunks of 100 records a second; 1 s measured.
        let latency = report.latency_us.expect("acks were recorded");
        assert!(latency.p50 >= 300_000.0, "{latency:?}");
        assert_eq!(report.extra["latency_samples"], 20, "{}", report.to_json());
        assert_eq!(row.acked_records, row.sent_records);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_never_acked_or_never_sent_count_as_late_not_missing() {
        let addr = slow_acker(None).await;
        let a = args(4, 0.0, 300);
        let (_, report, _) = drive(
            &a,
            a.rate,
            addr,
            ClientOptions::default(),
            None,
            &Marker::default(),
        )
        .await
        .unwrap();
        // The window of 4 chunks fills and stays full: those 4 are unacked,
        // the other 16 due in the second were never sent. All 20 are in the
        // latency histogram, up to the end of the run.
        assert_eq!(report.errors["unacked_records"], 400, "{:?}", report.errors);
        assert_eq!(
            report.errors["unsent_due_records"], 1_600,
            "{:?}",
            report.errors
        );
        assert_eq!(report.extra["latency_samples"], 20, "{}", report.to_json());
        assert!(report.latency_us.unwrap().max >= 1_000_000.0);
        assert!(report
            .measured_nothing()
            .unwrap()
            .contains("no record was delivered"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_due_after_the_connection_ended_are_late_never_zero() {
        let addr = closing_peer(Duration::from_millis(200)).await;
        let a = args(16, 0.0, 300);
        let (_, report, _) = drive(
            &a,
            a.rate,
            addr,
            ClientOptions::default(),
            None,
            &Marker::default(),
        )
        .await
        .unwrap();
        // The connection ends about 0.2 s into the 1 s schedule. Each of
        // the 20 chunks due in the second is counted once (in flight or
        // never sent) and recorded up to at least the schedule's end: the
        // last is due 50 ms before it, the median about 0.5 s.
        let late = report.errors.get("unacked_records").copied().unwrap_or(0)
            + report.errors["unsent_due_records"];
        assert_eq!(late, 2_000, "{:?}", report.errors);
        assert_eq!(report.extra["latency_samples"], 20, "{}", report.to_json());
        let l = report.latency_us.expect("late chunks recorded");
        assert!(l.p50 >= 300_000.0, "{l:?}");
        assert!(l.mean >= 300_000.0, "{l:?}");
    }
}
