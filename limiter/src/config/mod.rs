//! The limiter's configuration: one YAML file (the shape the operator renders), then environment
//! overrides, then flags. Every check names the field it rejects.

pub mod api_access;
mod cert_version;
mod enforcement;
mod env;
pub mod error;
mod file;
mod history;
pub mod http;
mod load;
pub mod plans;
pub mod regions;
pub mod store;
pub mod store_access;
#[cfg(test)]
mod tests;

pub use api_access::{ApiAuthConfig, CorsConfig, Credentials, PlayerTokenConfig};
pub use enforcement::{EnforcementConfig, EnforcementMode};
pub use env::ENV_OVERRIDES;
pub use error::ConfigError;
pub use file::{Config, MAX_THREADS};
pub use history::*;
pub use http::*;
pub use plans::*;
pub use regions::{HomeSource, PeerConfig, RegionTokens, RegionsConfig};
pub use store::*;
pub use store_access::{AuthConfig, RedisCredentials, StoreSecrets, TlsConfig};
