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
        /// What kind of problem, for callers that act on it (the app offers `--fill` for a
        /// missing cell) without reading the message.
        problem: ParseProblem,
        reason: String,
    },
    #[error("invalid {what}: {reason}")]
    Invalid { what: String, reason: String },
    #[error(transparent)]
    Zerohop(#[from] zerohop::Error),
}

/// The kind of a parse error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseProblem {
    /// A cell with no number: empty, or NaN/infinite where the options refuse those.
    MissingCell,
    /// Anything else that does not parse: a wrong field count, text, a bad header field.
    Malformed,
}

pub(crate) fn invalid(what: &str, reason: impl Into<String>) -> EcgError {
    EcgError::Invalid {
        what: what.into(),
        reason: reason.into(),
    }
}
