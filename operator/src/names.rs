//! Deterministic names and the `app.kubernetes.io` labels of every object a `StreamLimiter` owns.

use std::collections::BTreeMap;

/// Field manager for every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "screenlimit-operator";
/// `app.kubernetes.io/managed-by` value on owned objects.
pub const MANAGED_BY: &str = "screenlimit-operator";
/// `app.kubernetes.io/name` value on owned objects.
pub const APP_NAME: &str = "screenlimit";
/// Pod template annotation carrying the hash of the rendered limiter config.
pub const CONFIG_HASH_ANNOTATION: &str = "screenlimit.io/config-hash";
/// Label with a Redis shard's index.
pub const SHARD_LABEL: &str = "screenlimit.io/shard";
/// Key of the stream id secret inside its Secret.
pub const STREAM_ID_SECRET_KEY: &str = "stream-id-secret";
/// Key of the limiter config inside its ConfigMap.
pub const LIMITER_CONFIG_KEY: &str = "limiter.yaml";
/// Limiter HTTP port.
pub const LIMITER_PORT: i32 = 8080;
/// Admin UI HTTP port.
pub const ADMIN_UI_PORT: i32 = 8081;
/// Redis port.
pub const REDIS_PORT: i32 = 6379;
/// Redis Sentinel port.
pub const SENTINEL_PORT: i32 = 26379;
/// Keys of the Redis credentials Secret (`<name>-redis-auth`): the `default` user's password
/// (administration, replication, Sentinel toward the data nodes), the limiter's ACL user's, and
/// the Sentinels' own (`requirepass` on each Sentinel).
pub const REDIS_PASSWORD_KEY: &str = "redis-password";
pub const LIMITER_PASSWORD_KEY: &str = "limiter-password";
pub const SENTINEL_PASSWORD_KEY: &str = "sentinel-password";
/// The limiter's ACL user on managed Redis.
pub const LIMITER_REDIS_USER: &str = "screenlimit";
/// Pod template annotation carrying the hash of the Redis/Sentinel scripts and Sentinel config.
pub const SCRIPTS_HASH_ANNOTATION: &str = "screenlimit.io/scripts-hash";

/// What an owned object is part of (`app.kubernetes.io/component`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    Redis,
    Sentinel,
    Limiter,
    AdminUi,
    StreamIdSecret,
    RedisAuth,
}

impl Component {
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Redis => "redis",
            Component::Sentinel => "sentinel",
            Component::Limiter => "limiter",
            Component::AdminUi => "admin-ui",
            Component::StreamIdSecret => "stream-id-secret",
            Component::RedisAuth => "redis-auth",
        }
    }
}

/// Names of the objects owned by the `StreamLimiter` called `instance`.
#[derive(Clone, Debug)]
pub struct Names {
    instance: String,
}

impl Names {
    pub fn new(instance: &str) -> Self {
        Names {
            instance: instance.to_owned(),
        }
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// StatefulSet and Service of Redis shard `index`.
    pub fn redis_shard(&self, index: i32) -> String {
        format!("{}-redis-{index}", self.instance)
    }

    /// Pod `ordinal` of Redis shard `index`, by its stable DNS name (the shard Service is
    /// headless).
    pub fn redis_pod_host(&self, namespace: &str, index: i32, ordinal: i32) -> String {
        let shard = self.redis_shard(index);
        format!("{shard}-{ordinal}.{shard}.{namespace}.svc")
    }

    /// The name Sentinel monitors shard `index`'s primary under.
    pub fn shard_master(&self, index: i32) -> String {
        format!("{}-shard-{index}", self.instance)
    }

    /// StatefulSet, headless Service, ConfigMap and PodDisruptionBudget of the Sentinels.
    pub fn sentinel(&self) -> String {
        format!("{}-sentinel", self.instance)
    }

    /// ConfigMap with the Redis and Sentinel start scripts and the Sentinel config template.
    pub fn redis_ha(&self) -> String {
        format!("{}-redis-ha", self.instance)
    }

    /// Sentinel pod `ordinal` by its stable DNS name.
    pub fn sentinel_host(&self, namespace: &str, ordinal: i32) -> String {
        let sentinel = self.sentinel();
        format!("{sentinel}-{ordinal}.{sentinel}.{namespace}.svc")
    }

    /// ConfigMap, Deployment, Service and PodDisruptionBudget of the limiter.
    pub fn limiter(&self) -> String {
        format!("{}-limiter", self.instance)
    }

    /// Deployment and Service of the admin UI.
    pub fn admin_ui(&self) -> String {
        format!("{}-admin-ui", self.instance)
    }

    /// The Secret the operator creates for the stream id key.
    pub fn stream_id_secret(&self) -> String {
        format!("{}-stream-id", self.instance)
    }

    /// The Secret the operator creates with the managed Redis passwords.
    pub fn redis_auth_secret(&self) -> String {
        format!("{}-redis-auth", self.instance)
    }

    /// The NetworkPolicy guarding the pods of `component`: `<name>-<component>`.
    pub fn network_policy(&self, component: Component) -> String {
        format!("{}-{}", self.instance, component.as_str())
    }

    /// Labels selecting everything this instance owns.
    pub fn instance_selector(&self) -> String {
        format!(
            "app.kubernetes.io/name={APP_NAME},app.kubernetes.io/instance={},app.kubernetes.io/managed-by={MANAGED_BY}",
            self.instance
        )
    }

    /// Labels that select the pods of one component (stable: used in immutable selectors).
    pub fn selector_labels(&self, component: Component) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".to_owned(), APP_NAME.to_owned()),
            (
                "app.kubernetes.io/instance".to_owned(),
                self.instance.clone(),
            ),
            (
                "app.kubernetes.io/component".to_owned(),
                component.as_str().to_owned(),
            ),
        ])
    }

    /// Every label an owned object carries.
    pub fn labels(&self, component: Component) -> BTreeMap<String, String> {
        let mut labels = self.selector_labels(component);
        labels.insert(
            "app.kubernetes.io/managed-by".to_owned(),
            MANAGED_BY.to_owned(),
        );
        labels.insert("app.kubernetes.io/part-of".to_owned(), APP_NAME.to_owned());
        labels
    }

    /// Labels of Redis shard `index`.
    pub fn shard_labels(&self, index: i32) -> BTreeMap<String, String> {
        let mut labels = self.labels(Component::Redis);
        labels.insert(SHARD_LABEL.to_owned(), index.to_string());
        labels
    }

    /// Selector of Redis shard `index`'s pods.
    pub fn shard_selector_labels(&self, index: i32) -> BTreeMap<String, String> {
        let mut labels = self.selector_labels(Component::Redis);
        labels.insert(SHARD_LABEL.to_owned(), index.to_string());
        labels
    }
}
