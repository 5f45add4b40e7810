//! Every limit of the broker in one place: the Kafka listener's, each with its default
//! (the README's limits table is this file), and the names, counts and sizes it
//! accepts from clients, with their relations checked at compile time. Each is enforced
//! with a clear error to the offender (an error code, or a closed connection with a
//! logged reason) and a metric (`folio_kafka_limit_hits_total{limit=...}`), never a panic.
//!
//! Memory: request bytes are reserved as they arrive, from the connection's budget and then
//! the process's, and held until the request's answer is written; a Fetch reserves its
//! answer's bytes from the connection's budget and the process's answer budget before
//! reading (taking less, or nothing, when they are short: never waiting). A client that
//! pipelines without reading therefore stops being read once its connection budget is
//! spent, and is closed when an answer waits longer than `reply_write_timeout` for it to
//! read.

use std::time::Duration;

use folio_proto::InvalidConfig;

/// The Kafka listener's limits (see the module doc).
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    /// `socket.request.max.bytes`: a larger request closes the connection. 100 MiB.
    pub request_bytes_max: usize,
    /// Request and answer bytes held by one connection at once (read, not yet answered and
    /// written). Reading waits for room. 128 MiB; at least `request_bytes_max`.
    pub connection_bytes_max: usize,
    /// A connection reads its next request only while it holds at most this many bytes
    /// (a request is still read whole, however large): the pushback under overload. A
    /// producer faster than its partitions waits in its own client, where its timeouts
    /// and backpressure apply, instead of parking requests in the broker's memory. 0: one
    /// request at a time, as Kafka serves a connection. 8 MiB (`connection_bytes_max`
    /// caps it).
    pub connection_read_ahead_bytes: usize,
    /// `queued.max.request.bytes`: request bytes held across all connections. 512 MiB; at
    /// least `connection_bytes_max`.
    pub process_bytes_max: usize,
    /// Fetch answer bytes held across all connections: a separate budget, so consumers
    /// that do not read their answers never stall producers. A Fetch takes what is free
    /// now (halving its ask down to 64 KiB) and never waits for it. 512 MiB.
    pub answer_bytes_max: usize,
    /// Requests of one connection being worked on at once (later ones wait). 256.
    pub inflight_per_connection: usize,
    /// Open client connections; more are closed at once. 4096.
    pub connections_max: usize,
    /// `max.connections.per.ip`: open connections from one client address. 1024.
    pub connections_per_address_max: usize,
    /// `connections.max.idle.ms`: a connection with no request for this long is closed.
    /// 10 minutes.
    pub idle_timeout: Duration,
    /// A request must arrive whole within this once its size has (one byte a second never
    /// holds memory for long). 30 s.
    pub request_read_timeout: Duration,
    /// An answer must be taken by the client within this, or the connection closes. 30 s.
    pub reply_write_timeout: Duration,
    /// `fetch.max.bytes` (broker side): the most record bytes one Fetch answer carries,
    /// whatever the request asks (`max_bytes <= 0` included); also the per-partition cap.
    /// 55 MiB.
    pub fetch_bytes_max: usize,
    /// Topics one Metadata request may auto-create; the other unknown names are answered
    /// UNKNOWN_TOPIC_OR_PARTITION. 16.
    pub auto_create_per_request_max: usize,
    /// Topics auto-created per minute by this broker, all clients together. 120.
    pub auto_create_per_minute_max: usize,
    /// `client.id` bytes; longer ones close the connection. 1024.
    pub client_id_bytes_max: usize,
    /// `socket.send.buffer.bytes`: the kernel's send buffer of each connection (0: the
    /// operating system's autotuned default). Bounds how many answers a client that does
    /// not read can have queued beyond `inflight_per_connection`: with several MiB of
    /// autotuned buffer, tens of thousands of small answers, so a non-reading client could
    /// keep the broker busy for free. 100 KiB.
    pub send_buffer_bytes: usize,
    /// Partition logs this broker keeps open at once (each holds an open ledger, its
    /// writer and the idempotent producers' state). Opening one more closes the least
    /// recently used (a later request reopens it: fenced, recovered, nothing lost). 10 000.
    pub partitions_open_max: usize,
    /// A partition nobody produced to or fetched from for this long is closed. 10 minutes.
    pub partition_idle_timeout: Duration,
    /// `max.incremental.fetch.session.cache.slots`: fetch sessions (KIP-227) kept at once.
    /// A new one evicts an idle or smaller one, or is not created (the client then sends
    /// full fetches). 1 000.
    pub fetch_sessions_max: usize,
    /// Partitions all fetch sessions hold together (about 100 bytes each). A session that
    /// would grow beyond is closed (FETCH_SESSION_ID_NOT_FOUND: the client starts over).
    /// 200 000.
    pub fetch_session_partitions_max: usize,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            request_bytes_max: 100 * 1024 * 1024,
            connection_bytes_max: 128 * 1024 * 1024,
            connection_read_ahead_bytes: 8 * 1024 * 1024,
            process_bytes_max: 512 * 1024 * 1024,
            answer_bytes_max: 512 * 1024 * 1024,
            inflight_per_connection: 256,
            connections_max: 4096,
            connections_per_address_max: 1024,
            idle_timeout: Duration::from_secs(600),
            request_read_timeout: Duration::from_secs(30),
            reply_write_timeout: Duration::from_secs(30),
            fetch_bytes_max: 55 * 1024 * 1024,
            auto_create_per_request_max: 16,
            auto_create_per_minute_max: 120,
            client_id_bytes_max: 1024,
            send_buffer_bytes: 100 * 1024,
            partitions_open_max: 10_000,
            partition_idle_timeout: Duration::from_secs(600),
            fetch_sessions_max: 1000,
            fetch_session_partitions_max: 200_000,
        }
    }
}

/// The names [`ListenerLimits::set`] takes (durations in milliseconds).
pub const NAMES: [&str; 20] = [
    "request_bytes_max",
    "connection_bytes_max",
    "connection_read_ahead_bytes",
    "process_bytes_max",
    "answer_bytes_max",
    "inflight_per_connection",
    "connections_max",
    "connections_per_address_max",
    "idle_timeout_ms",
    "request_read_timeout_ms",
    "reply_write_timeout_ms",
    "fetch_bytes_max",
    "auto_create_per_request_max",
    "auto_create_per_minute_max",
    "client_id_bytes_max",
    "send_buffer_bytes",
    "partitions_open_max",
    "partition_idle_timeout_ms",
    "fetch_sessions_max",
    "fetch_session_partitions_max",
];

impl ListenerLimits {
    /// Sets one limit by name (`folio broker --limit name=value`); durations in ms.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), InvalidConfig> {
        let n: u64 = value
            .parse()
            .map_err(|_| format!("limit {name}: {value:?} is not a non-negative integer"))?;
        let size = usize::try_from(n).map_err(|_| format!("limit {name}: {n} is too large"))?;
        let ms = Duration::from_millis(n);
        match name {
            "request_bytes_max" => self.request_bytes_max = size,
            "connection_bytes_max" => self.connection_bytes_max = size,
            "connection_read_ahead_bytes" => self.connection_read_ahead_bytes = size,
            "process_bytes_max" => self.process_bytes_max = size,
            "answer_bytes_max" => self.answer_bytes_max = size,
            "inflight_per_connection" => self.inflight_per_connection = size,
            "connections_max" => self.connections_max = size,
            "connections_per_address_max" => self.connections_per_address_max = size,
            "idle_timeout_ms" => self.idle_timeout = ms,
            "request_read_timeout_ms" => self.request_read_timeout = ms,
            "reply_write_timeout_ms" => self.reply_write_timeout = ms,
            "fetch_bytes_max" => self.fetch_bytes_max = size,
            "auto_create_per_request_max" => self.auto_create_per_request_max = size,
            "auto_create_per_minute_max" => self.auto_create_per_minute_max = size,
            "client_id_bytes_max" => self.client_id_bytes_max = size,
            "send_buffer_bytes" => self.send_buffer_bytes = size,
            "partitions_open_max" => self.partitions_open_max = size,
            "partition_idle_timeout_ms" => self.partition_idle_timeout = ms,
            "fetch_sessions_max" => self.fetch_sessions_max = size,
            "fetch_session_partitions_max" => self.fetch_session_partitions_max = size,
            _ => {
                return Err(InvalidConfig::new(format!(
                    "unknown limit {name:?}; the limits are: {}",
                    NAMES.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Rejects settings that could deadlock or that make no sense, naming the setting.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let positive = [
            ("request_bytes_max", self.request_bytes_max),
            ("inflight_per_connection", self.inflight_per_connection),
            ("connections_max", self.connections_max),
            ("connections_per_address_max", self.connections_per_address_max),
            ("fetch_bytes_max", self.fetch_bytes_max),
            ("answer_bytes_max", self.answer_bytes_max),
            ("partitions_open_max", self.partitions_open_max),
            ("partition_idle_timeout_ms", self.partition_idle_timeout.as_millis() as usize),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(InvalidConfig::new(format!("{name} must be positive")));
        }
        if self.connection_bytes_max < self.request_bytes_max {
            return Err(InvalidConfig::new(format!(
                "connection_bytes_max ({}) must be at least request_bytes_max ({}): a largest request could never be read",
                self.connection_bytes_max, self.request_bytes_max
            )));
        }
        if self.process_bytes_max < self.connection_bytes_max {
            return Err(InvalidConfig::new(format!(
                "process_bytes_max ({}) must be at least connection_bytes_max ({})",
                self.process_bytes_max, self.connection_bytes_max
            )));
        }
        if self.send_buffer_bytes > i32::MAX as usize / 2 {
            return Err(InvalidConfig::new("send_buffer_bytes must be below 1 GiB"));
        }
        if self.request_bytes_max > u32::MAX as usize / 2 {
            return Err(InvalidConfig::new("request_bytes_max must be below 2 GiB"));
        }
        Ok(())
    }
}

/// The limits counted by `folio_kafka_limit_hits_total{limit=...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    RequestBytes,
    Connections,
    ConnectionsPerAddress,
    IdleTimeout,
    RequestReadTimeout,
    ReplyWriteTimeout,
    FetchBytes,
    AutoCreatePerRequest,
    AutoCreatePerMinute,
    ClientId,
    /// A name above its limit (a group id above `group::GROUP_ID_BYTES_MAX`).
    Names,
    /// A partition closed to open another (`partitions_open_max`).
    PartitionsOpen,
    /// A fetch session not created or closed (`fetch_sessions_max`,
    /// `fetch_session_partitions_max`).
    FetchSessions,
    /// A new group refused: the coordinator holds `groups_max` groups.
    Groups,
    /// A commit that would create a group refused: its client created
    /// `new_groups_per_client_per_minute_max` this minute.
    NewGroupsPerClient,
}

impl Limit {
    /// Every limit, for listings and `--set` parsing.
    pub const ALL: [Limit; 15] = [
        Limit::RequestBytes,
        Limit::Connections,
        Limit::ConnectionsPerAddress,
        Limit::IdleTimeout,
        Limit::RequestReadTimeout,
        Limit::ReplyWriteTimeout,
        Limit::FetchBytes,
        Limit::AutoCreatePerRequest,
        Limit::AutoCreatePerMinute,
        Limit::ClientId,
        Limit::Names,
        Limit::PartitionsOpen,
        Limit::FetchSessions,
        Limit::Groups,
        Limit::NewGroupsPerClient,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Limit::RequestBytes => "request_bytes",
            Limit::Connections => "connections",
            Limit::ConnectionsPerAddress => "connections_per_address",
            Limit::IdleTimeout => "idle_timeout",
            Limit::RequestReadTimeout => "request_read_timeout",
            Limit::ReplyWriteTimeout => "reply_write_timeout",
            Limit::FetchBytes => "fetch_bytes",
            Limit::AutoCreatePerRequest => "auto_create_per_request",
            Limit::AutoCreatePerMinute => "auto_create_per_minute",
            Limit::ClientId => "client_id",
            Limit::Names => "names",
            Limit::PartitionsOpen => "partitions_open",
            Limit::FetchSessions => "fetch_sessions",
            Limit::Groups => "groups",
            Limit::NewGroupsPerClient => "new_groups_per_client",
        }
    }
}

// Names, counts and sizes the broker accepts from clients (every one refused with a
// Kafka error when exceeded).

/// Kafka's limit on topic names.
pub const TOPIC_NAME_BYTES_MAX: usize = 249;

/// Partitions per topic (each one is a managed log).
pub const PARTITIONS_MAX: i32 = 10_000;

/// Partitions one request opens at once (`Inner::open_all`): a Fetch or Produce
/// naming many closed partitions (its client's partitions just moved here, or the broker
/// restarted) waits about as long as the slowest opens, not their sum, while the bookies
/// and the metadata store see a bounded burst.
pub const PARTITION_OPENS_CONCURRENT_MAX: usize = 64;

/// The smallest `segment.bytes` a topic may set (Kafka 4's).
pub const SEGMENT_BYTES_MIN: i64 = 1 << 20;

/// Config overrides per topic.
pub const CONFIGS_MAX: usize = 64;

/// The longest group id (bytes). Escaped (`%2F` for each `/`) it stays well inside the
/// metadata store's key limit with the rest of an offset key around it.
pub const GROUP_ID_BYTES_MAX: usize = 1024;

/// The longest `group.instance.id` (bytes; Kafka's clients allow 249 characters): a
/// JoinGroup with a longer one gets INVALID_REQUEST.
pub const GROUP_INSTANCE_ID_BYTES_MAX: usize = 249;
const _: () = assert!(GROUP_ID_BYTES_MAX * 3 + 256 <= folio_meta::limits::KEY_BYTES_MAX);

/// The longest member id, rack id and subscription regex a ConsumerGroupHeartbeat may
/// carry (bytes; clients send a UUID as the member id): longer gets INVALID_REQUEST.
pub const CONSUMER_MEMBER_ID_BYTES_MAX: usize = 256;
/// The longest rack id of a consumer-protocol member (bytes).
pub const CONSUMER_RACK_ID_BYTES_MAX: usize = 256;
/// The longest subscription regex (bytes); its compiled program is bounded too
/// (`CONSUMER_REGEX_PROGRAM_BYTES_MAX`): a regex past either gets INVALID_REGULAR_EXPRESSION.
pub const CONSUMER_REGEX_BYTES_MAX: usize = 4096;
/// The largest compiled subscription regex (bytes of the regex crate's program).
pub const CONSUMER_REGEX_PROGRAM_BYTES_MAX: usize = 1 << 20;
/// Groups whose dynamic configs one broker caches; past it the cache starts over.
pub const GROUP_CONFIGS_CACHED_MAX: usize = 10_000;
/// The longest a ShareFetch waits for records (as a Fetch's wait is bounded).
pub const SHARE_FETCH_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(30);
/// Topic names one consumer-protocol member may subscribe to by name.
pub const CONSUMER_SUBSCRIBED_TOPICS_MAX: usize = 10_000;
/// How often a group's subscription regexes are matched against the topics again, at
/// least (Kafka resolves at most once per 10 s per group, too); a new or changed regex is
/// resolved at once.
pub const CONSUMER_REGEX_REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// Producers remembered per partition; the least recently seen go first.
pub const PRODUCERS_MAX: usize = 10_000;

/// Aborted transactions remembered per partition (for read_committed fetches); the oldest
/// are forgotten first. A snapshot of them, the open transactions and the producers'
/// marker epochs stays under the metadata store's value limit.
pub const ABORTED_TXNS_MAX: usize = 10_000;
const _: () = assert!(
    25 + ABORTED_TXNS_MAX * 24 + PRODUCERS_MAX * (18 + 10) <= folio_meta::limits::VALUE_BYTES_MAX
);

/// Partitions one transaction may write to, and groups it may commit offsets for: its
/// state record (every partition named) stays under the metadata store's value limit.
pub const TXN_PARTITIONS_MAX: usize = 2_000;
const _: () = assert!(
    TXN_PARTITIONS_MAX * (TOPIC_NAME_BYTES_MAX + 8) + 4096 <= folio_meta::limits::VALUE_BYTES_MAX
);

/// How much earlier than its open transaction's start a version 1 EndTxn may have reached
/// the coordinator and still end it (brokers' clocks differ when the coordinator moved);
/// one that reached it earlier still is a late request of an earlier transaction.
pub const TXN_END_BEFORE_START_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Tries to stage a TxnOffsetCommit's offsets against concurrent changes of its
/// transaction's record or of the same producer's staged offsets for the group before
/// CONCURRENT_TRANSACTIONS (the client retries).
pub const TXN_STAGE_ATTEMPTS_MAX: usize = 8;

/// How long a Produce v12 waits for its transaction's previous end before the partition
/// gets CONCURRENT_TRANSACTIONS (Kafka's `add.partitions.to.txn.max.timeout.ms`).
pub const TXN_IMPLICIT_ADD_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// How long EndTxn waits for its transaction's markers before it answers (they follow
/// anyway): long enough for the markers of partitions this broker owns.
pub const TXN_END_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// The longest transactional id (bytes), as a group id.
pub const TRANSACTIONAL_ID_BYTES_MAX: usize = GROUP_ID_BYTES_MAX;

/// Batches read per partition per fetch, at most.
pub const BATCHES_PER_PARTITION_MAX: usize = 10_000;

// A topic name goes into its metadata key (Kafka allows 249 bytes) and a partition's
// log name is derived from the topic id, not the name.
const _: () = assert!(TOPIC_NAME_BYTES_MAX + 64 <= folio_meta::limits::KEY_BYTES_MAX);
// Kafka's own limits on topic names and partition counts are below ours.
const _: () = assert!(TOPIC_NAME_BYTES_MAX >= 249 && PARTITIONS_MAX > 0 && CONFIGS_MAX > 0);
const _: () = assert!(PRODUCERS_MAX > 0 && BATCHES_PER_PARTITION_MAX > 0);

/// How long a long poll may be asked to wait at most.
pub const FETCH_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// The most bytes one batch's records may decompress to. 64 MiB: Kafka's default
/// `max.message.bytes` is 1 MiB, and codecs rarely do better than 1:20 on real data.
pub const DECOMPRESSED_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Ledgers whose metadata one DescribeLogDirs reads, at most.
pub const LOG_DIRS_LEDGERS_MAX: usize = 10_000;

/// Tries of an OffsetCommit whose topics keep changing under it (each re-reads them).
pub const COMMIT_ATTEMPTS_MAX: u32 = 3;

/// The least a partition's read reserves: below this it is not read this round.
pub const ANSWER_RESERVE_MIN: usize = 64 * 1024;

/// Longest principal or host in a binding.
pub const ACL_FIELD_BYTES_MAX: usize = 256;

/// Most bindings on one resource pattern (one metadata value).
pub const BINDINGS_PER_RESOURCE_MAX: usize = 1000;

/// Producers a snapshot holds at most (the most recently used): with five batches each it
/// stays under the metadata store's value limit.
pub const SNAPSHOT_PRODUCERS_MAX: usize = 8_000;

/// Entities with quotas, all together (one metadata value).
pub const QUOTA_ENTITIES_MAX: usize = 1000;

/// Longest user or client id named in a quota.
pub const QUOTA_NAME_BYTES_MAX: usize = 256;

/// Rates measured at once.
pub const SENSORS_MAX: usize = 10_000;

/// The most an answer's head buffer reserves at once; it grows as fields are written, so
/// an answer whose bulk is shared records never allocates their size a second time.
pub const HEAD_RESERVE_MAX: usize = 64 * 1024;

/// Fewest SCRAM iterations a credential may have (Kafka's minimum).
pub const ITERATIONS_MIN: u32 = 4096;

/// Most SCRAM iterations a credential may have (Kafka's maximum).
pub const ITERATIONS_MAX: u32 = 16384;

/// Longest SASL message a client may send (a user name, a nonce and a proof fit easily).
pub const SASL_MESSAGE_BYTES_MAX: usize = 8192;

/// Longest user name.
pub const USER_NAME_BYTES_MAX: usize = 256;

/// Longest listener name (Kafka's are short upper-case words).
pub const LISTENER_NAME_BYTES_MAX: usize = 64;

/// The most listeners a broker runs.
pub const LISTENERS_MAX: usize = 16;

/// Largest frame a client may send before it is authenticated (Kafka's
/// `sasl.server.max.receive.size`).
pub const SASL_RECEIVE_BYTES_MAX: usize = 512 * 1024;

/// Most certificates in a chain or CA file.
pub const PEM_CERTIFICATES_MAX: usize = 256;

/// The longest quota throttle: the whole measuring window (11 samples of 1 s; `quotas`
/// checks it against its window).
pub const THROTTLE_MAX: Duration = Duration::from_secs(11);

/// Schema ids produce remembers as registered (`domain::schema_ids`); past it, the set
/// starts again and ids are looked up as they come.
pub const SCHEMA_IDS_KNOWN_MAX: usize = 100_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_settings_are_named() {
        ListenerLimits::default().validate().unwrap();
        let l = ListenerLimits { connection_bytes_max: 1, ..ListenerLimits::default() };
        assert!(l.validate().unwrap_err().0.contains("connection_bytes_max"));
        let l = ListenerLimits { fetch_bytes_max: 0, ..ListenerLimits::default() };
        assert!(l.validate().unwrap_err().0.contains("fetch_bytes_max"));
        let mut l = ListenerLimits::default();
        for name in NAMES {
            l.set(name, "7").unwrap();
        }
        assert_eq!(l.idle_timeout, Duration::from_millis(7));
        assert!(l.set("nope", "1").unwrap_err().0.contains("request_bytes_max"));
        assert!(l.set("connections_max", "-1").unwrap_err().0.contains("connections_max"));
    }
}
