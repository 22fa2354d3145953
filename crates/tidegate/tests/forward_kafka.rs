//! Forward → Tidegate → Kafka against real peers: a Kafka 3.9.1 broker
//! (started here from Maven Central jars), Fluency (the Java client of the
//! seed experiment) and the `tidegate` binary itself.
//!
//! - Fluency's PackedForward-with-ack records all reach Kafka.
//! - The broker is killed mid-stream: nothing undelivered is acknowledged,
//!   delivery resumes when it returns, every record arrives at least once.
//! - `tidegate serve` is killed with SIGKILL mid-stream: every chunk it had
//!   acknowledged is in Kafka.
//!
//! Needs `scripts/setup/kafka.sh` (JDK, Maven, the jars); fails otherwise.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::message::{Message as _, OwnedMessage};
use serde_json::{json, Value};
use tidegate_forward::client::ClientError;
use tidegate_forward::codec::encode::record_from_json;
use tidegate_forward::codec::EventTime;
use tidegate_forward::{ClientOptions, ForwardClient, ForwardConfig, ForwardServer};
use tidegate_hub::Sink;
use tidegate_kafka::testing::{hub_routing_to, TestBroker};
use tidegate_kafka::{KafkaConfig, KafkaSink};
use tokio_util::sync::CancellationToken;

mod common;
#[path = "common/fluency.rs"]
mod fluency;

use common::{free_addr, KillOnDrop, Served};
use fluency::{fluency, fluency_done, missing_seqs, read_back, seq_counts};

fn shared_broker() -> &'static TestBroker {
    TestBroker::shared().expect("start the test broker (run scripts/setup/kafka.sh)")
}

/// An in-process Forward listener routing `logs.>` to a Kafka sink.
struct Pipeline {
    addr: SocketAddr,
    sink: Arc<KafkaSink>,
    shutdown: CancellationToken,
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// One Kafka topic per hub topic (the tests read `logs.<case>` back).
async fn pipeline(bootstrap: String) -> Pipeline {
    pipeline_with(KafkaConfig {
        topic_template: Some("$TOPIC".into()),
        dynamic_topics: true,
        ..KafkaConfig::for_brokers(bootstrap)
    })
    .await
}

async fn pipeline_with(config: KafkaConfig) -> Pipeline {
    let sink = Arc::new(KafkaSink::new(config).expect("kafka sink"));
    let hub = hub_routing_to("logs.>", &sink);
    // The Fluency tags already start with `logs.`.
    let server = ForwardServer::bind(ForwardConfig {
        udp_heartbeat: false,
        topic_prefix: String::new(),
        ..ForwardConfig::on("127.0.0.1:0".parse().unwrap())
    })
    .expect("bind forward");
    let addr = server.local_addr();
    let shutdown = CancellationToken::new();
    tokio::spawn(server.run(hub, shutdown.clone()));
    Pipeline {
        addr,
        sink,
        shutdown,
    }
}

fn json_payload(r: &OwnedMessage) -> Value {
    serde_json::from_slice(r.payload().expect("a payload")).expect("a JSON payload")
}

fn assert_every_seq_at_least_once(counts: &BTreeMap<u64, usize>, n: u64) {
    let missing = missing_seqs(counts, n);
    assert!(
        missing.is_empty(),
        "{} of {n} records missing in Kafka, first: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fluency_packed_forward_with_ack_reaches_kafka_record_by_record() {
    let broker = shared_broker();
    let p = pipeline(broker.bootstrap()).await;
    let n = 20_000;
    let started_ms = now_ms();
    fluency_done(
        fluency(p.addr, "logs.fluency.e2e", n, 0, "e2e"),
        Duration::from_secs(150),
    )
    .await;

    let records = read_back(
        &broker.bootstrap(),
        "logs.fluency.e2e",
        n as usize,
        Duration::from_secs(60),
    )
    .await;
    let counts = seq_counts(&records, "e2e");
    assert_every_seq_at_least_once(&counts, n);
    let dups = records.len() - counts.len();
    assert!(
        dups == 0 || dups < n as usize / 10,
        "{dups} duplicates without any failure"
    );
    for r in &records {
        let v = json_payload(r);
        assert_eq!(v["msg"], "x".repeat(40));
        assert_eq!(r.key(), None);
        let ts = r.timestamp().to_millis().expect("a timestamp");
        // Fluency stamps event time in seconds (or EventTime); Kafka gets it in ms.
        assert!(
            ts >= started_ms - 2_000 && ts <= now_ms() + 1_000,
            "event time {ts}"
        );
    }
    assert_eq!(p.sink.in_flight(), 0);
    assert!(p.sink.metrics().delivered.get() >= n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_mid_stream_gets_no_false_acks_and_loses_nothing() {
    let mut broker = tokio::task::spawn_blocking(TestBroker::start)
        .await
        .unwrap()
        .expect("start a dedicated broker");
    let bootstrap = broker.bootstrap();
    let p = pipeline(bootstrap.clone()).await;
    let n = 24_000;
    // Killed if an assertion fails before `fluency_done` waits for it.
    let sender = KillOnDrop::new(fluency(p.addr, "logs.kill.broker", n, 3_000, "kill"));
    tokio::time::sleep(Duration::from_secs(3)).await;

    broker.stop();
    // A chunk sent while the broker is down is not acknowledged.
    let mut probe = ForwardClient::connect(p.addr, ClientOptions::default())
        .await
        .unwrap();
    let rec = record_from_json(&json!({"run": "probe", "seq": 0, "msg": "probe"}));
    probe
        .send_packed_forward(
            "logs.kill.broker",
            &[(EventTime::now(), &rec[..])],
            Some("probe-down"),
        )
        .await
        .unwrap();
    match probe.wait_ack("probe-down", Duration::from_secs(4)).await {
        Err(ClientError::Timeout) => {}
        other => panic!("an ack while the broker was down: {other:?}"),
    }
    assert!(p.sink.in_flight() > 0, "messages wait in the producer");

    let broker = tokio::task::spawn_blocking(move || broker.restart().map(|()| broker))
        .await
        .unwrap()
        .expect("restart the broker");
    probe
        .wait_ack("probe-down", Duration::from_secs(90))
        .await
        .expect("the probe is acknowledged once the broker is back");
    fluency_done(sender.into_inner(), Duration::from_secs(200)).await;

    let records = read_back(
        &bootstrap,
        "logs.kill.broker",
        n as usize + 1,
        Duration::from_secs(60),
    )
    .await;
    assert_every_seq_at_least_once(&seq_counts(&records, "kill"), n);
    assert_eq!(seq_counts(&records, "probe").get(&0), Some(&1));
    drop(broker);
}

/// `tidegate serve` with only the Forward listener, routing `logs.>` to Kafka.
fn serve(forward: SocketAddr, bootstrap: &str) -> Served {
    common::serve(&format!(
        "[http]\nenabled = false\n\
         [wire]\nenabled = false\n\
         [sockperf]\nenabled = false\n\
         [s2s]\nenabled = false\n\
         [forward]\nlisten = \"{forward}\"\nudp_heartbeat = false\ntopic_prefix = \"\"\n\
         [sinks.kafka]\nbrokers = \"{bootstrap}\"\n\
         topic_template = \"$TOPIC\"\ndynamic_topics = true\n\
         [[routes]]\ntopics = \"logs.>\"\nsink = \"kafka\"\n"
    ))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_tidegate_mid_stream_keeps_every_acknowledged_chunk() {
    let broker = shared_broker();
    let addr = free_addr();
    let mut served = serve(addr, &broker.bootstrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = loop {
        match ForwardClient::connect(addr, ClientOptions::default()).await {
            Ok(c) => break c,
            Err(_) if Instant::now() < deadline => {
                assert!(
                    served.child.try_wait().unwrap().is_none(),
                    "tidegate serve exited"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("tidegate serve never listened: {e}"),
        }
    };

    const PER_CHUNK: usize = 200;
    const WINDOW: usize = 8;
    let (mut writer, mut acks) = client.into_split();
    let window = Arc::new(tokio::sync::Semaphore::new(WINDOW));
    let sent = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let writing = {
        let (window, sent) = (window.clone(), sent.clone());
        tokio::spawn(async move {
            for c in 0.. {
                window.acquire().await.unwrap().forget();
                let chunk = format!("k9-{c}");
                let recs: Vec<Vec<u8>> = (0..PER_CHUNK)
                    .map(|i| record_from_json(&json!({"run": "k9", "chunk": chunk, "i": i})))
                    .collect();
                let entries: Vec<(EventTime, &[u8])> =
                    recs.iter().map(|r| (EventTime::now(), &r[..])).collect();
                let mut frame = Vec::new();
                tidegate_forward::codec::encode::write_packed_forward(
                    &mut frame,
                    "logs.kill9",
                    &tidegate_forward::codec::encode::packed_entries(
                        &entries,
                        tidegate_forward::codec::encode::TimeForm::FixExt8,
                    ),
                    tidegate_forward::codec::encode::EntriesWrap::Str32,
                    &tidegate_forward::codec::encode::MessageOption {
                        chunk: Some(&chunk),
                        size: Some(PER_CHUNK as u64),
                        gzip: false,
                    },
                );
                sent.lock().unwrap().push(chunk);
                if writer.write_all(&frame).await.is_err() {
                    return;
                }
            }
        })
    };
    let mut acked: Vec<String> = Vec::new();
    let killed_after = 25;
    while acked.len() < killed_after {
        let a = tokio::time::timeout(Duration::from_secs(30), acks.next_ack())
            .await
            .expect("acks keep coming")
            .expect("an ack");
        acked.push(a);
        window.add_permits(1);
    }
    // Mid-stream: open the window wide and kill once a burst is written,
    // so chunks are on the wire and in the producer right now. (Killing at
    // the 25th ack alone found nothing in flight whenever the writer, slow
    // in a debug build, had just been acked for everything it sent.)
    window.add_permits(4 * WINDOW);
    let burst = Instant::now() + Duration::from_secs(10);
    while sent.lock().unwrap().len() < acked.len() + 2 * WINDOW && Instant::now() < burst {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    served.child.kill().unwrap();
    served.child.wait().unwrap();
    while let Ok(Ok(a)) = tokio::time::timeout(Duration::from_secs(2), acks.next_ack()).await {
        acked.push(a);
    }
    writing.abort();
    let sent = sent.lock().unwrap().clone();
    assert!(
        sent.len() > acked.len(),
        "some chunks were in flight at the kill"
    );

    let want: HashSet<(String, u64)> = acked
        .iter()
        .flat_map(|c| (0..PER_CHUNK as u64).map(move |i| (c.clone(), i)))
        .collect();
    let records = read_back(
        &broker.bootstrap(),
        "logs.kill9",
        want.len(),
        Duration::from_secs(30),
    )
    .await;
    let have: HashSet<(String, u64)> = records
        .iter()
        .map(json_payload)
        .map(|v| {
            (
                v["chunk"].as_str().unwrap().to_owned(),
                v["i"].as_u64().unwrap(),
            )
        })
        .collect();
    let missing: Vec<&(String, u64)> = want.difference(&have).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged records missing from Kafka after kill -9, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_stops_reading_instead_of_growing_memory() {
    // Nothing listens on this port: every message waits in the producer.
    let dead = free_addr();
    let p = pipeline_with(KafkaConfig {
        queue_max_messages: 1_000,
        ..KafkaConfig::for_brokers(dead.to_string())
    })
    .await;
    let client = ForwardClient::connect(p.addr, ClientOptions::default())
        .await
        .unwrap();
    let (mut writer, mut acks) = client.into_split();
    let rec = record_from_json(&json!({"run": "dead", "msg": "x".repeat(60)}));
    let entries: Vec<(EventTime, &[u8])> = vec![(EventTime::now(), &rec[..]); 100];
    let written = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writing = {
        let written = written.clone();
        let packed = tidegate_forward::codec::encode::packed_entries(
            &entries,
            tidegate_forward::codec::encode::TimeForm::FixExt8,
        );
        tokio::spawn(async move {
            for c in 0u64.. {
                let chunk = format!("dead-{c}");
                let mut frame = Vec::new();
                tidegate_forward::codec::encode::write_packed_forward(
                    &mut frame,
                    "logs.dead",
                    &packed,
                    tidegate_forward::codec::encode::EntriesWrap::Str32,
                    &tidegate_forward::codec::encode::MessageOption {
                        chunk: Some(&chunk),
                        size: Some(100),
                        gzip: false,
                    },
                );
                if writer.write_all(&frame).await.is_err() {
                    return;
                }
                written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    // No ack: nothing reached a broker.
    assert!(
        tokio::time::timeout(Duration::from_secs(3), acks.next_ack())
            .await
            .is_err(),
        "an ack without a broker"
    );
    // The client is held back: its writes stop once the server stops reading
    // and the socket buffers are full; the producer holds at most the bound.
    let at_3s = written.load(std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let at_5s = written.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(at_3s, at_5s, "the client kept writing: nothing pushed back");
    assert!(at_3s > 10, "the client got going ({at_3s} chunks)");
    assert!(p.sink.is_full());
    assert_eq!(p.sink.in_flight(), 1_000);
    assert_eq!(p.sink.metrics().delivered.get(), 0);
    writing.abort();
}
