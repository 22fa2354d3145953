//! How soon a librdkafka client that knows no broker any more goes back to
//! its bootstrap list: a setting every client of this crate gets.
//!
//! Since librdkafka 2.10 a client forgets every broker that a metadata
//! response does not list. A broker in its controlled shutdown can answer
//! with a list that does not hold itself; a client with one broker then
//! knows none, and it bootstraps again only after
//! `metadata.recovery.rebootstrap.trigger.ms`, five minutes by default.
//! For those five minutes a sink's producer delivers nothing, even with the
//! broker back: the chaos run (`scripts/chaos.sh`) caught it as a Forward
//! source never acknowledged again after a 5 s broker outage, the node's
//! producer log showing "Sending TERMINATE" to its only broker during the
//! shutdown and no connection after.

use rdkafka::ClientConfig;

/// librdkafka's property for the delay.
pub const REBOOTSTRAP_TRIGGER_PROPERTY: &str = "metadata.recovery.rebootstrap.trigger.ms";

/// The delay: a few seconds, as long as a broker restart takes, not five
/// minutes. Re-bootstrapping a client whose brokers are merely down costs
/// one more connection attempt to the bootstrap list.
pub const REBOOTSTRAP_AFTER_MS: u64 = 5_000;

/// Sets [`REBOOTSTRAP_TRIGGER_PROPERTY`] to [`REBOOTSTRAP_AFTER_MS`] unless
/// the user's properties already set it.
pub fn rebootstrap_soon(cfg: &mut ClientConfig) -> &mut ClientConfig {
    crate::config::set_default(
        cfg,
        REBOOTSTRAP_TRIGGER_PROPERTY,
        REBOOTSTRAP_AFTER_MS.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_is_set_unless_the_user_chose_one() {
        let mut cfg = ClientConfig::new();
        rebootstrap_soon(&mut cfg);
        assert_eq!(cfg.get(REBOOTSTRAP_TRIGGER_PROPERTY), Some("5000"));

        let mut cfg = ClientConfig::new();
        cfg.set(REBOOTSTRAP_TRIGGER_PROPERTY, "60000");
        rebootstrap_soon(&mut cfg);
        assert_eq!(cfg.get(REBOOTSTRAP_TRIGGER_PROPERTY), Some("60000"));
    }

    #[test]
    fn librdkafka_accepts_the_property() {
        // A client is created (no broker needed): librdkafka refuses an
        // unknown property at creation, so a renamed one fails here.
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", "127.0.0.1:1");
        rebootstrap_soon(&mut cfg);
        let producer: Result<rdkafka::producer::BaseProducer, _> = cfg.create();
        assert!(producer.is_ok(), "{:?}", producer.err());
    }
}
