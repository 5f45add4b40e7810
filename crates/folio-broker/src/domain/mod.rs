//! The broker's domain: what a Kafka cluster is made of, in Folio's terms. Topics and
//! their configs (`topics`), who owns which partition and group (`cluster`: membership,
//! fencing, the controller), consumer groups and their committed offsets (`group`),
//! idempotent producers (`producers`), transactions (`txn`), leader epochs (`epochs`),
//! fetch sessions (`fetch_sessions`), share groups' share-partitions and sessions
//! (`share`), quotas (`quotas`), principals and ACLs (`acl`: who
//! may do what, checked by `api/`), record batches and the records in them (`batch`,
//! `records`), the schema ids records name (`schema_ids`), the ledger audit (`audit`), and
//! settings that follow a store key (`watched`).
//!
//! **Architecture invariant:** the domain knows no Kafka message, no socket and no
//! broker: it never names a `kafka_protocol` type (requests and answers are translated
//! in `api/`) and never imports `api`, `wire` or the broker's shared state (`state`,
//! which holds the domain's parts); error codes are Kafka's numbers (`errors`), because
//! those are the domain's outcomes. The tidy test checks all three. Record batches are
//! bytes with a parsed header (`batch`): never decoded into records on the produce path,
//! only walked (`records`) to validate them.

pub mod acl;
pub mod audit;
pub mod batch;
pub mod cluster;
pub(crate) mod epochs;
pub(crate) mod fetch_sessions;
pub mod group;
pub mod producers;
pub mod quotas;
pub mod records;
pub mod schema_ids;
pub mod share;
pub mod topics;
pub mod txn;
pub(crate) mod watched;
