//! What the system suites share: the pod runner ([`pods`]), certificates ([`certs`]), the
//! browser ([`browser`]), a real API server where one is present ([`apiserver`]), and where the
//! inputs come from (the operator's fixtures, `examples/`,
//! the binaries built beside the test).
//!
//! Every suite starts what the operator's pure build renders for a `StreamLimiter` as real local
//! processes (see [`pods`]), then drives the system from the outside.

pub mod api;
pub mod apiserver;
pub mod browser;
pub mod certs;
pub mod install;
pub mod pods;
pub mod redis_pods;

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use kube::{Resource, ResourceExt};
use screenlimit_limiter::module_file::IMAGE_MODULE_PATH;
use screenlimit_operator::build::secret;
use screenlimit_operator::crd::StreamLimiter;
use screenlimit_operator::names::Names;

/// The checkout's root (this crate is `tests/` in it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_owned()
}

fn parse(path: &Path) -> StreamLimiter {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fixture of the operator's (`operator/tests/fixtures`), parsed as the API server would
/// hand it over (defaults applied by serde, like the schema defaults).
pub fn fixture(name: &str) -> StreamLimiter {
    parse(&workspace_root().join("operator/tests/fixtures").join(name))
}

/// A shipped example (`examples/`), as the API server returns it once applied: with the uid the
/// operator's owner references need.
pub fn example(name: &str) -> StreamLimiter {
    let mut sl = parse(&workspace_root().join("examples").join(name));
    sl.metadata
        .uid
        .get_or_insert_with(|| "7c0e5a52-0000-4000-8000-0000000000e1".to_owned());
    sl
}

/// A binary of the workspace built beside this test (`cargo nextest run --workspace`, as
/// scripts/test.sh runs it, builds every package's binaries).
pub fn binary(name: &str) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let binary = dir.join(name);
    assert!(
        binary.is_file(),
        "no {}: build it first (cargo build --workspace), as --workspace does",
        binary.display()
    );
    binary.display().to_string()
}

/// Registers the limiter image as the pods of `sl` name it (`spec.limiter.image`): the limiter binary as
/// its entrypoint, and the screenlimit Redis module at the path the image carries it
/// (`scripts/build-images.sh`), for the shards' `copy-redis-module` init container.
pub fn add_limiter_image(cluster: &mut pods::Cluster, sl: &StreamLimiter) {
    let module = match std::env::var_os("SCREENLIMIT_MODULE_SO") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(binary("libscreenlimit_redis_module.so")),
    };
    let image = pods::Image {
        entrypoint: vec![binary("screenlimit-limiter")],
        files: vec![(module, IMAGE_MODULE_PATH.to_owned())],
    };
    cluster.add_image(&sl.spec.limiter.image, image);
}

/// The Secrets the operator creates for `sl` when they are absent (the managed Redis
/// credentials, the stream id key), as the API server would hold them.
pub fn operator_secrets(sl: &StreamLimiter) -> Vec<Secret> {
    let owner = sl.controller_owner_ref(&()).expect("a uid");
    let names = Names::new(&sl.name_any());
    let ns = sl.namespace().expect("a namespace");
    vec![
        secret::redis_auth_secret(&names, &ns, &owner),
        secret::stream_id_secret(&names, &ns, &owner),
    ]
}

/// The rendered object named `name` (a StatefulSet, a Deployment, …).
pub fn named<'a, T: Resource>(objects: &'a [T], name: &str) -> &'a T {
    objects
        .iter()
        .find(|o| o.meta().name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("nothing named {name} was rendered"))
}

/// Fails the test at once, saying why, unless it runs as root (namespaces, mounts, `setpriv`).
pub fn require_root() {
    assert!(
        std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n")),
        "this test runs pods in namespaces it creates: run it as root (CI does)"
    );
}
