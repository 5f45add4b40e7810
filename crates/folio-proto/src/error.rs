//! Errors every layer shares: a setting that is wrong ([`InvalidConfig`]), a record that
//! breaks its invariants ([`InvalidRecord`]) and a cluster secret that cannot be had
//! ([`SecretError`]).
//!
//! Convention for every error type in Folio: a variant that has an underlying cause keeps it
//! as its `#[source]` (typed, for code that inspects it) and also says it in its message, so
//! the binary, which turns errors into messages at the edge, prints the whole story with
//! `{e}`.

use std::path::PathBuf;

/// Defines an error that is a reason and nothing else (no cause under it): a newtype over
/// the message, `Display` as the message, built with `new` or from a `String`/`&str`, and
/// turned back into its message where a `String` is wanted. The one shape of
/// [`InvalidConfig`], [`InvalidRecord`] and the broker's `scram::Refused`.
#[macro_export]
macro_rules! reason_error {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name(pub String);

        impl $name {
            /// The error for `why`.
            pub fn new(why: impl Into<String>) -> $name {
                $name(why.into())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::error::Error for $name {}

        impl From<String> for $name {
            fn from(why: String) -> $name {
                $name(why)
            }
        }

        impl From<&str> for $name {
            fn from(why: &str) -> $name {
                $name(why.to_string())
            }
        }

        impl From<$name> for String {
            fn from(e: $name) -> String {
                e.0
            }
        }
    };
}

reason_error!(
    /// A setting or argument that is wrong, and why (naming the setting). What every
    /// `validate()` and config parser returns; it has no source, the value is the fault.
    InvalidConfig
);

reason_error!(
    /// A record (ledger metadata, a log record, an epoch history) that breaks one of its
    /// invariants, and which. Decoders refuse it as corrupt; encoders assert it never happens.
    InvalidRecord
);

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
