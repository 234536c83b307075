//! A small kubelet for tests: runs a rendered pod's container the way a cluster would.
//!
//! Each pod gets its own network namespace on a private bridge (its own IP, nothing on the
//! host's network), a hosts file that gives every pod of the test its stable DNS name
//! (`<pod>.<service>.<namespace>.svc`), and, at each container start, a fresh mount namespace:
//! a read-only root (the host's, with ConfigMap and Secret volumes laid over it at their mount
//! paths and with their `defaultMode`, Secret files owned by the pod's `fsGroup`), emptyDir volumes bound read-write (they outlive container restarts,
//! as on a node), and the container's user with every capability dropped. A restart runs the
//! container's command again over the same emptyDirs, as the kubelet does. A Service with one
//! pod behind it is a name in the hosts file ([`Cluster::add_service`]); the test reaches a pod
//! from outside through [`Cluster::port_forward`], as `kubectl port-forward` does.
//!
//! **Init containers** run to completion, one after another, before a pod's first start (not
//! at a restart, as on a node), each in its own sandbox with its emptyDir mounts; their image is
//! what the test registered with [`Cluster::add_image`]: its entrypoint and the files it carries
//! (bound read-only at their paths). An init container that fails fails the test, as a pod
//! stuck in `Init:Error` would.
//!
//! What a rollout needs of a node and of kube-proxy, kept as small as the real ones allow:
//! - **ConfigMap volumes are updated in place** ([`Cluster::set_config_maps`]) the way the
//!   kubelet's atomic writer does it: each version in its own hidden timestamped directory, the
//!   `..data` symlink swapped to it by a rename, the visible files symlinks through `..data`; the
//!   volume is bind-mounted read-only, so a running container sees the new files at once.
//! - **A Service over several pods** ([`Cluster::service_proxy`], [`ServiceProxy`]): the
//!   kubelet's readiness probe (the container's HTTP probe, from the node, with its period and
//!   thresholds), the endpoints a pod enters and leaves [`ENDPOINTS_LAG`] after it turns ready,
//!   unready or is deleted (the endpoints controller, the watch, kube-proxy's sync), and each
//!   new connection sent to the next endpoint in rotation (kube-proxy's userspace mode), reached
//!   from the test's network like a LoadBalancer Service.
//! - **A pod's stop** ([`Pod::terminate`]): its preStop hook, SIGTERM, SIGKILL at the end of
//!   `terminationGracePeriodSeconds`; **a Deployment's roll** ([`Cluster::roll`]), as the
//!   controller does it with `maxUnavailable: 0`: a new pod started and Ready, then an old one
//!   deleted (out of the endpoints, stopped in the background), one at a time. Whether a roll
//!   happens at all is the Deployment controller's rule: the pod template changed
//!   ([`template_changed`]).
//!
//! Needs root (namespaces, mounts, `setpriv`), as the CI machine has.

mod cluster;
mod config_volume;
mod dns;
mod forward;
mod image;
mod init;
mod layout;
mod netns;
mod pod;
mod probe;
mod rollout;
mod sandbox;
mod service;
mod terminate;
mod wait;

pub use cluster::Cluster;
pub use forward::PortForward;
pub use image::Image;
pub use pod::Pod;
pub use rollout::template_changed;
pub use service::{ENDPOINTS_LAG, ServiceProxy};
pub use terminate::Terminated;
pub use wait::wait_for;
