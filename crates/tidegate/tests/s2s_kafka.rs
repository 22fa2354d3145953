//! Site-to-Site → Tidegate → Kafka through the `tidegate` binary, against a
//! real Kafka broker: `kill -9` of Tidegate right in the middle of a stream of
//! transactions loses nothing that was answered `TRANSACTION_FINISHED`.
//!
//! Needs `scripts/setup/kafka.sh` (JDK, Maven, the broker jars); fails
//! otherwise.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rdkafka::message::Message as _;
use tidegate_kafka::testing::{read_topic, TestBroker};
use tidegate_s2s::client::{discover, ClientOptions, RawClient};
use tidegate_s2s::codec::DataPacket;

mod common;

use common::{free_ports, Served};

const PER_TX: usize = 10;
/// Transactions finished before the kill (the stream goes on past it).
const FINISHED_BEFORE_KILL: usize = 40;

/// `tidegate serve` with HTTP (discovery) and the S2S RAW listener, routing
/// `s2s.>` to Kafka topic `kafka_topic`.
fn serve(http: SocketAddr, raw: SocketAddr, bootstrap: &str, kafka_topic: &str) -> Served {
    common::serve(&format!(
        "[http]\nlisten = \"{http}\"\n\
         [wire]\nenabled = false\n\
         [sockperf]\nenabled = false\n\
         [forward]\nenabled = false\n\
         [s2s]\nlisten = \"{raw}\"\n\
         [[s2s.input_ports]]\nname = \"input\"\ntopic = \"s2s.kill9\"\n\
         [sinks.kafka]\nbrokers = \"{bootstrap}\"\ntopic = \"{kafka_topic}\"\n\
         [[routes]]\ntopics = \"s2s.>\"\nsink = \"kafka\"\n"
    ))
}

fn packet(tx: usize, i: usize) -> DataPacket {
    let id = format!("{tx}-{i}");
    DataPacket {
        attributes: vec![
            ("uuid".into(), id.clone()),
            ("filename".into(), format!("f{id}")),
        ],
        content: Bytes::from(id),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_transaction_finished_loses_nothing_finished() {
    let broker = TestBroker::shared().expect("start the test broker (run scripts/setup/kafka.sh)");
    let [http, raw] = free_ports();
    let kafka_topic = format!("s2s_kill9_{}", std::process::id());
    let mut served = serve(http, raw, &broker.bootstrap(), &kafka_topic);

    let deadline = Instant::now() + Duration::from_secs(30);
    let discovery = loop {
        match discover(http, Duration::from_secs(2)).await {
            Ok(d) => break d,
            Err(e) => {
                assert!(
                    served.child.try_wait().unwrap().is_none(),
                    "tidegate serve exited"
                );
                assert!(
                    Instant::now() < deadline,
                    "tidegate serve never answered discovery: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let port_id = discovery
        .input_id("input")
        .expect("input port advertised")
        .to_owned();
    let mut client = RawClient::connect(raw, Some(&port_id), ClientOptions::default())
        .await
        .expect("RAW handshake");

    // Transactions run back to back on a task; each one answered
    // TRANSACTION_FINISHED is recorded. The kill lands while they flow.
    let finished = Arc::new(Mutex::new(Vec::<usize>::new()));
    let sending = {
        let finished = finished.clone();
        tokio::spawn(async move {
            for tx in 0.. {
                let packets: Vec<DataPacket> = (0..PER_TX).map(|i| packet(tx, i)).collect();
                match client.send_transaction(&packets).await {
                    Ok(_) => finished.lock().unwrap().push(tx),
                    Err(e) => return (tx, e.to_string()),
                }
            }
            unreachable!("the loop only ends with an error")
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while finished.lock().unwrap().len() < FINISHED_BEFORE_KILL {
        assert!(
            Instant::now() < deadline,
            "transactions did not finish: {}",
            served.log()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    served.child.kill().expect("SIGKILL tidegate");
    served.child.wait().unwrap();
    let (failed_at, why) = tokio::time::timeout(Duration::from_secs(60), sending)
        .await
        .expect("the client notices the dead server")
        .unwrap();
    let finished: Vec<usize> = finished.lock().unwrap().clone();
    assert!(finished.len() >= FINISHED_BEFORE_KILL);
    assert_eq!(finished.last().copied(), Some(failed_at - 1), "{why}");

    let want: HashSet<String> = finished
        .iter()
        .flat_map(|&tx| (0..PER_TX).map(move |i| format!("{tx}-{i}")))
        .collect();
    let bootstrap = broker.bootstrap();
    let topic = kafka_topic.clone();
    let min = want.len();
    let got = tokio::task::spawn_blocking(move || {
        read_topic(&bootstrap, &topic, min, Duration::from_secs(60))
    })
    .await
    .unwrap()
    .expect("read the topic back");
    let got: HashSet<String> = got
        .iter()
        .filter_map(|m| m.payload().map(|p| String::from_utf8_lossy(p).into_owned()))
        .collect();
    let missing: Vec<&String> = want.iter().filter(|id| !got.contains(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} FlowFiles of finished transactions are missing from Kafka, e.g. {:?}",
        missing.len(),
        want.len(),
        &missing[..missing.len().min(5)]
    );
}
