//! Input and output ports, shared by the RAW and HTTP transports: lookup by
//! identifier, the per-port client allow list, committing a transaction's
//! FlowFiles into the hub, and the bounded queues output ports serve from.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use thiserror::Error;
use tidegate_hub::topic::validate_publish_topic;
use tidegate_hub::{
    AckGroup, DeliveryError, Hub, ListenerMetrics, Message, OverflowPolicy, PublishError,
    SharedMessage, Subscriber, SubscriberOptions, TopicError,
};

use crate::codec::DataPacket;
use crate::tls::dn_matches;
use crate::{PortConfig, S2sConfig};

/// Why a transaction's FlowFiles were not committed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CommitError {
    /// The hub refused a message.
    #[error("the hub refused a FlowFile: {0}")]
    Publish(#[from] PublishError),
    /// A routed sink failed a message.
    #[error("a FlowFile was not delivered: {0}")]
    Delivery(#[from] DeliveryError),
}

/// A committed transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// FlowFiles published.
    pub flow_files: usize,
    /// The port's destination is full now: answer
    /// `TRANSACTION_FINISHED_BUT_DESTINATION_FULL`.
    pub destination_full: bool,
}

/// A port clients send FlowFiles to; each FlowFile becomes a message on `topic`.
#[derive(Debug)]
pub struct InputPort {
    /// Identifier clients use.
    pub id: String,
    /// Name clients look up.
    pub name: String,
    /// Hub topic messages go to.
    pub topic: String,
    allowed_dns: Vec<String>,
}

/// A port clients receive FlowFiles from, fed by a hub subscription into a
/// bounded queue (drop-oldest beyond `output_queue_capacity`, counted by the hub).
#[derive(Debug)]
pub struct OutputPort {
    /// Identifier clients use.
    pub id: String,
    /// Name clients look up.
    pub name: String,
    /// Hub topic pattern it subscribes to.
    pub topic: String,
    allowed_dns: Vec<String>,
    subscriber: Subscriber,
    /// Messages of rolled-back transactions, served again first.
    redeliver: Mutex<VecDeque<SharedMessage>>,
}

impl OutputPort {
    /// Takes up to `max` messages without waiting.
    pub fn take(&self, max: usize) -> Vec<SharedMessage> {
        let mut out = Vec::new();
        {
            let mut r = self.redeliver.lock();
            while out.len() < max {
                match r.pop_front() {
                    Some(m) => out.push(m),
                    None => break,
                }
            }
        }
        if out.len() < max {
            let room = max - out.len();
            let _ = self.subscriber.try_recv_many(&mut out, room);
        }
        out
    }

    /// Puts the messages of a rolled-back transaction back at the front.
    pub fn requeue(&self, msgs: Vec<SharedMessage>) {
        let mut r = self.redeliver.lock();
        for m in msgs.into_iter().rev() {
            r.push_front(m);
        }
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.redeliver.lock().len() + self.subscriber.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A port found by identifier.
#[derive(Debug, Clone)]
pub enum PortRef {
    /// An input port.
    Input(Arc<InputPort>),
    /// An output port.
    Output(Arc<OutputPort>),
}

impl PortRef {
    fn allowed_dns(&self) -> &[String] {
        match self {
            PortRef::Input(p) => &p.allowed_dns,
            PortRef::Output(p) => &p.allowed_dns,
        }
    }

    /// The port's name.
    pub fn name(&self) -> &str {
        match self {
            PortRef::Input(p) => &p.name,
            PortRef::Output(p) => &p.name,
        }
    }
}

#[derive(Debug)]
struct Inner {
    config: S2sConfig,
    hub: Hub,
    inputs: Vec<Arc<InputPort>>,
    outputs: Vec<Arc<OutputPort>>,
    metrics: ListenerMetrics,
}

/// The configured ports, bound to a hub. Cheap to clone; share one between
/// the RAW listener and the HTTP router so output ports have one queue each.
#[derive(Debug, Clone)]
pub struct S2sPorts {
    inner: Arc<Inner>,
}

impl S2sPorts {
    /// Resolves the configured ports and subscribes the output ports.
    pub fn new(config: S2sConfig, hub: Hub) -> Result<Self, TopicError> {
        // An input port's topic is where every FlowFile it receives is
        // published: a topic the hub would refuse fails here, at start,
        // and not on each transaction.
        for p in &config.input_ports {
            validate_publish_topic(&p.topic)?;
        }
        let inputs = config
            .input_ports
            .iter()
            .map(|p: &PortConfig| {
                Arc::new(InputPort {
                    id: p.resolved_id(),
                    name: p.name.clone(),
                    topic: p.topic.clone(),
                    allowed_dns: p.allowed_dns.clone(),
                })
            })
            .collect();
        let mut outputs = Vec::new();
        for p in &config.output_ports {
            let mut subscriber = hub.subscriber(SubscriberOptions {
                capacity: config.output_queue_capacity.max(1),
                overflow: OverflowPolicy::DropOldest,
            });
            subscriber.subscribe(&p.topic)?;
            outputs.push(Arc::new(OutputPort {
                id: p.resolved_id(),
                name: p.name.clone(),
                topic: p.topic.clone(),
                allowed_dns: p.allowed_dns.clone(),
                subscriber,
                redeliver: Mutex::new(VecDeque::new()),
            }));
        }
        let metrics = hub.metrics().listener("s2s");
        Ok(S2sPorts {
            inner: Arc::new(Inner {
                config,
                hub,
                inputs,
                outputs,
                metrics,
            }),
        })
    }

    /// The configuration the ports came from.
    pub fn config(&self) -> &S2sConfig {
        &self.inner.config
    }

    /// The hub.
    pub fn hub(&self) -> &Hub {
        &self.inner.hub
    }

    /// The `s2s` listener's connection and error counters.
    pub fn metrics(&self) -> &ListenerMetrics {
        &self.inner.metrics
    }

    /// Input ports.
    pub fn inputs(&self) -> &[Arc<InputPort>] {
        &self.inner.inputs
    }

    /// Output ports.
    pub fn outputs(&self) -> &[Arc<OutputPort>] {
        &self.inner.outputs
    }

    /// The port with identifier `id`.
    pub fn find(&self, id: &str) -> Option<PortRef> {
        if let Some(p) = self.inner.inputs.iter().find(|p| p.id == id) {
            return Some(PortRef::Input(p.clone()));
        }
        self.inner
            .outputs
            .iter()
            .find(|p| p.id == id)
            .map(|p| PortRef::Output(p.clone()))
    }

    /// Checks the client's certificate DN against the port's allow list;
    /// `Err` carries NiFi-style explanation for `UNAUTHORIZED`.
    pub fn authorize(&self, port: &PortRef, dn: Option<&str>) -> Result<(), String> {
        let allowed = port.allowed_dns();
        if allowed.is_empty() {
            return Ok(());
        }
        match dn {
            Some(dn) if allowed.iter().any(|a| dn_matches(a, dn)) => Ok(()),
            Some(dn) => Err(format!(
                "User {dn} is not authorized to access port {}",
                port.name()
            )),
            None => Err(format!(
                "Port {} requires a client certificate; none was presented",
                port.name()
            )),
        }
    }

    /// True when the port's routed destination is full now.
    pub fn destination_full(&self, port: &InputPort) -> bool {
        self.inner.hub.is_destination_full(&port.topic)
    }

    /// Publishes every FlowFile of a confirmed transaction as one message on
    /// the port's topic and waits until every routed sink acknowledged them.
    pub async fn commit(
        &self,
        port: &InputPort,
        packets: Vec<DataPacket>,
    ) -> Result<Committed, CommitError> {
        let n = packets.len();
        let group = AckGroup::new();
        // One topic check and route lookup for the whole transaction.
        let publisher = self.inner.hub.publisher_for(&port.topic)?;
        for p in packets {
            let mut msg = publisher.message(p.content);
            msg.attributes = p.attributes;
            publisher.publish(msg, Some(&group)).await?;
        }
        group.wait().await?;
        Ok(Committed {
            flow_files: n,
            destination_full: self.destination_full(port),
        })
    }
}

/// The packet an output port sends for `msg`: its attributes and payload.
pub fn packet_for(msg: &Message) -> DataPacket {
    DataPacket {
        attributes: msg.attributes.clone(),
        content: msg.payload.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tidegate_hub::RouteTable;

    fn config_with_input_topic(topic: &str) -> S2sConfig {
        toml::from_str(&format!(
            "[[input_ports]]\nname = \"in\"\ntopic = {topic:?}\n"
        ))
        .unwrap()
    }

    #[test]
    fn an_input_port_publishing_where_the_hub_refuses_fails_at_start() {
        let hub = Hub::new(RouteTable::default());
        for bad in ["$sys.stats", "logs.*", "logs..x", "has space"] {
            let err = S2sPorts::new(config_with_input_topic(bad), hub.clone()).unwrap_err();
            assert!(err.to_string().contains(bad), "{bad}: {err}");
        }
        assert!(S2sPorts::new(config_with_input_topic("s2s.in"), hub).is_ok());
    }
}
