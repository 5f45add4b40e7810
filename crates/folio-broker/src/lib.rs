//! Folio's Kafka-compatible broker: Kafka clients produce to and fetch from topics whose
//! partitions are managed logs (`folio-log`) on bookies; the broker keeps no data itself.
//!
//! - [`Broker`] (`broker.rs`): settings, the topics served, the partition logs it owns.
//! - `server.rs`: listeners, connections, framing, answers in request order.
//! - [`security`]: listeners' protocols, TLS, SASL (PLAIN, SCRAM) and credentials.
//! - `api/`: one module per group of Kafka APIs; `api::SUPPORTED` lists what is advertised.
//! - [`batch`]: record batches as opaque bytes (header, CRC, offset patching).
//! - [`topics`]: the topic record (name → topic id binding) and topic configs.
//! - [`limits`]: every limit of the Kafka listener, with its default.
//! - [`metrics`]: Prometheus metrics per broker and per topic.
//!
//! **Architecture invariant:** record batches are never decoded into records (the
//! protocol crate's record types drop duplicate header keys): the broker reads the 61-byte
//! header, checks the CRC, and patches offsets. The broker reaches bookies only through
//! `folio-log` and never writes a managed log it has not opened (and so fenced).

// Kafka's wire format is big-endian (Folio's own formats are little-endian).
#![allow(clippy::big_endian_bytes)]

pub mod api;
pub mod audit;
pub mod batch;
mod broker;
mod budget;
pub mod cluster;
pub mod compaction;
pub mod config;
pub mod deletion;
mod epochs;
pub mod errors;
mod fetch_sessions;
mod framing;
pub mod group;
pub mod limits;
pub mod metrics;
pub mod producers;
pub mod quotas;
pub mod records;
pub mod security;
mod server;
pub mod startup;
mod state;
pub mod topics;
mod watched;

pub use broker::Broker;
pub use config::BrokerConfig;
pub use topics::{TopicConfig, TopicRecord};
