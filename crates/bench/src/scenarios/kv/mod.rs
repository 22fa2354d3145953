//! `tidegate bench kv`: seed 003 (the highload-dht course project measured
//! with wrk2) — fixed-rate, coordinated-omission-corrected HTTP load on the
//! KV API, and the seed's table: rate, avg, p90, p99, max.
//!
//! - Target: `--target ADDR` (a running node), or `--nodes N` local
//!   `tidegate serve` nodes started here (`cluster`); `--spread` sends
//!   to every node instead of node 0 alone (the seed sent all to one).
//! - Load (`load`): `--rate` requests/s over `--connections`, each
//!   request's latency counted from when it was due; `--rate 0` is wrk's
//!   closed loop instead (as fast as answers come).
//! - Requests (`request`): `--op put|get|mixed`, `--value-bytes`,
//!   `--keys`, `--ack`/`--from` appended to every query.
//! - `--prefill-bytes B`: before measuring, write enough distinct keys that
//!   each node stores B bytes of values (keys × value bytes × from / nodes);
//!   GETs then read those keys. `--op get|mixed` on spawned nodes without
//!   it fills `--keys` keys. A key whose fill PUT fails (a 504 while a
//!   node compacts under the fill) is written again, up to 5 attempts.
//! - `--find-rate MS`: the highest rate whose p90 stays under MS
//!   milliseconds with every request delivered (doubling, then bisecting;
//!   at most `--find-steps` runs), the seed's "optimal rate".
//! - `--anchor nginx` (`nginx`): the same load (same requests, rate or
//!   search, connections, duration) against nginx answering a trivial 200,
//!   in the same command, after the KV nodes stopped.
//!
//! A run that delivered nothing or recorded no latency fails. The server's
//! (the nodes' summed) and the client's CPU cover the measured window of
//! the run the report stands for (with `--find-rate`, the best run under
//! the bound, else the last), read at its start and end.

mod cluster;
mod http;
mod load;
mod nginx;
mod request;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use self::cluster::{Cluster, ClusterSpec};
use self::load::{Expect, LoadOutcome, LoadSpec};
use self::request::{Op, RequestPlan};
use crate::latency::LatencySummary;
use crate::sampler::{Marker, ProcessStats};
use crate::{CommonArgs, Progress, Report, Sampler};

/// A run whose errors exceed this share of the due requests fails the
/// `--find-rate` bound.
const FIND_RATE_ERROR_SHARE: f64 = 0.001;
/// A run delivering less than this share of the due requests fails the
/// bound (the server did not keep up with the schedule).
const FIND_RATE_DELIVERED_SHARE: f64 = 0.99;

/// The anchors `--anchor` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Anchor {
    /// Debian's nginx answering `return 200;`.
    Nginx,
}

/// Parameters of the kv scenario (wrk2's and the seed's names).
#[derive(Debug, Clone, clap::Args)]
pub struct KvArgs {
    /// Requests per second (wrk2 -R); 0 = closed loop (wrk: as fast as
    /// answers come back). With --find-rate, the first rate tried.
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
    /// Keep-alive connections, one request in flight each (wrk -c).
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Measured seconds per run (wrk -d).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before the measured window.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// What to send.
    #[arg(long, value_enum, default_value_t = Op::Put)]
    pub op: Op,
    /// Bytes of each PUT's value.
    #[arg(long, default_value_t = 1024)]
    pub value_bytes: usize,
    /// Key space: k0 .. k{keys-1}.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Start this many local nodes (ignored with --target).
    #[arg(long, default_value_t = 1)]
    pub nodes: usize,
    /// `ack` on every request (default: the server's, a quorum).
    #[arg(long)]
    pub ack: Option<usize>,
    /// `from` on every request (default: the server's, the cluster size).
    #[arg(long)]
    pub from: Option<usize>,
    /// Fill each node with this many bytes of values first (suffixes k, M,
    /// G in powers of 1000: 1.2G).
    #[arg(long, value_parser = parse_bytes)]
    pub prefill_bytes: Option<u64>,
    /// Find the highest rate whose p90 stays under this many milliseconds.
    #[arg(long)]
    pub find_rate: Option<f64>,
    /// Most runs --find-rate makes.
    #[arg(long, default_value_t = 8)]
    pub find_steps: u32,
    /// Send to every node (round-robin over connections), not node 0 only.
    #[arg(long)]
    pub spread: bool,
    /// `[kv] sync` of the spawned nodes.
    #[arg(long, default_value = "interval_ms:1000")]
    pub sync: String,
    /// One more `[kv]` line for the spawned nodes (repeatable), e.g.
    /// `--kv-option "replica_batching = false"` for an A/B run.
    #[arg(long = "kv-option")]
    pub kv_options: Vec<String>,
    /// Where the spawned nodes' data directory goes (default: the system
    /// temp directory).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Longest wait for one answer, milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub timeout_ms: u64,
    /// Also run the same load against this anchor in the same command.
    #[arg(long, value_enum)]
    pub anchor: Option<Anchor>,
    /// nginx worker processes for --anchor nginx (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub nginx_workers: usize,
    /// Target and output options.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `1200000`, `1.2G`, `100M`, `64k` → bytes (powers of 1000).
fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mult = match c.to_ascii_lowercase() {
                'k' => 1e3,
                'm' => 1e6,
                'g' => 1e9,
                't' => 1e12,
                _ => return Err(format!("unknown suffix in {s:?} (k, M, G, T)")),
            };
            (&s[..i], mult)
        }
        _ => (s, 1.0),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a byte count"))?;
    if !(n >= 0.0 && n * mult < 1e15) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok((n * mult) as u64)
}

/// One row of the seed's table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// `kv` or the anchor's name.
    pub server: String,
    /// The rate asked (`None`: closed loop).
    pub offered_rate: Option<f64>,
    /// Requests delivered per second in the window.
    pub rate: f64,
    /// Latency percentiles, µs.
    pub latency_us: Option<LatencySummary>,
    /// Errors in the run.
    pub errors: u64,
    /// Whether the run met the --find-rate bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within_bound: Option<bool>,
}

fn row(server: &str, o: &LoadOutcome) -> Row {
    let secs = o.window.seconds.max(1e-9);
    Row {
        server: server.to_owned(),
        offered_rate: o.window.due.map(|d| d as f64 / secs),
        rate: o.window.delivered as f64 / secs,
        latency_us: o.latency.summary_us(),
        errors: o.errors.values().sum(),
        within_bound: None,
    }
}

/// The seed's table: rate, avg, p90, p99, max (ms).
fn table(title: &str, rows: &[Row]) -> String {
    let mut s = format!(
        "{title}\n| server | offered rate | rate | avg | p90 | p99 | max | errors | under bound |\n|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        let ms = |f: fn(&LatencySummary) -> f64| {
            r.latency_us
                .as_ref()
                .map_or("-".to_owned(), |l| format!("{:.2} ms", f(l) / 1000.0))
        };
        s.push_str(&format!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |\n",
            r.server,
            r.offered_rate
                .map_or("closed loop".to_owned(), |x| format!("{x:.0}")),
            r.rate,
            ms(|l| l.mean),
            ms(|l| l.p90),
            ms(|l| l.p99),
            ms(|l| l.max),
            r.errors,
            match r.within_bound {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            }
        ));
    }
    s
}

/// The runs of one server: one fixed run, or a --find-rate search. Returns
/// every row and the outcome that stands for the server (the best run
/// under the bound, else the last run).
async fn measure(
    server: &str,
    args: &KvArgs,
    base: &LoadSpec,
    progress: &Arc<Progress>,
) -> anyhow::Result<(Vec<Row>, LoadOutcome, Option<u64>)> {
    let Some(bound_ms) = args.find_rate else {
        let o = load::run(base, progress).await?;
        return Ok((vec![row(server, &o)], o, None));
    };
    anyhow::ensure!(args.rate > 0, "--find-rate needs a starting --rate above 0");
    let mut rows = Vec::new();
    let (mut pass, mut fail): (Option<u64>, Option<u64>) = (None, None);
    let mut best: Option<LoadOutcome> = None;
    let mut last = None;
    let mut rate = args.rate;
    let mut offset = base.plan.offset;
    for _ in 0..args.find_steps.max(1) {
        let mut spec = base.clone();
        spec.rate = rate;
        spec.plan.offset = offset;
        let o = load::run(&spec, progress).await?;
        offset = offset.wrapping_add(o.sent);
        let due = o.window.due.unwrap_or(0).max(1) as f64;
        let errors: u64 = o.errors.values().sum();
        let ok = o
            .latency
            .summary_us()
            .is_some_and(|l| l.p90 <= bound_ms * 1000.0)
            && o.window.delivered as f64 >= FIND_RATE_DELIVERED_SHARE * due
            && errors as f64 <= FIND_RATE_ERROR_SHARE * due;
        let mut r = row(server, &o);
        r.within_bound = Some(ok);
        eprintln!(
            "[kv {server}] rate {rate}: p90 {} ms, delivered {:.0}/s, errors {errors}: {}",
            r.latency_us
                .map_or("-".into(), |l| format!("{:.2}", l.p90 / 1000.0)),
            r.rate,
            if ok {
                "under the bound"
            } else {
                "over the bound"
            }
        );
        rows.push(r);
        if ok {
            pass = Some(rate);
            best = Some(o);
        } else {
            fail = Some(rate);
            last = Some(o);
        }
        let next = match (pass, fail) {
            (Some(p), None) => p.saturating_mul(2),
            (None, Some(f)) => (f / 2).max(1),
            (Some(p), Some(f)) => p + (f.saturating_sub(p)) / 2,
            (None, None) => unreachable!("one run happened"),
        };
        if let (Some(p), Some(f)) = (pass, fail) {
            if f.saturating_sub(p) <= (p / 20).max(100) {
                break;
            }
        }
        if next == rate || (fail == Some(1) && pass.is_none()) {
            break;
        }
        rate = next;
    }
    let chosen = best.or(last).expect("at least one run");
    Ok((rows, chosen, pass))
}

/// Runs the scenario and prints its report.
pub async fn run(args: &KvArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.duration > 0.0, "--duration must be positive");
    anyhow::ensure!(args.warmup >= 0.0, "--warmup must not be negative");
    anyhow::ensure!(args.keys > 0, "--keys must be positive");
    let external = args.common.target;
    let cluster = match external {
        Some(_) => None,
        None => {
            let spec = ClusterSpec {
                nodes: args.nodes,
                sync: args.sync.clone(),
                data_parent: args.data_dir.clone(),
                kv_extra: args.kv_options.clone(),
            };
            Some(tokio::task::spawn_blocking(move || Cluster::start(&spec)).await??)
        }
    };
    let all_addrs: Vec<SocketAddr> = match (&cluster, external) {
        (Some(c), _) => c.addrs().to_vec(),
        (None, Some(a)) => vec![a],
        (None, None) => unreachable!("a cluster or a target"),
    };
    let addrs = if args.spread {
        all_addrs.clone()
    } else {
        vec![all_addrs[0]]
    };
    let mut query = String::new();
    if let Some(a) = args.ack {
        query.push_str(&format!("&ack={a}"));
    }
    if let Some(f) = args.from {
        query.push_str(&format!("&from={f}"));
    }
    let nodes = if external.is_some() { 1 } else { args.nodes };
    let copies = args.from.unwrap_or(nodes).max(1) as f64;
    let timeout = Duration::from_millis(args.timeout_ms.max(1));
    let mut plan = RequestPlan {
        op: args.op,
        value_bytes: args.value_bytes,
        keys: args.keys,
        offset: 0,
        query,
        host: addrs[0].to_string(),
    };
    let progress = Progress::start("kv");
    let client_sampler = Sampler::start_self(Duration::from_secs(1));

    // Fill first: the seed's "GET on 1.2 GB per node".
    let fill_keys = match args.prefill_bytes {
        Some(b) => Some(
            ((b as f64 * nodes as f64) / (args.value_bytes.max(1) as f64 * copies)).ceil() as u64,
        ),
        None if args.op != Op::Put && external.is_none() => Some(args.keys),
        None => None,
    };
    let mut fill_report = serde_json::Value::Null;
    if let Some(count) = fill_keys {
        let mut fill_plan = plan.clone();
        fill_plan.op = Op::Put;
        fill_plan.keys = count.max(1);
        eprintln!("[kv] filling {count} keys of {} bytes", args.value_bytes);
        let f = load::fill(&all_addrs, args.connections, &fill_plan, count, timeout).await?;
        anyhow::ensure!(
            f.failed as f64 <= 0.001 * count as f64,
            "filling failed for {} of {count} keys",
            f.failed
        );
        let disk = cluster.as_ref().map(Cluster::disk_bytes);
        eprintln!(
            "[kv] filled {} keys in {:.1} s ({:.0}/s, {} attempts made again); bytes on disk per node: {disk:?}",
            f.written,
            f.seconds,
            f.written as f64 / f.seconds.max(1e-9),
            f.retried
        );
        fill_report = serde_json::json!({
            "keys": count,
            "written": f.written,
            "failed": f.failed,
            "retried": f.retried,
            "seconds": f.seconds,
            "value_bytes_per_node": (count as f64 * args.value_bytes as f64 * copies / nodes as f64) as u64,
            "disk_bytes_per_node": disk,
        });
        plan.keys = count.max(1);
        plan.offset = count;
    }

    let base = LoadSpec {
        addrs: addrs.clone(),
        rate: args.rate,
        connections: args.connections,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        timeout,
        plan: plan.clone(),
        expect: Expect::KV,
        marker: cluster
            .as_ref()
            .map_or_else(Marker::default, Cluster::marker)
            .and(&client_sampler.marker()),
    };
    let measured = measure("kv", args, &base, &progress).await;
    let disk_after = cluster.as_ref().map(Cluster::disk_bytes);
    let window = measured.as_ref().ok().and_then(|m| m.1.cpu_window);
    let server = match cluster {
        Some(c) => tokio::task::spawn_blocking(move || c.stop(window)).await??,
        None => ProcessStats::default(),
    };
    let (mut rows, outcome, best_rate) = measured?;

    let mut anchor_json = serde_json::Value::Null;
    let mut anchor_failure = None;
    if let Some(Anchor::Nginx) = args.anchor {
        let workers = args.nginx_workers;
        let nginx = tokio::task::spawn_blocking(move || nginx::Nginx::start(workers)).await??;
        let mut spec = base.clone();
        spec.addrs = vec![nginx.addr()];
        spec.plan.host = nginx.addr().to_string();
        spec.expect = Expect::ANY_200;
        spec.marker = nginx.marker();
        let measured = measure("nginx", args, &spec, &progress).await;
        let window = measured.as_ref().ok().and_then(|m| m.1.cpu_window);
        let stats = tokio::task::spawn_blocking(move || nginx.stop(window)).await?;
        let (arows, aout, abest) = measured.context("the nginx anchor")?;
        let arow = row("nginx", &aout);
        // An anchor that measured nothing is no anchor: no ratio, and the
        // run fails (after printing what it has).
        anchor_failure = measured_nothing("kv nginx anchor", &aout);
        let kv_rate = best_rate.map_or(
            outcome.window.delivered as f64 / outcome.window.seconds.max(1e-9),
            |r| r as f64,
        );
        let anchor_rate = abest.map_or(arow.rate, |r| r as f64);
        let rate_ratio = match anchor_failure {
            None => Some(kv_rate / anchor_rate.max(1e-9)),
            Some(_) => None,
        };
        anchor_json = serde_json::json!({
            "name": "nginx return 200",
            "workers": if workers == 0 { "auto".to_owned() } else { workers.to_string() },
            "rate": arow.rate,
            "best_rate": abest,
            "latency_us": arow.latency_us,
            "errors": aout.errors,
            "server": stats,
            "rate_ratio": rate_ratio,
            "failure": anchor_failure,
        });
        rows.extend(arows);
    }
    progress.finish();
    let client = client_sampler.finish_over(outcome.cpu_window);

    let mut report = Report::new(
        "kv",
        "request",
        serde_json::json!({
            "rate": args.rate,
            "connections": args.connections,
            "duration": args.duration,
            "warmup": args.warmup,
            "op": args.op,
            "value_bytes": args.value_bytes,
            "keys": plan.keys,
            "nodes": nodes,
            "ack": args.ack,
            "from": args.from,
            "prefill_bytes": args.prefill_bytes,
            "find_rate_p90_ms": args.find_rate,
            "spread": args.spread,
            "sync": args.sync,
            "kv_options": args.kv_options,
            "target": addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        }),
    );
    report.sent = outcome.sent;
    report.received = outcome.received;
    report.set_window(outcome.window);
    report.latency_expected = true;
    report.latency_us = outcome.latency.summary_us();
    for (k, v) in &outcome.errors {
        report.error(k, *v);
    }
    report.server = server;
    report.client = client;
    report.extra = serde_json::json!({
        "rows": rows,
        "best_rate": best_rate,
        "max_send_lag_us": outcome.max_send_lag.as_secs_f64() * 1e6,
        "prefill": fill_report,
        "disk_bytes_per_node": disk_after,
        "anchor": anchor_json,
    });
    let ackfrom = match (args.ack, args.from) {
        (None, None) => "default".to_owned(),
        (a, f) => format!(
            "{}/{}",
            a.map_or("q".into(), |a| a.to_string()),
            f.map_or("n".into(), |f| f.to_string())
        ),
    };
    let title = format!(
        "KV {:?}, {} node(s), ack/from {ackfrom}, {} connections, {} s measured after {} s warm-up, value {} B{}",
        args.op,
        nodes,
        args.connections,
        args.duration,
        args.warmup,
        args.value_bytes,
        match args.find_rate {
            Some(b) => format!(", optimal rate = highest with p90 under {b} ms"),
            None => String::new(),
        }
    );
    let mut human = table(&title, &rows);
    if let Some(b) = best_rate {
        human.push_str(&format!("optimal rate (kv): {b}\n"));
    }
    if let Some(r) = anchor_json.get("rate_ratio").and_then(|v| v.as_f64()) {
        human.push_str(&format!("kv rate / nginx rate: {:.2}\n", r));
    }
    if let Some(why) = &anchor_failure {
        human.push_str(&format!("kv rate / nginx rate: - ({why})\n"));
    }
    report.emit(args.common.json, &human)?;
    match anchor_failure {
        Some(why) => anyhow::bail!("{why}"),
        None => Ok(()),
    }
}

/// Why a load measured nothing (the common report's check: nothing
/// delivered in the window, or no latency recorded), if it did not.
fn measured_nothing(name: &str, o: &LoadOutcome) -> Option<String> {
    let mut r = Report::new(name, "request", serde_json::Value::Null);
    r.set_window(o.window);
    r.latency_expected = true;
    r.latency_us = o.latency.summary_us();
    r.measured_nothing()
        .map(|why| format!("{name} measured nothing: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anchor_that_delivered_nothing_is_caught() {
        let mut o = LoadOutcome {
            window: crate::Window {
                seconds: 1.0,
                due: Some(100),
                sent: 100,
                delivered: 0,
            },
            ..Default::default()
        };
        let why = measured_nothing("kv nginx anchor", &o).unwrap();
        assert!(why.contains("kv nginx anchor measured nothing"), "{why}");
        assert!(why.contains("no request was delivered"), "{why}");
        o.window.delivered = 100;
        o.latency.record_ns(1_000);
        assert_eq!(measured_nothing("kv nginx anchor", &o), None);
    }

    #[test]
    fn byte_counts_take_decimal_suffixes() {
        assert_eq!(parse_bytes("1.2G"), Ok(1_200_000_000));
        assert_eq!(parse_bytes("100M"), Ok(100_000_000));
        assert_eq!(parse_bytes("64k"), Ok(64_000));
        assert_eq!(parse_bytes("5000"), Ok(5000));
        assert!(parse_bytes("1.2X").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("G").is_err());
    }

    #[test]
    fn the_table_has_the_seed_columns_and_no_zero_for_unmeasured() {
        let rows = vec![Row {
            server: "kv".into(),
            offered_rate: Some(1000.0),
            rate: 990.0,
            latency_us: None,
            errors: 3,
            within_bound: Some(false),
        }];
        let t = table("t", &rows);
        assert!(t.contains("| rate | avg | p90 | p99 | max |"), "{t}");
        assert!(
            t.contains("| kv | 1000 | 990 | - | - | - | - | 3 | no |"),
            "{t}"
        );
    }
}
