//! Kafka error codes the broker answers with (names as in Kafka's `Errors.java`).

pub const NONE: i16 = 0;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const CORRUPT_MESSAGE: i16 = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub const REQUEST_TIMED_OUT: i16 = 7;
pub const MESSAGE_TOO_LARGE: i16 = 10;
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const NOT_COORDINATOR: i16 = 16;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const INVALID_REQUIRED_ACKS: i16 = 21;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const INVALID_GROUP_ID: i16 = 24;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const UNSUPPORTED_VERSION: i16 = 35;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_PARTITIONS: i16 = 37;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
pub const INVALID_CONFIG: i16 = 40;
pub const INVALID_REQUEST: i16 = 42;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const DUPLICATE_SEQUENCE_NUMBER: i16 = 46;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const KAFKA_STORAGE_ERROR: i16 = 56;
pub const TOPIC_DELETION_DISABLED: i16 = 73;
pub const UNKNOWN_PRODUCER_ID: i16 = 59;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const UNSUPPORTED_COMPRESSION_TYPE: i16 = 76;
pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
pub const INVALID_RECORD: i16 = 87;
pub const UNKNOWN_TOPIC_ID: i16 = 100;

/// A request (or one topic, partition or group of it) that failed: the Kafka error code
/// to answer and a message for the client.
pub type Failure = (i16, String);

/// The code's name, for logs and metrics labels.
pub fn name(code: i16) -> &'static str {
    match code {
        NONE => "NONE",
        OFFSET_OUT_OF_RANGE => "OFFSET_OUT_OF_RANGE",
        CORRUPT_MESSAGE => "CORRUPT_MESSAGE",
        UNKNOWN_TOPIC_OR_PARTITION => "UNKNOWN_TOPIC_OR_PARTITION",
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
        UNKNOWN_PRODUCER_ID => "UNKNOWN_PRODUCER_ID",
        NON_EMPTY_GROUP => "NON_EMPTY_GROUP",
        GROUP_ID_NOT_FOUND => "GROUP_ID_NOT_FOUND",
        GROUP_MAX_SIZE_REACHED => "GROUP_MAX_SIZE_REACHED",
        _ => "OTHER",
    }
}

/// What a managed-log failure means to a Kafka client.
pub fn from_log(e: &folio_log::LogError) -> i16 {
    use folio_log::LogError as E;
    match e {
        E::NoSuchLog(_) | E::Deleted(_) => UNKNOWN_TOPIC_OR_PARTITION,
        // Another broker owns the partition now, or this one is closing it: refresh metadata.
        E::Fenced(_) | E::Closed(_) => NOT_LEADER_OR_FOLLOWER,
        // The topic changed or went while its partition's log was being created.
        E::Exists(_) | E::CreateRefused { .. } => NOT_LEADER_OR_FOLLOWER,
        E::OffsetOutOfRange { .. } => OFFSET_OUT_OF_RANGE,
        E::Invalid(_) | E::NoSuchCursor { .. } => INVALID_RECORD,
        E::Ledger(_) | E::LedgersUnavailable(_) | E::Meta(_) | E::CorruptEntry { .. } => {
            KAFKA_STORAGE_ERROR
        }
    }
}
