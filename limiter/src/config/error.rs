//! What a config is refused for: the file unreadable or unparsable, or a field named with why.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}, field `{field}`: {message}")]
    Parse {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("config field `{field}`: cannot read {path}: {source}")]
    ReadFile {
        field: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config field `{field}`: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

/// A file the config names in `field`, as text.
pub(crate) fn read_named_file(field: &'static str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        field,
        path: path.to_owned(),
        source,
    })
}

pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
}
