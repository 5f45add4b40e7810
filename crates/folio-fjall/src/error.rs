//! Why fjall's files failed the check ([`crate::check_versions`]).

use std::path::PathBuf;

/// Why fjall's files failed the check.
#[derive(Debug)]
pub enum FjallFilesError {
    /// A file could not be listed, found or read.
    Io { path: PathBuf, source: std::io::Error },
    /// A file is damaged: what is wrong with it.
    Damaged { path: PathBuf, detail: String },
}

impl std::fmt::Display for FjallFilesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FjallFilesError::Io { path, source } => {
                write!(f, "reading {}: {source}", path.display())
            }
            FjallFilesError::Damaged { path, detail } => {
                write!(f, "{} is damaged: {detail}", path.display())
            }
        }
    }
}

impl std::error::Error for FjallFilesError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FjallFilesError::Io { source, .. } => Some(source),
            FjallFilesError::Damaged { .. } => None,
        }
    }
}
