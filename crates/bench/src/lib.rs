//! Tidegate's load generator. Each scenario reproduces one reference experiment
//! (`../shared/seeds/`) with the same parameter names and prints the seed's
//! columns; all share the open-model driver, the HdrHistogram report and the
//! server sampler defined here.

pub mod scenarios;

pub use scenarios::Scenario;
