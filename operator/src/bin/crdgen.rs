//! Prints the `StreamLimiter` CRD as YAML (`cargo run -p screenlimit-operator --bin crdgen > crds/streamlimiter.yaml`).

use kube::CustomResourceExt;
use screenlimit_operator::crd::StreamLimiter;

fn main() -> anyhow::Result<()> {
    let yaml = serde_yaml_ng::to_string(&StreamLimiter::crd())?;
    print!("{yaml}");
    Ok(())
}
