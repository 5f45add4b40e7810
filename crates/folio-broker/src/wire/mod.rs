//! The wire: listeners and connections (`server`: accept, TLS and SASL handshakes, read
//! frames within the byte budgets, answer in request order; `sasl`: each connection's
//! authentication state). It takes Kafka's framing and the SASL requests' messages from
//! `api` (`api::framing`, `api::sasl`); what it shares with `api/` and the settings sits
//! below both: the byte budgets (`crate::budget`) and listener security
//! (`crate::security`: protocols, TLS, SASL PLAIN and SCRAM, the credentials the users
//! API writes).
//!
//! **Architecture invariant:** the wire knows bytes, connections and principals, not
//! topics, partitions or groups: it hands each request's header and body to
//! `crate::api::route` with the broker's state, and writes back what it answers. It
//! imports from the domain only the principal it authenticated (`acl::Session`). It knows
//! none of Kafka's messages: their bytes are `api`'s. Sockets reach it only through
//! `folio-rt`.

pub(crate) mod sasl;
pub(crate) mod server;
