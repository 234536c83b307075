//! Loading: the file (or the defaults without one), then the environment, then the checks; and
//! at start, the files the config names.

use std::path::Path;
use std::str::FromStr;

use super::error::{ConfigError, invalid};
use super::file::Config;
use super::plans::PlanSourceKind;
use super::store::{Backend, read_secrets};

impl Config {
    /// Reads the file (or the defaults without one), applies the environment, and validates.
    pub fn load(
        path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut config = match path {
            Some(path) => Self::from_file(path)?,
            None => Config::default(),
        };
        config.file = path.map(Path::to_owned);
        config.apply_env(env)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads every file the config names (plan database URL, stream id secret, API token) and
    /// checks what is in it, so that a missing file or a bad value stops the start with the
    /// field named, like any other config error. The binary calls it after `load`, which stays
    /// free of these reads: it also checks configs rendered for other machines (the operator's
    /// tests).
    pub fn check_named_files(&self) -> Result<(), ConfigError> {
        self.resolve_stream_id_secret()?;
        self.resolve_credentials()?;
        if let Some(players) = &self.auth.players {
            crate::player_tokens::PlayerTokens::from_config(players)?;
        }
        if self.store.backend == Backend::Redis {
            read_secrets(&self.store)?;
        }
        if self.plan_source.kind == PlanSourceKind::Postgres
            && let Some(url) = self.resolve_plan_db_url()?
        {
            let field = match self.plan_source.postgres_url_file {
                Some(_) => "plan_source.postgres_url_file",
                None => "plan_source.postgres_url",
            };
            // The parser's message never repeats the connection string (it may hold a password).
            tokio_postgres::Config::from_str(&url).map_err(|e| {
                invalid(
                    field,
                    format!("not a PostgreSQL connection string (postgres://user:password@host:5432/db or key=value pairs): {e}"),
                )
            })?;
        }
        Ok(())
    }

    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_yaml(&text).map_err(|(field, message)| ConfigError::Parse {
            path: path.to_owned(),
            field,
            message,
        })
    }

    /// Parses YAML text; on error returns the path of the offending field and the reason.
    pub fn from_yaml(text: &str) -> Result<Config, (String, String)> {
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        let deserializer = serde_yaml_ng::Deserializer::from_str(text);
        serde_path_to_error::deserialize(deserializer).map_err(|err| {
            // A key that could not be read (an unknown device type) shows as `?`: the message
            // names it.
            let field = err.path().to_string().trim_end_matches(".?").to_owned();
            (field, err.into_inner().to_string())
        })
    }
}
