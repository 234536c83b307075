//! Leader election on a `coordination.k8s.io` Lease, so two operator replicas are safe: only
//! the holder reconciles; losing the Lease ends the process (Kubernetes restarts it as a
//! standby).

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;

/// Name of the Lease the operator replicas contend for.
pub const LEASE_NAME: &str = "screenlimit-operator-leader";

/// Seconds a leader holds the Lease without renewing it.
const LEASE_SECONDS: u64 = 15;
/// Seconds before expiry at which the holder renews.
const GRACE_SECONDS: u64 = 5;

/// Starts contending; the returned channel turns `true` while this replica leads.
pub async fn elect(
    client: Client,
    namespace: &str,
    identity: &str,
) -> Result<watch::Receiver<bool>, LeaseManagerError> {
    let manager = LeaseManagerBuilder::new(client, LEASE_NAME)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(LEASE_SECONDS)
        .with_grace(GRACE_SECONDS)
        .with_field_manager(format!("{}-lease", crate::names::FIELD_MANAGER))
        .build()
        .await?;
    let (receiver, _task) = manager.watch().await;
    Ok(receiver)
}
