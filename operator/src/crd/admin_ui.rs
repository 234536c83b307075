//! `spec.adminUI`: the admin dashboard Deployment and its OpenID Connect sign-in.

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::shared::{SecretKeyRef, default_one, resources_schema};

/// The admin UI Deployment.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("!self.enabled || has(self.authSecretName)").message("adminUI.authSecretName is required when the admin UI is enabled").field_path(".authSecretName").reason(Reason::FieldValueRequired)
)]
#[serde(rename_all = "camelCase")]
pub struct AdminUiSpec {
    /// Run the admin UI.
    #[serde(default)]
    pub enabled: bool,
    /// Admin UI pods.
    #[serde(default = "default_one")]
    #[schemars(range(min = 1, max = 10))]
    pub replicas: i32,
    /// Admin UI image.
    #[serde(default = "default_admin_ui_image")]
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// Secret holding the admin UI's credentials, mounted at `/etc/screenlimit/admin-auth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub auth_secret_name: Option<String>,
    /// CPU and memory for each admin UI pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "resources_schema")]
    pub resources: Option<ResourceRequirements>,
    /// Addresses or networks (CIDR) of the proxies in front of the admin UI (the ingress
    /// controller's pods) whose `X-Forwarded-For` it believes. Sign-in throttling counts per client
    /// address: without this, every sign-in through the ingress shares the ingress's address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 43)))]
    pub trusted_proxies: Vec<String>,
    /// The admin UI's address as people open it (`https://support.example.com`, no path): an
    /// https URL marks its cookies Secure; with `oidc`, the identity provider sends people back
    /// to `{externalUrl}/oidc/callback` (register that URL at the provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub external_url: Option<String>,
    /// Sign-in through the company's OpenID Connect provider (Okta, Entra ID, Google Workspace,
    /// Keycloak, Dex). Needs `externalUrl`. The auth Secret's `users` key becomes optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<AdminUiOidcSpec>,
    /// A Prometheus that scrapes the limiter (with `monitoring.serviceMonitor`, the one that
    /// selects it), e.g. `http://prometheus-operated.monitoring.svc:9090`: the fleet page then
    /// draws its charts over 1 h, 6 h or 24 h from Prometheus's `query_range` (without it: the
    /// last 10 minutes the dashboard sampled itself), and its shadow-refusal shares per plan and
    /// rule over 1 h and 24 h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("self.startsWith('http://') || self.startsWith('https://')").message("adminUI.prometheusUrl must start with http:// or https://").reason(Reason::FieldValueInvalid))]
    pub prometheus_url: Option<String>,
}

/// The admin UI's OpenID Connect sign-in.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AdminUiOidcSpec {
    /// The provider's issuer URL (https; its `/.well-known/openid-configuration` is read).
    #[schemars(length(min = 1, max = 2048))]
    pub issuer_url: String,
    /// The admin UI's client id at the provider.
    #[schemars(length(min = 1, max = 255))]
    pub client_id: String,
    /// A key of a Secret holding the client secret; none for a public client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<SecretKeyRef>,
    /// The ID token claim listing the user's groups.
    #[serde(default = "default_roles_claim")]
    #[schemars(length(min = 1, max = 255))]
    pub roles_claim: String,
    /// Groups that grant the `support` role (force-stop, temporary limits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 255)))]
    pub support_groups: Vec<String>,
    /// Groups that grant the `viewer` role; someone in no listed group gets no access.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 255)))]
    pub viewer_groups: Vec<String>,
    /// Scopes asked for besides `openid`, `profile` and `groups`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 255)))]
    pub extra_scopes: Vec<String>,
    /// The sign-in button reads "Sign in with {displayName}".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub display_name: Option<String>,
}

fn default_roles_claim() -> String {
    "groups".to_owned()
}

impl Default for AdminUiSpec {
    fn default() -> Self {
        AdminUiSpec {
            enabled: false,
            replicas: 1,
            image: default_admin_ui_image(),
            auth_secret_name: None,
            resources: None,
            trusted_proxies: Vec::new(),
            external_url: None,
            oidc: None,
            prometheus_url: None,
        }
    }
}

fn default_admin_ui_image() -> String {
    concat!("ghcr.io/screenlimit/admin-ui:", env!("CARGO_PKG_VERSION")).into()
}
