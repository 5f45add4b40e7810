//! The wire: listeners and connections (`server`: accept, TLS and SASL handshakes, read
//! frames within the byte budgets, answer in request order). What it shares with `api/`
//! and the settings sits below both: Kafka's framing (`crate::framing`), the byte budgets
//! (`crate::budget`), and listener security (`crate::security`: protocols, TLS, SASL
//! PLAIN and SCRAM, the credentials the users API writes).
//!
//! **Architecture invariant:** the wire knows bytes, connections and principals, not
//! topics, partitions or groups: it hands each request's header and body to
//! `crate::api::route` with the broker's state, and writes back what it answers. It
//! imports from the domain only the principal it authenticated (`acl::Session`). Of the
//! Kafka messages it knows only request headers and the SASL handshake, which precede
//! any api. Sockets reach it only through `folio-rt`.

pub(crate) mod server;
