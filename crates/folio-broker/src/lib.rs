//! Folio's Kafka-compatible broker: Kafka clients produce to and fetch from topics whose
//! partitions are managed logs (`folio-log`) on bookies; the broker keeps no data itself.
//!
//! Three layers, each a module tree with its architecture invariant:
//!
//! - [`wire`]: listeners and connections; with Kafka's framing, the byte budgets and
//!   listener [`security`] (TLS, SASL) below it, shared with `api/`.
//! - [`api`]: one module per group of Kafka APIs, every one a `Handler` on one path
//!   (decode, authorize, handle, encode); `api::SUPPORTED` lists what is advertised. The
//!   only layer that knows Kafka messages.
//! - [`domain`]: topics, partitions and their owners, groups, producers, epochs, fetch
//!   sessions, quotas, batches, deletion, compaction, the audit. No Kafka message types.
//!
//! Beside them: [`Broker`] (`broker.rs`: start, the background tasks, stop), the shared
//! state the layers pass along (`state`: the domain's parts, the partitions served, each
//! a managed log it opened), topic deletion ([`deletion`]) and compaction
//! ([`compaction`]) acting on that state, [`config`], [`limits`] (every limit,
//! with its default), [`errors`] (Kafka's error codes and the broker's error type),
//! [`metrics`] and [`startup`]. Modules import each other down this list's layers only
//! (wire, api, domain); the tidy test finds any circle.
//!
//! **Architecture invariant:** record batches are never decoded into records on the
//! produce path (the protocol crate's record types drop duplicate header keys): the
//! broker reads the 61-byte header, walks the records to validate them, checks the CRC,
//! and patches offsets. The broker reaches bookies only through `folio-log` and
//! `folio-client`, and never writes a managed log it has not opened (and so fenced).

// Kafka's wire format is big-endian (Folio's own formats are little-endian).
#![allow(clippy::big_endian_bytes)]

pub mod api;
mod broker;
mod budget;
pub mod compaction;
pub mod config;
pub mod deletion;
pub mod domain;
pub mod errors;
pub mod limits;
pub mod metrics;
pub mod security;
pub mod startup;
mod state;
pub mod transactions;
pub mod wire;

// The crate's public paths stay flat: tools and tests name `folio_broker::topics`, not
// the layer it lives in.
pub use domain::{acl, audit, batch, cluster, group, producers, quotas, records, topics};

pub use broker::Broker;
pub use config::BrokerConfig;
pub use topics::{TopicConfig, TopicRecord};
