//! Errors every layer shares: a setting that is wrong ([`InvalidConfig`]), a record that
//! breaks its invariants ([`InvalidRecord`]) and a cluster secret that cannot be had
//! ([`SecretError`]).
//!
//! Convention for every error type in Folio: a variant that has an underlying cause keeps it
//! as its `#[source]` (typed, for code that inspects it) and also says it in its message, so
//! the binary, which turns errors into messages at the edge, prints the whole story with
//! `{e}`.

use std::path::PathBuf;

/// A setting or argument that is wrong, and why (naming the setting). What every
/// `validate()` and config parser returns; it has no source, the value is the fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidConfig(pub String);

impl InvalidConfig {
    /// The error for `why`.
    pub fn new(why: impl Into<String>) -> InvalidConfig {
        InvalidConfig(why.into())
    }
}

impl From<String> for InvalidConfig {
    fn from(why: String) -> InvalidConfig {
        InvalidConfig(why)
    }
}

impl From<&str> for InvalidConfig {
    fn from(why: &str) -> InvalidConfig {
        InvalidConfig(why.to_string())
    }
}

impl From<InvalidConfig> for String {
    fn from(e: InvalidConfig) -> String {
        e.0
    }
}

/// A record (ledger metadata, a log record, an epoch history) that breaks one of its
/// invariants, and which. Decoders refuse it as corrupt; encoders assert it never happens.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRecord(pub String);

impl InvalidRecord {
    /// The error for `why`.
    pub fn new(why: impl Into<String>) -> InvalidRecord {
        InvalidRecord(why.into())
    }
}

impl From<InvalidRecord> for String {
    fn from(e: InvalidRecord) -> String {
        e.0
    }
}

/// Why a cluster secret could not be had (`auth::ClusterSecret`).
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Its file could not be read.
    #[error("reading the cluster secret {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// Too few bytes to be a secret.
    #[error(
        "the cluster secret has {len} bytes; it needs at least {min} \
         (e.g. `head -c 32 /dev/urandom | base64 > secret`)"
    )]
    TooShort { len: usize, min: usize },
    /// More bytes than the handshake takes.
    #[error("the cluster secret has {len} bytes; at most {max} are accepted")]
    TooLong { len: usize, max: usize },
    /// The secret in a file is wrong (too short or too long).
    #[error("{}: {source}", path.display())]
    InFile { path: PathBuf, source: Box<SecretError> },
}
