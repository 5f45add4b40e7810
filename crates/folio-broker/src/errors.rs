//! Kafka error codes the broker answers with (names as in Kafka's `Errors.java`).

/// No error.
pub const NONE: i16 = 0;
/// The offset asked for is outside the partition's range.
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
/// A record batch failed its CRC or does not decode.
pub const CORRUPT_MESSAGE: i16 = 2;
/// No such topic or partition (clients refresh metadata and retry).
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// No broker leads the partition now (this one is fenced and sees no other); clients
/// refresh metadata and retry.
pub const LEADER_NOT_AVAILABLE: i16 = 5;
/// This broker does not own the partition (now); clients refresh metadata.
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
/// The request did not complete in its timeout.
pub const REQUEST_TIMED_OUT: i16 = 7;
/// A batch above `max.message.bytes`.
pub const MESSAGE_TOO_LARGE: i16 = 10;
/// Commit metadata above the limit.
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
/// A record timestamp out of the topic's bounds, or a producer-set LogAppendTime.
pub const INVALID_TIMESTAMP: i16 = 32;
/// The coordinator is loading the group's state: clients retry here shortly.
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
/// The group coordinator is not available yet.
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
/// This broker does not coordinate the group.
pub const NOT_COORDINATOR: i16 = 16;
/// A topic name outside Kafka's rules.
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
/// `acks` other than 0, 1 or -1.
pub const INVALID_REQUIRED_ACKS: i16 = 21;
/// A group request from a past generation.
pub const ILLEGAL_GENERATION: i16 = 22;
/// A member whose protocols the group does not share.
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
/// An empty or invalid group id.
pub const INVALID_GROUP_ID: i16 = 24;
/// A member id the group does not know.
pub const UNKNOWN_MEMBER_ID: i16 = 25;
/// A session timeout outside the broker's range.
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
/// The group is rebalancing: rejoin.
pub const REBALANCE_IN_PROGRESS: i16 = 27;
/// A request version the broker does not serve.
pub const UNSUPPORTED_VERSION: i16 = 35;
/// CreateTopics of a name that is taken.
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
/// A partition count out of range.
pub const INVALID_PARTITIONS: i16 = 37;
/// A replication factor out of range.
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
/// Explicit replica assignments (not taken).
pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
/// A config key or value outside its rules.
pub const INVALID_CONFIG: i16 = 40;
/// A request beyond a limit the broker enforces (the message or the log names it).
pub const POLICY_VIOLATION: i16 = 44;
/// A request that makes no sense (duplicates, contradictions, unsupported features).
pub const INVALID_REQUEST: i16 = 42;
/// An idempotent batch that does not follow the producer's last sequence.
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
/// An idempotent batch already written.
pub const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
/// An idempotent batch from an older producer epoch.
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
/// A transactional request the transaction's state does not allow (EndTxn with no
/// transaction, a partition added while one ends).
pub const INVALID_TXN_STATE: i16 = 48;
/// A producer id (or epoch) other than the one the transactional id holds.
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
/// A transaction timeout above `transaction_max_timeout`.
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
/// The transactional id's previous transaction is still ending: clients retry shortly.
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
/// OffsetFetch with `require_stable` of an offset an open transaction has staged (KIP-447):
/// clients retry.
pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
/// DescribeTransactions of an id with no state.
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
/// A transactional request that failed in a way the producer recovers from by aborting
/// its transaction (KIP-890; Produce v11+ for a partition outside the transaction).
pub const TRANSACTION_ABORTABLE: i16 = 120;
/// A producer whose epoch a newer one of the same transactional id fenced.
pub const PRODUCER_FENCED: i16 = 90;
/// Storage or metadata failed; clients retry.
pub const KAFKA_STORAGE_ERROR: i16 = 56;
/// DeleteTopics while `delete.topic.enable=false` (v3+).
pub const TOPIC_DELETION_DISABLED: i16 = 73;
/// A producer id the partition does not know.
pub const UNKNOWN_PRODUCER_ID: i16 = 59;
/// DeleteGroups of a group with members.
pub const NON_EMPTY_GROUP: i16 = 68;
/// No such group.
pub const GROUP_ID_NOT_FOUND: i16 = 69;
/// A codec the request's version does not allow.
pub const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
/// Cancelling a partition reassignment when none runs.
pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
/// The group has its maximum number of members.
pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
/// A consumer-protocol heartbeat at an epoch the member is not at: it rejoins at epoch 0.
pub const FENCED_MEMBER_EPOCH: i16 = 110;
/// A static member joined under an instance id another live member still holds.
pub const UNRELEASED_INSTANCE_ID: i16 = 111;
/// A consumer-protocol member named an assignor this broker does not run.
pub const UNSUPPORTED_ASSIGNOR: i16 = 112;
/// An offset commit at a member epoch other than the member's (it retries at its new one).
pub const STALE_MEMBER_EPOCH: i16 = 113;
/// A subscription regex that does not compile (or is above its limits).
pub const INVALID_REGULAR_EXPRESSION: i16 = 128;
/// An acknowledgement of a record the member does not hold (KIP-932).
pub const INVALID_RECORD_STATE: i16 = 121;
/// A share fetch names a share session this broker does not have.
pub const SHARE_SESSION_NOT_FOUND: i16 = 122;
/// A share fetch's session epoch is not the next one.
pub const INVALID_SHARE_SESSION_EPOCH: i16 = 123;
/// This broker has its maximum of share sessions.
pub const SHARE_SESSION_LIMIT_REACHED: i16 = 133;
/// A static member's instance id now belongs to another member id (KIP-345).
pub const FENCED_INSTANCE_ID: i16 = 82;
/// ElectLeaders of a partition whose leader is already the right one.
pub const ELECTION_NOT_NEEDED: i16 = 84;
/// OffsetDelete of a topic a member of the group is subscribed to.
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
/// A batch the broker does not take (transactional, control, bad sequence).
pub const INVALID_RECORD: i16 = 87;
/// No topic has the id asked for.
pub const UNKNOWN_TOPIC_ID: i16 = 100;
/// A request's current leader epoch is older than the partition's.
pub const FENCED_LEADER_EPOCH: i16 = 74;
/// A request's current leader epoch is newer than the partition's.
pub const UNKNOWN_LEADER_EPOCH: i16 = 76;
/// An incremental fetch names a session this broker does not hold (any more).
pub const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
/// An incremental fetch carries an epoch other than the one its session expects.
pub const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
/// A fetch session's requests switched between topic names and topic ids.
pub const FETCH_SESSION_TOPIC_ID_ERROR: i16 = 106;
/// The principal may not do this to the topic.
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// The principal may not do this to the group.
pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
/// The principal may not do this to the cluster.
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
/// The principal may not use the transactional id.
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
/// No authorizer is configured (the ACL APIs).
pub const SECURITY_DISABLED: i16 = 54;
/// A SASL mechanism the broker does not offer.
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
/// A SASL request the connection's state does not allow.
pub const ILLEGAL_SASL_STATE: i16 = 34;
/// Wrong user or password.
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// No such resource (a user without SCRAM credentials).
pub const RESOURCE_NOT_FOUND: i16 = 91;
/// A resource named twice in one request.
pub const DUPLICATE_RESOURCE: i16 = 92;
/// A credential outside the rules (iterations, empty user).
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;

/// Why the broker failed a request, or one topic, partition or group of it. The one place
/// where a failure becomes a Kafka error code is [`BrokerError::code`]; the `Display` text is
/// the message the client gets (CreateTopics, DeleteTopics, DescribeConfigs answers) and the
/// line the operator reads.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The partition's managed log failed; [`log_code`] says what that means to a client.
    #[error(transparent)]
    Log(#[from] folio_log::LogError),
    /// The metadata store failed or could not be reached.
    #[error("metadata store: {0}")]
    Meta(#[from] folio_meta::MetaError),
    /// A compare-and-set on a topic lost to concurrent changes on every retry.
    #[error("topic {0} keeps changing; try again")]
    Contended(String),
    /// No topic has this name.
    #[error("topic {0} does not exist")]
    UnknownTopic(String),
    /// The request's principal may not do this to the topic (an ACL).
    #[error("not authorized to {op} topic {topic}")]
    TopicAuthorization {
        /// The operation (`Write`, `Read`).
        op: &'static str,
        /// The topic's name.
        topic: String,
    },
    /// A partition index the topic does not have.
    #[error("topic {topic} has {partitions} partitions, not {partition}")]
    UnknownPartition {
        /// The topic's name.
        topic: String,
        /// The index asked for.
        partition: i32,
        /// How many the topic has.
        partitions: u32,
    },
    /// No topic has this id.
    #[error("no topic has id {0}")]
    UnknownTopicId(String),
    /// CreateTopics of a name that is taken.
    #[error("topic {0} already exists")]
    TopicExists(String),
    /// A topic name outside Kafka's rules.
    #[error("{0}")]
    InvalidTopic(String),
    /// A topic config key or value outside its rules.
    #[error("{0}")]
    InvalidConfig(String),
    /// A partition count out of range, or fewer partitions than the topic has.
    #[error("{0}")]
    InvalidPartitions(String),
    /// A replication factor out of range.
    #[error("{0}")]
    InvalidReplicationFactor(String),
    /// Explicit replica assignments (bookies are chosen per ledger).
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    /// DeleteTopics while `delete.topic.enable=false`.
    #[error("topic deletion is disabled (delete.topic.enable=false)")]
    TopicDeletionDisabled,
    /// A request that is well-formed but asks for something that makes no sense.
    #[error("{0}")]
    InvalidRequest(String),
    /// Produce with an `acks` other than 0, 1 or -1.
    #[error("acks={0}: use 0, 1 or -1 (all)")]
    InvalidRequiredAcks(i16),
    /// A request version this broker decodes but does not serve.
    #[error("{api} v{version} is not supported")]
    UnsupportedVersion {
        /// The API's name.
        api: &'static str,
        /// The version asked for.
        version: i16,
    },
    /// A record batch that does not decode or fails its CRC.
    #[error("{0}")]
    CorruptMessage(String),
    /// A batch this broker does not take (transactional, control, a bad sequence).
    #[error("{0}")]
    InvalidRecord(String),
    /// Records a topic does not take (a null key on a compacted topic): Kafka's
    /// INVALID_RECORD with each record's index in its batch (`record_errors`, Produce v8+).
    #[error("{message}")]
    InvalidRecords { message: String, records: Vec<i32> },
    /// Records whose timestamps the topic does not take (out of
    /// `message.timestamp.before/after.max.ms`, or a producer-set LogAppendTime): Kafka's
    /// INVALID_TIMESTAMP, with the records at fault as for `InvalidRecords`.
    #[error("{message}")]
    InvalidTimestamp { message: String, records: Vec<i32> },
    /// A batch above the topic's `max.message.bytes`.
    #[error("{0}")]
    MessageTooLarge(String),
    /// A codec the request's version does not allow.
    #[error("{0}")]
    UnsupportedCompression(String),
    /// An idempotent producer's batch that does not follow its last sequence.
    #[error("{0}")]
    OutOfOrderSequence(String),
    /// An idempotent producer's batch from an epoch older than its newest.
    #[error("{0}")]
    InvalidProducerEpoch(String),
    /// A transactional batch its transaction does not allow (the partition is not in the
    /// producer's ongoing transaction): INVALID_TXN_STATE, or TRANSACTION_ABORTABLE for
    /// Produce v11+.
    #[error("{1}")]
    Transaction(i16, String),
    /// The principal may not use the request's transactional id (the code it gets).
    #[error("not authorized to use the transactional id")]
    TransactionalIdAuthorization(i16),
    /// A storage step that failed for a reason given in words (an append abandoned when its
    /// log closed, a deletion that must be retried).
    #[error("{0}")]
    Storage(String),
    /// A step of the broker's own background work (compaction, topic deletion, transaction
    /// markers) failed: what it was doing, and the failure it met.
    #[error("{doing}: {source}")]
    Background {
        /// The step, in words (`deleting partition 3 of t`).
        doing: String,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl BrokerError {
    /// A [`BrokerError::Background`] failure of `doing`.
    pub(crate) fn background(
        doing: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> BrokerError {
        BrokerError::Background { doing: doing.into(), source: Box::new(source) }
    }

    /// The Kafka error code this failure answers with.
    pub fn code(&self) -> i16 {
        match self {
            BrokerError::Log(e) => log_code(e),
            BrokerError::Meta(_)
            | BrokerError::Contended(_)
            | BrokerError::Storage(_)
            | BrokerError::Background { .. } => KAFKA_STORAGE_ERROR,
            BrokerError::UnknownTopic(_) | BrokerError::UnknownPartition { .. } => {
                UNKNOWN_TOPIC_OR_PARTITION
            }
            BrokerError::UnknownTopicId(_) => UNKNOWN_TOPIC_ID,
            BrokerError::TopicAuthorization { .. } => TOPIC_AUTHORIZATION_FAILED,
            BrokerError::TopicExists(_) => TOPIC_ALREADY_EXISTS,
            BrokerError::InvalidTopic(_) => INVALID_TOPIC_EXCEPTION,
            BrokerError::InvalidConfig(_) => INVALID_CONFIG,
            BrokerError::InvalidPartitions(_) => INVALID_PARTITIONS,
            BrokerError::InvalidReplicationFactor(_) => INVALID_REPLICATION_FACTOR,
            BrokerError::InvalidReplicaAssignment(_) => INVALID_REPLICA_ASSIGNMENT,
            BrokerError::InvalidRequest(_) => INVALID_REQUEST,
            BrokerError::TopicDeletionDisabled => TOPIC_DELETION_DISABLED,
            BrokerError::InvalidRequiredAcks(_) => INVALID_REQUIRED_ACKS,
            BrokerError::UnsupportedVersion { .. } => UNSUPPORTED_VERSION,
            BrokerError::CorruptMessage(_) => CORRUPT_MESSAGE,
            BrokerError::InvalidRecord(_) | BrokerError::InvalidRecords { .. } => INVALID_RECORD,
            BrokerError::InvalidTimestamp { .. } => INVALID_TIMESTAMP,
            BrokerError::MessageTooLarge(_) => MESSAGE_TOO_LARGE,
            BrokerError::UnsupportedCompression(_) => UNSUPPORTED_COMPRESSION_TYPE,
            BrokerError::OutOfOrderSequence(_) => OUT_OF_ORDER_SEQUENCE_NUMBER,
            BrokerError::InvalidProducerEpoch(_) => INVALID_PRODUCER_EPOCH,
            BrokerError::TransactionalIdAuthorization(code) | BrokerError::Transaction(code, _) => {
                *code
            }
        }
    }
}

/// The code's name, for logs and metrics labels.
pub fn name(code: i16) -> &'static str {
    match code {
        NONE => "NONE",
        OFFSET_OUT_OF_RANGE => "OFFSET_OUT_OF_RANGE",
        CORRUPT_MESSAGE => "CORRUPT_MESSAGE",
        UNKNOWN_TOPIC_OR_PARTITION => "UNKNOWN_TOPIC_OR_PARTITION",
        LEADER_NOT_AVAILABLE => "LEADER_NOT_AVAILABLE",
        INVALID_TIMESTAMP => "INVALID_TIMESTAMP",
        POLICY_VIOLATION => "POLICY_VIOLATION",
        COORDINATOR_LOAD_IN_PROGRESS => "COORDINATOR_LOAD_IN_PROGRESS",
        NOT_LEADER_OR_FOLLOWER => "NOT_LEADER_OR_FOLLOWER",
        REQUEST_TIMED_OUT => "REQUEST_TIMED_OUT",
        MESSAGE_TOO_LARGE => "MESSAGE_TOO_LARGE",
        INVALID_TOPIC_EXCEPTION => "INVALID_TOPIC_EXCEPTION",
        INVALID_REQUIRED_ACKS => "INVALID_REQUIRED_ACKS",
        UNSUPPORTED_VERSION => "UNSUPPORTED_VERSION",
        TOPIC_ALREADY_EXISTS => "TOPIC_ALREADY_EXISTS",
        INVALID_PARTITIONS => "INVALID_PARTITIONS",
        INVALID_REPLICATION_FACTOR => "INVALID_REPLICATION_FACTOR",
        INVALID_REPLICA_ASSIGNMENT => "INVALID_REPLICA_ASSIGNMENT",
        INVALID_CONFIG => "INVALID_CONFIG",
        INVALID_REQUEST => "INVALID_REQUEST",
        KAFKA_STORAGE_ERROR => "KAFKA_STORAGE_ERROR",
        UNSUPPORTED_COMPRESSION_TYPE => "UNSUPPORTED_COMPRESSION_TYPE",
        INVALID_RECORD => "INVALID_RECORD",
        UNKNOWN_TOPIC_ID => "UNKNOWN_TOPIC_ID",
        TOPIC_DELETION_DISABLED => "TOPIC_DELETION_DISABLED",
        OFFSET_METADATA_TOO_LARGE => "OFFSET_METADATA_TOO_LARGE",
        COORDINATOR_NOT_AVAILABLE => "COORDINATOR_NOT_AVAILABLE",
        NOT_COORDINATOR => "NOT_COORDINATOR",
        ILLEGAL_GENERATION => "ILLEGAL_GENERATION",
        INCONSISTENT_GROUP_PROTOCOL => "INCONSISTENT_GROUP_PROTOCOL",
        INVALID_GROUP_ID => "INVALID_GROUP_ID",
        UNKNOWN_MEMBER_ID => "UNKNOWN_MEMBER_ID",
        INVALID_SESSION_TIMEOUT => "INVALID_SESSION_TIMEOUT",
        REBALANCE_IN_PROGRESS => "REBALANCE_IN_PROGRESS",
        OUT_OF_ORDER_SEQUENCE_NUMBER => "OUT_OF_ORDER_SEQUENCE_NUMBER",
        DUPLICATE_SEQUENCE_NUMBER => "DUPLICATE_SEQUENCE_NUMBER",
        INVALID_PRODUCER_EPOCH => "INVALID_PRODUCER_EPOCH",
        INVALID_TXN_STATE => "INVALID_TXN_STATE",
        INVALID_PRODUCER_ID_MAPPING => "INVALID_PRODUCER_ID_MAPPING",
        INVALID_TRANSACTION_TIMEOUT => "INVALID_TRANSACTION_TIMEOUT",
        CONCURRENT_TRANSACTIONS => "CONCURRENT_TRANSACTIONS",
        PRODUCER_FENCED => "PRODUCER_FENCED",
        UNSTABLE_OFFSET_COMMIT => "UNSTABLE_OFFSET_COMMIT",
        TRANSACTION_ABORTABLE => "TRANSACTION_ABORTABLE",
        TRANSACTIONAL_ID_NOT_FOUND => "TRANSACTIONAL_ID_NOT_FOUND",
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED => "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        UNKNOWN_PRODUCER_ID => "UNKNOWN_PRODUCER_ID",
        NON_EMPTY_GROUP => "NON_EMPTY_GROUP",
        GROUP_ID_NOT_FOUND => "GROUP_ID_NOT_FOUND",
        GROUP_MAX_SIZE_REACHED => "GROUP_MAX_SIZE_REACHED",
        FENCED_INSTANCE_ID => "FENCED_INSTANCE_ID",
        FENCED_MEMBER_EPOCH => "FENCED_MEMBER_EPOCH",
        INVALID_RECORD_STATE => "INVALID_RECORD_STATE",
        SHARE_SESSION_NOT_FOUND => "SHARE_SESSION_NOT_FOUND",
        INVALID_SHARE_SESSION_EPOCH => "INVALID_SHARE_SESSION_EPOCH",
        SHARE_SESSION_LIMIT_REACHED => "SHARE_SESSION_LIMIT_REACHED",
        UNRELEASED_INSTANCE_ID => "UNRELEASED_INSTANCE_ID",
        UNSUPPORTED_ASSIGNOR => "UNSUPPORTED_ASSIGNOR",
        STALE_MEMBER_EPOCH => "STALE_MEMBER_EPOCH",
        INVALID_REGULAR_EXPRESSION => "INVALID_REGULAR_EXPRESSION",
        GROUP_SUBSCRIBED_TO_TOPIC => "GROUP_SUBSCRIBED_TO_TOPIC",
        ELECTION_NOT_NEEDED => "ELECTION_NOT_NEEDED",
        NO_REASSIGNMENT_IN_PROGRESS => "NO_REASSIGNMENT_IN_PROGRESS",
        TOPIC_AUTHORIZATION_FAILED => "TOPIC_AUTHORIZATION_FAILED",
        GROUP_AUTHORIZATION_FAILED => "GROUP_AUTHORIZATION_FAILED",
        CLUSTER_AUTHORIZATION_FAILED => "CLUSTER_AUTHORIZATION_FAILED",
        SASL_AUTHENTICATION_FAILED => "SASL_AUTHENTICATION_FAILED",
        _ => "OTHER",
    }
}

/// What a managed-log failure means to a Kafka client.
fn log_code(e: &folio_log::LogError) -> i16 {
    use folio_log::LogError as E;
    match e {
        E::NoSuchLog(_) | E::Deleted(_) => UNKNOWN_TOPIC_OR_PARTITION,
        // Another broker owns the partition now, or this one is closing it: refresh metadata.
        E::Fenced(_) | E::Closed(_) => NOT_LEADER_OR_FOLLOWER,
        // The topic changed or went while its partition's log was being created.
        E::Exists(_) | E::CreateRefused { .. } => NOT_LEADER_OR_FOLLOWER,
        E::OffsetOutOfRange { .. } => OFFSET_OUT_OF_RANGE,
        E::Invalid(_) | E::NoSuchCursor { .. } => INVALID_RECORD,
        E::Ledger(_) | E::LedgersUnavailable { .. } | E::Meta(_) | E::CorruptEntry { .. } => {
            KAFKA_STORAGE_ERROR
        }
    }
}
