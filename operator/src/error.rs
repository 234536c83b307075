//! The reconciler's errors, each with a short label for metrics.

use crate::build::BuildError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("cannot build the desired objects: {0}")]
    Build(#[from] BuildError),
    #[error("cannot serialize the status: {0}")]
    Serialize(#[from] serde_json::Error),
}

impl Error {
    /// Short static label for the `error` metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(status)) if status.code == 403 => "forbidden",
            Error::Kube(kube::Error::Api(status)) if status.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(status)) if status.code == 422 => "invalid",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "transport",
            Error::Build(_) => "build",
            Error::Serialize(_) => "serialize",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
