//! Kafka sink. (Skeleton: the kafka helper fills it in.)

pub mod config;
pub mod sink;

pub use config::KafkaConfig;
pub use sink::KafkaSink;
