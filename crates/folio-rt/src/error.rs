//! The runtime's one error: blocking work that ended without a result.

/// Work that had to run on a blocking thread ended without a result: it panicked, or the
/// runtime shut down under it.
#[derive(Debug, Clone)]
pub struct BlockingFailed(pub String);

impl std::fmt::Display for BlockingFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "blocking work failed: {}", self.0)
    }
}

impl std::error::Error for BlockingFailed {}
