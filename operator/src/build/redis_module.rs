//! screenlimit's Redis module in the managed shards (`spec.redis.module`, on by default): an init
//! container of the limiter image copies the module it carries into an emptyDir
//! (`screenlimit-limiter copy-module`; the image has no shell), the Redis container mounts it
//! read-only and its start script adds `loadmodule` (env `REDIS_MODULE`). The limiter then uses
//! the native commands on every shard that answers `SL.VERSION` and the Lua scripts elsewhere.

use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, EnvVar, Volume, VolumeMount};
use screenlimit_limiter::module_file::MODULE_FILE_NAME;
use screenlimit_limiter::store::redis::access::LIMITER_MODULE_FIRST_ACL_RULES;

use super::pod::{container_security, env};
use super::sentinel::{REDIS_UID, volume_mount};
use crate::crd::{RedisMode, StreamLimiter};

/// Where the module lies in a Redis pod.
pub const MODULE_DIR: &str = "/opt/screenlimit";
const VOLUME: &str = "redis-module";

/// Whether the operator loads the module into the shards it runs.
pub fn enabled(sl: &StreamLimiter) -> bool {
    sl.spec.redis.mode == RedisMode::Managed && sl.spec.redis.module
}

/// What a Redis pod gets when the module is on: its init container, the volume, the Redis
/// container's mount and the variables its start script reads (the file, and the ACL rules that
/// grant the limiter its commands, added only when the file is there: the rules file the init
/// container wrote beside the module, from the same image, else these).
pub struct ModuleParts {
    pub init_container: Container,
    pub volume: Volume,
    pub mount: VolumeMount,
    pub env: Vec<EnvVar>,
}

pub fn parts(sl: &StreamLimiter) -> Option<ModuleParts> {
    enabled(sl).then(|| ModuleParts {
        init_container: Container {
            name: "copy-redis-module".to_owned(),
            image: Some(sl.spec.limiter.image.clone()),
            // The image's entrypoint is the limiter; its subcommand copies the file.
            args: Some(vec!["copy-module".to_owned(), MODULE_DIR.to_owned()]),
            security_context: Some(container_security(REDIS_UID)),
            volume_mounts: Some(vec![volume_mount(VOLUME, MODULE_DIR, false)]),
            ..Container::default()
        },
        volume: Volume {
            name: VOLUME.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        mount: volume_mount(VOLUME, MODULE_DIR, true),
        env: vec![
            env("REDIS_MODULE", format!("{MODULE_DIR}/{MODULE_FILE_NAME}")),
            // Only for an image whose `copy-module` writes no rules file beside the module.
            env("LIMITER_MODULE_ACL", LIMITER_MODULE_FIRST_ACL_RULES),
        ],
    })
}
