//! [`Batch`]: the FlowFiles of one transaction and the acknowledgement
//! tokens of the messages they came from; [`collect`]: the task that fills
//! batches from the sink's queue up to `batch_max_flowfiles`,
//! `batch_max_bytes` or `batch_max_ms`, whichever comes first.
//!
//! A hub message becomes a FlowFile whose content is the payload (shared,
//! not copied) and whose attributes are the message's attributes plus
//! `tidegate.topic`.

use std::time::Duration;

use tidegate_hub::{AckToken, SharedMessage};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::metrics::SinkMetrics;
use crate::codec::DataPacket;

/// The attribute naming the hub topic a FlowFile came from.
pub const TOPIC_ATTRIBUTE: &str = "tidegate.topic";

/// A message and its acknowledgement, as queued in the sink.
pub type Item = (SharedMessage, AckToken);

/// The FlowFile for `msg`.
pub fn flowfile(msg: &SharedMessage) -> DataPacket {
    let mut attributes = Vec::with_capacity(msg.attributes.len() + 1);
    attributes.extend(msg.attributes.iter().cloned());
    attributes.push((TOPIC_ATTRIBUTE.to_owned(), msg.topic.clone()));
    DataPacket {
        attributes,
        content: msg.payload.clone(),
    }
}

/// One transaction's FlowFiles. Dropped without [`Batch::confirmed`], its
/// tokens fail: the sources were never told these messages were safe.
#[derive(Debug)]
pub struct Batch {
    /// The FlowFiles, in queue order.
    pub packets: Vec<DataPacket>,
    tokens: Vec<AckToken>,
    bytes: usize,
    metrics: SinkMetrics,
}

impl Batch {
    fn new(metrics: SinkMetrics) -> Self {
        Batch {
            packets: Vec::new(),
            tokens: Vec::new(),
            bytes: 0,
            metrics,
        }
    }

    fn push(&mut self, (msg, ack): Item) {
        self.bytes += msg.payload.len();
        self.packets.push(flowfile(&msg));
        self.tokens.push(ack);
    }

    /// FlowFiles in the batch.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Content bytes in the batch.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// NiFi confirmed the transaction: every message is acknowledged.
    pub fn confirmed(mut self) {
        let n = self.tokens.len() as u64;
        self.metrics.delivered.inc_by(n);
        self.metrics.delivered_bytes.inc_by(self.bytes as u64);
        self.metrics.transactions.inc();
        self.metrics.queued.dec_by(n as i64);
        for t in self.tokens.drain(..) {
            t.succeed();
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // Only a batch the sink gave up on (shutdown) still holds tokens;
        // dropping them fails them.
        let n = self.tokens.len() as u64;
        if n > 0 {
            self.metrics.failed.inc_by(n);
            self.metrics.queued.dec_by(n as i64);
        }
    }
}

/// Limits of one batch.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// FlowFiles.
    pub flowfiles: usize,
    /// Content bytes (a single larger message still goes, alone).
    pub bytes: usize,
    /// Time the first message waits for company.
    pub linger: Duration,
}

/// Fills batches from `queue` and hands them to the workers through `out`
/// (bounded: when every worker is busy, this waits, the queue fills and
/// the sink's `send` waits). Ends when `queue` closes or on `shutdown`.
pub async fn collect(
    mut queue: mpsc::Receiver<Item>,
    out: mpsc::Sender<Batch>,
    limits: Limits,
    metrics: SinkMetrics,
    shutdown: CancellationToken,
) {
    let mut carry: Option<Item> = None;
    loop {
        let first = match carry.take() {
            Some(i) => i,
            None => tokio::select! {
                i = queue.recv() => match i { Some(i) => i, None => return },
                _ = shutdown.cancelled() => return,
            },
        };
        let mut batch = Batch::new(metrics.clone());
        batch.push(first);
        let deadline = Instant::now() + limits.linger;
        while batch.len() < limits.flowfiles && batch.bytes() < limits.bytes {
            let next = match queue.try_recv() {
                Ok(i) => Some(i),
                Err(mpsc::error::TryRecvError::Disconnected) => None,
                Err(mpsc::error::TryRecvError::Empty) => {
                    tokio::time::timeout_at(deadline, queue.recv())
                        .await
                        .unwrap_or_default()
                }
            };
            let Some(item) = next else { break };
            if batch.bytes() + item.0.payload.len() > limits.bytes {
                carry = Some(item);
                break;
            }
            batch.push(item);
        }
        tokio::select! {
            r = out.send(batch) => if r.is_err() { return },
            _ = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidegate_hub::{AckGroup, Message};

    #[test]
    fn a_message_becomes_a_flowfile_with_its_topic() {
        let m: SharedMessage = Message::new("logs.web", "body")
            .with_attribute("filename", "a.log")
            .into();
        let p = flowfile(&m);
        assert_eq!(&p.content[..], b"body");
        assert_eq!(
            p.attributes,
            vec![
                ("filename".to_string(), "a.log".to_string()),
                (TOPIC_ATTRIBUTE.to_string(), "logs.web".to_string())
            ]
        );
    }

    #[tokio::test]
    async fn batches_close_on_count_bytes_or_time() {
        let metrics = SinkMetrics::default();
        let (tx, rx) = mpsc::channel(100);
        let (btx, mut brx) = mpsc::channel(1);
        let limits = Limits {
            flowfiles: 3,
            bytes: 10,
            linger: Duration::from_millis(50),
        };
        let stop = CancellationToken::new();
        tokio::spawn(collect(rx, btx, limits, metrics.clone(), stop.clone()));
        let group = AckGroup::new();
        let item = |n: usize| -> Item { (Message::new("t", vec![b'x'; n]).into(), group.token()) };
        for n in [1, 1, 1, 1] {
            tx.send(item(n)).await.unwrap();
        }
        assert_eq!(brx.recv().await.unwrap().len(), 3, "by count");
        let started = std::time::Instant::now();
        let b = brx.recv().await.unwrap();
        assert_eq!(b.len(), 1, "the fourth, after the linger");
        assert!(started.elapsed() >= Duration::from_millis(40));
        b.confirmed();
        tx.send(item(6)).await.unwrap();
        tx.send(item(6)).await.unwrap();
        assert_eq!(brx.recv().await.unwrap().len(), 1, "by bytes");
        tx.send(item(50)).await.unwrap();
        assert_eq!(brx.recv().await.unwrap().len(), 1, "the carried one");
        assert_eq!(brx.recv().await.unwrap().bytes(), 50, "a big one alone");
        stop.cancel();
    }
}
