//! Pipeline errors; each names the input (file, line, column, parameter) it concerns.

use std::path::PathBuf;

pub type Result<T, E = EcgError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum EcgError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}, line {line}, column {column} ({name}): {reason}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        name: String,
        reason: String,
    },
    #[error("invalid {what}: {reason}")]
    Invalid { what: String, reason: String },
    #[error(transparent)]
    Zerohop(#[from] zerohop::Error),
}

pub(crate) fn invalid(what: &str, reason: impl Into<String>) -> EcgError {
    EcgError::Invalid {
        what: what.into(),
        reason: reason.into(),
    }
}
