//! Why a registry request failed, with the error code and HTTP status Confluent's clients
//! expect.

use folio_meta::MetaError;

/// Why a registry request failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No such subject (or only deleted versions, unless those were asked for).
    #[error("Subject '{0}' not found.")]
    SubjectNotFound(String),
    /// The subject has no such version.
    #[error("Version {version} not found in subject '{subject}'.")]
    VersionNotFound { subject: String, version: String },
    /// No schema with this id, or not under this subject.
    #[error("Schema {0} not found")]
    SchemaNotFound(String),
    /// A version must be soft-deleted before it can be deleted for good.
    #[error(
        "Subject '{subject}' Version {version} was not deleted first before being permanently deleted"
    )]
    NotSoftDeleted { subject: String, version: u32 },
    /// The schema breaks the subject's compatibility rule.
    #[error("Schema being registered is incompatible with an earlier schema for subject '{subject}': {}", why.join("; "))]
    Incompatible { subject: String, why: Vec<String> },
    /// The schema does not parse, or is not a valid schema of its type.
    #[error("Invalid schema: {0}")]
    InvalidSchema(String),
    /// A version is neither a number from 1 nor `latest`.
    #[error(
        "The specified version '{0}' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\""
    )]
    InvalidVersion(String),
    /// An unknown compatibility level.
    #[error(
        "Invalid compatibility level {0}. Valid values are NONE, BACKWARD, FORWARD, FULL, BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE, and FULL_TRANSITIVE"
    )]
    InvalidCompatibility(String),
    /// An unknown mode.
    #[error("Invalid mode {0}. Valid values are READWRITE, READONLY and IMPORT")]
    InvalidMode(String),
    /// The subject (or the registry) is READONLY, or a request names a bad subject.
    #[error("{0}")]
    NotPermitted(String),
    /// The request body is not what the endpoint takes.
    #[error("{0}")]
    BadRequest(String),
    /// A named limit was reached.
    #[error("{0}")]
    Limit(String),
    /// The metadata store failed.
    #[error("metadata store: {0}")]
    Store(#[from] MetaError),
    /// Registrations kept losing races on one subject.
    #[error("subject '{0}' changed under {attempts} registrations in a row; try again", attempts = crate::limits::REGISTER_ATTEMPTS_MAX)]
    Contended(String),
}

impl RegistryError {
    /// The HTTP status and Confluent error code of this error.
    pub fn status_and_code(&self) -> (u16, u32) {
        match self {
            RegistryError::SubjectNotFound(_) => (404, 40401),
            RegistryError::VersionNotFound { .. } => (404, 40402),
            RegistryError::SchemaNotFound(_) => (404, 40403),
            RegistryError::NotSoftDeleted { .. } => (404, 40407),
            RegistryError::Incompatible { .. } => (409, 409),
            RegistryError::InvalidSchema(_) => (422, 42201),
            RegistryError::InvalidVersion(_) => (422, 42202),
            RegistryError::InvalidCompatibility(_) => (422, 42203),
            RegistryError::InvalidMode(_) => (422, 42204),
            RegistryError::NotPermitted(_) => (422, 42205),
            RegistryError::BadRequest(_) => (400, 400),
            RegistryError::Limit(_) => (422, 42210),
            RegistryError::Store(_) => (500, 50001),
            RegistryError::Contended(_) => (500, 50003),
        }
    }
}

/// A registry result.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;
