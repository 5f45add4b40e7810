//! The key layout, in one place. Every key lives under a root (default `folio`), so several
//! clusters (or test runs) can share one etcd.
//!
//! ```text
//! <root>/cluster_id                          cluster id, created once
//! <root>/bookies/writable/<bookie_id>        registration of a writable bookie (leased)
//! <root>/bookies/readonly/<bookie_id>        registration of a read-only bookie (leased)
//! <root>/cookies/<bookie_id>                 the bookie's cookie
//! <root>/ledgers/<ledger_id, 20 digits>      ledger metadata (zero-padded: sorted by id)
//! <root>/ids/<sequence>                     id sequences (`MetadataStore::next_id`)
//! <root>/logs/<name>                         a managed log: its ledger chain (folio-log)
//! <root>/cursors/<log>/<cursor>              a durable cursor of a managed log
//! <root>/trash/<ledger_id, 20 digits>        a ledger removed from a chain, to be deleted
//! <root>/offset-index/<ledger_id, 20 digits> a closed ledger's offset index (folio-log)
//! <root>/underreplicated/<ledger_id, 20 d.>  an under-replication mark (folio-repair)
//! <root>/autorecovery/auditor                the auditor's claim (leased)
//! <root>/autorecovery/claims/<ledger_id>     a replication worker's claim (leased)
//! <root>/autorecovery/decommission/<bookie>  a request to drain a bookie
//! <root>/autorecovery/seen/<bookie_id>       the cookie instance the auditor last saw
//! <root>/autorecovery/maintenance/<bookie>   a bookie whose absence is not a loss
//! <root>/autorecovery/last-check             when the periodic check last finished (ms)
//! <root>/users/<mechanism>/<user>            a SCRAM credential (folio-broker's `security`)
//! <root>/registry/...                        the schema registry (folio-registry's layout)
//! ```
//! Log and cursor names are arbitrary UTF-8 without `/` in cursor names; a log name may
//! contain `/` (e.g. `topic/partition`), so cursors live under their own prefix.
//! Ledger ids come from `next_id(&keys.id_sequence(LEDGER_ID_SEQUENCE))`.

use folio_proto_free::LedgerId;

/// Id types used in keys (this crate depends on no other Folio crate).
mod folio_proto_free {
    /// A ledger's id.
    pub type LedgerId = u64;
}

/// The name of the id sequence ledger ids come from.
pub const LEDGER_ID_SEQUENCE: &str = "ledger";

/// Every key Folio stores, under one root (one cluster per root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    root: String,
}

impl Default for Keys {
    fn default() -> Self {
        Keys::new("folio")
    }
}

/// The names of the state a log's owner may keep beside it (`Keys::log_state`): the
/// broker's idempotent producer snapshot.
pub const LOG_STATES: &[&str] = &["producers"];

impl Keys {
    /// Keys under `root` (without a trailing `/`).
    pub fn new(root: impl Into<String>) -> Keys {
        let root = root.into();
        assert!(
            !root.is_empty() && !root.ends_with('/'),
            "root must be non-empty without a trailing '/'"
        );
        Keys { root }
    }

    /// The root every key is under.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The key of the cluster's id, written once by the first process.
    pub fn cluster_id(&self) -> String {
        format!("{}/cluster_id", self.root)
    }

    /// The prefix of writable bookies' lease-bound registrations.
    pub fn bookies_writable(&self) -> String {
        format!("{}/bookies/writable/", self.root)
    }

    /// The prefix of read-only bookies' lease-bound registrations.
    pub fn bookies_readonly(&self) -> String {
        format!("{}/bookies/readonly/", self.root)
    }

    /// A bookie's registration, under the writable or the read-only prefix.
    pub fn bookie(&self, bookie_id: &str, read_only: bool) -> String {
        let prefix = if read_only { self.bookies_readonly() } else { self.bookies_writable() };
        format!("{prefix}{bookie_id}")
    }

    /// A bookie's cookie: its id bound to its directories and instance.
    pub fn cookie(&self, bookie_id: &str) -> String {
        format!("{}/cookies/{bookie_id}", self.root)
    }

    /// The counter of id sequence `name`.
    pub fn id_sequence(&self, name: &str) -> String {
        format!("{}/ids/{name}", self.root)
    }

    /// The prefix of every managed log's record.
    pub fn logs(&self) -> String {
        format!("{}/logs/", self.root)
    }

    /// The record of managed log `name`: its ledgers, owner and state.
    pub fn log(&self, name: &str) -> String {
        format!("{}/logs/{name}", self.root)
    }

    /// The name of the log stored at `key`.
    pub fn parse_log<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(self.root.as_str())?.strip_prefix("/logs/")
    }

    /// The prefix of `log`'s cursors (ends with `/`).
    pub fn cursors(&self, log: &str) -> String {
        format!("{}/cursors/{log}/", self.root)
    }

    /// Cursor `cursor` of log `log`: the offset it acknowledged up to.
    pub fn cursor(&self, log: &str, cursor: &str) -> String {
        format!("{}/cursors/{log}/{cursor}", self.root)
    }

    /// The prefix of what a log's owner keeps beside log `log` (ends with `/`): the
    /// broker's idempotent producer snapshot. Deleted with the log, like its cursors.
    pub fn log_states(&self, log: &str) -> String {
        format!("{}/log-state/{log}/", self.root)
    }

    /// State `what` kept beside log `log` (see `log_states`; `what` is one of
    /// [`LOG_STATES`], which the log's deletion removes by name, so one written while it
    /// lists them is not left behind).
    pub fn log_state(&self, log: &str, what: &str) -> String {
        format!("{}/log-state/{log}/{what}", self.root)
    }

    /// The prefix of every topic's record (the name → topic id binding and its settings).
    pub fn topics(&self) -> String {
        format!("{}/topics/", self.root)
    }

    /// The record of topic `name`.
    pub fn topic(&self, name: &str) -> String {
        format!("{}/topics/{name}", self.root)
    }

    /// The prefix of topic deletion markers (one per deleted topic id, until its data is
    /// in the trash).
    pub fn topic_deletions(&self) -> String {
        format!("{}/topic-deletions/", self.root)
    }

    /// The deletion marker of the topic with this id.
    pub fn topic_deletion(&self, topic_id_hex: &str) -> String {
        format!("{}/topic-deletions/{topic_id_hex}", self.root)
    }

    /// The prefix of the Kafka brokers' lease-bound registrations.
    pub fn brokers(&self) -> String {
        format!("{}/brokers/", self.root)
    }

    /// The registration of broker `node_id`.
    pub fn broker(&self, node_id: i32) -> String {
        format!("{}/brokers/{node_id}", self.root)
    }

    /// The Kafka controller's lease-bound claim (its node id): one broker holds it at a time.
    pub fn controller(&self) -> String {
        format!("{}/controller", self.root)
    }

    /// The prefix of consumer groups' committed offsets.
    pub fn groups(&self) -> String {
        format!("{}/groups/", self.root)
    }

    /// The prefix of the group coordinators' claims (one per group that rebalanced or
    /// committed offsets).
    pub fn group_claims(&self) -> String {
        format!("{}/group-claims/", self.root)
    }

    /// The claim on group `escaped` (a group id with `/` and `%` escaped): which broker
    /// coordinates it, at which coordinator epoch and generation; every offset write
    /// compares it.
    pub fn group_claim(&self, escaped: &str) -> String {
        format!("{}/group-claims/{escaped}", self.root)
    }

    /// The prefix of transactional ids' state records.
    pub fn transactions(&self) -> String {
        format!("{}/transactions/", self.root)
    }

    /// The state record of transactional id `escaped` (`/` and `%` escaped): its producer
    /// id and epoch, its transaction's state, partitions and groups.
    pub fn transaction(&self, escaped: &str) -> String {
        format!("{}/transactions/{escaped}", self.root)
    }

    /// The prefix of the transactions whose markers are being written (one empty key per
    /// transactional id in PrepareCommit or PrepareAbort): what every broker scans.
    pub fn transactions_ending(&self) -> String {
        format!("{}/transactions-ending/", self.root)
    }

    /// The ending-transaction key of transactional id `escaped`.
    pub fn transaction_ending(&self, escaped: &str) -> String {
        format!("{}/transactions-ending/{escaped}", self.root)
    }

    /// The offsets producer `producer_id` committed for group `escaped` in its open
    /// transaction (TxnOffsetCommit): applied to the group when the transaction commits.
    pub fn transaction_offsets(&self, escaped: &str, producer_id: i64) -> String {
        format!("{}/transaction-offsets/{escaped}/{producer_id}", self.root)
    }

    /// The prefix of every producer's staged offsets for group `escaped`.
    pub fn transaction_offsets_of(&self, escaped: &str) -> String {
        format!("{}/transaction-offsets/{escaped}/", self.root)
    }

    /// The prefix of the trash: ledgers waiting to be deleted.
    pub fn trash(&self) -> String {
        format!("{}/trash/", self.root)
    }

    /// The trash record of `ledger_id`.
    pub fn trash_ledger(&self, ledger_id: LedgerId) -> String {
        format!("{}/trash/{ledger_id:020}", self.root)
    }

    /// The prefix of closed ledgers' persisted offset indexes.
    pub fn offset_indexes(&self) -> String {
        format!("{}/offset-index/", self.root)
    }

    /// The persisted offset index of `ledger_id`.
    pub fn offset_index(&self, ledger_id: LedgerId) -> String {
        format!("{}/offset-index/{ledger_id:020}", self.root)
    }

    /// The prefix of under-replication marks (ledgers with a copy to restore).
    pub fn under_replicated(&self) -> String {
        format!("{}/underreplicated/", self.root)
    }

    /// The under-replication mark of `ledger_id`.
    pub fn under_replicated_ledger(&self, ledger_id: LedgerId) -> String {
        format!("{}/underreplicated/{ledger_id:020}", self.root)
    }

    /// The ledger id of a key from [`Keys::under_replicated_ledger`].
    pub fn parse_under_replicated(&self, key: &str) -> Option<LedgerId> {
        parse_id(key.strip_prefix(&self.under_replicated())?)
    }

    /// The auditor's lease-bound claim (one auditor per cluster).
    pub fn auditor(&self) -> String {
        format!("{}/autorecovery/auditor", self.root)
    }

    /// A replication worker's lease-bound claim on `ledger_id`.
    pub fn replication_claim(&self, ledger_id: LedgerId) -> String {
        format!("{}/autorecovery/claims/{ledger_id:020}", self.root)
    }

    /// The prefix of replication workers' claims.
    pub fn replication_claims(&self) -> String {
        format!("{}/autorecovery/claims/", self.root)
    }

    /// The prefix of the auditor's absence records (how long each bookie was gone).
    pub fn absences(&self) -> String {
        format!("{}/autorecovery/absence/", self.root)
    }

    /// The auditor's absence record of `bookie_id` (see folio-repair's auditor).
    pub fn absence(&self, bookie_id: &str) -> String {
        format!("{}/autorecovery/absence/{bookie_id}", self.root)
    }

    /// The prefix of decommission requests.
    pub fn decommissions(&self) -> String {
        format!("{}/autorecovery/decommission/", self.root)
    }

    /// The request to drain `bookie_id` (`folio bookie decommission`).
    pub fn decommission(&self, bookie_id: &str) -> String {
        format!("{}/autorecovery/decommission/{bookie_id}", self.root)
    }

    /// When the auditor's periodic check last finished (ms since the epoch, decimal).
    pub fn last_check(&self) -> String {
        format!("{}/autorecovery/last-check", self.root)
    }

    /// The prefix of bookies in maintenance (their absence is not a loss).
    pub fn maintenances(&self) -> String {
        format!("{}/autorecovery/maintenance/", self.root)
    }

    /// The maintenance flag of `bookie_id`.
    pub fn maintenance(&self, bookie_id: &str) -> String {
        format!("{}/autorecovery/maintenance/{bookie_id}", self.root)
    }

    /// The cookie instance id of `bookie_id` the auditor last saw (a change means the
    /// bookie's disks were formatted).
    pub fn bookie_seen(&self, bookie_id: &str) -> String {
        format!("{}/autorecovery/seen/{bookie_id}", self.root)
    }

    /// The prefix of the auditor's seen instances.
    pub fn bookies_seen(&self) -> String {
        format!("{}/autorecovery/seen/", self.root)
    }

    /// The prefix of bookie cookies (every bookie that ever joined and was not removed).
    pub fn cookies(&self) -> String {
        format!("{}/cookies/", self.root)
    }

    /// The SCRAM credentials of one mechanism (e.g. `SCRAM-SHA-512`), one key per user.
    pub fn scram_credentials(&self, mechanism: &str) -> String {
        format!("{}/users/{mechanism}/", self.root)
    }

    /// The SCRAM credential of `user` for `mechanism`. User names are any UTF-8 (Kafka's
    /// rule); the name is the rest of the key, `/` included.
    pub fn scram_credential(&self, mechanism: &str, user: &str) -> String {
        format!("{}/users/{mechanism}/{user}", self.root)
    }

    /// The prefix the schema registry keeps its keys under (`folio-registry` lays them out).
    pub fn registry(&self) -> String {
        format!("{}/registry/", self.root)
    }

    /// The prefix of every ledger's metadata.
    pub fn ledgers(&self) -> String {
        format!("{}/ledgers/", self.root)
    }

    /// The metadata of `ledger_id`.
    pub fn ledger(&self, ledger_id: LedgerId) -> String {
        format!("{}/ledgers/{ledger_id:020}", self.root)
    }

    /// The ledger id of a key from [`Keys::ledger`].
    pub fn parse_ledger(&self, key: &str) -> Option<LedgerId> {
        parse_id(key.strip_prefix(&self.ledgers())?)
    }
}

/// A 20-digit, zero-padded ledger id.
fn parse_id(digits: &str) -> Option<LedgerId> {
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_keys_sort_by_id_and_parse_back() {
        let k = Keys::default();
        assert!(k.ledger(9) < k.ledger(10));
        assert!(k.ledger(u64::MAX).starts_with(&k.ledgers()));
        assert_eq!(k.parse_ledger(&k.ledger(12345)), Some(12345));
        assert_eq!(k.parse_ledger("folio/ledgers/12"), None);
        assert_eq!(k.bookie("b1", true), "folio/bookies/readonly/b1");
    }
}
