//! OpenID Connect sign-in (authorization code flow with PKCE, `state` and `nonce`), on the
//! `openidconnect` crate: discovery, the provider's JWKS (fetched again when a token names a
//! key it does not hold: key rotation), and the ID token's checks (signature, `iss`, `aud`,
//! `exp`, `nonce`). Roles come from one claim (a list of groups) mapped to `support` and
//! `viewer`.
//!
//! The flow's own state (the PKCE verifier, `state`, `nonce`, where to go after) travels in a
//! short-lived signed cookie, so any replica sharing the secret can finish a sign-in another
//! started; a `state` is taken once per replica, and the provider takes a code once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openidconnect::core::{CoreAuthenticationFlow, CoreClient};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken,
    EndpointMaybeSet, EndpointNotSet, EndpointSet, IssuerUrl, LogoutRequest, Nonce,
    PkceCodeChallenge, PkceCodeVerifier, PostLogoutRedirectUrl, ProviderMetadataWithLogout,
    RedirectUrl, Scope, SignatureVerificationError, TokenResponse,
};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use tokio::sync::RwLock;

use super::keys::{Signer, b64, unb64};
use super::session::now_unix;
use super::{Role, User};

/// The cookie that carries a sign-in in progress (SameSite=Lax: the provider's redirect back is
/// a cross-site navigation, which a Strict cookie would not follow).
pub const FLOW_COOKIE: &str = "sl_oidc";
/// How long a sign-in at the provider may take.
pub const FLOW_TTL: Duration = Duration::from_secs(600);
/// The dashboard's callback path (the redirect URL is the external URL and this).
pub const CALLBACK_PATH: &str = "/oidc/callback";
/// How long discovery and the JWKS are trusted before they are fetched again.
const METADATA_TTL: Duration = Duration::from_secs(600);
/// A token naming an unknown key fetches the JWKS again at most this often.
const JWKS_REFETCH_EVERY: Duration = Duration::from_secs(5);

/// The OpenID Connect settings (flags `--oidc-*`).
#[derive(Debug, Clone)]
pub struct OidcSettings {
    /// The issuer URL (its `/.well-known/openid-configuration` is read).
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    /// Where the provider sends the browser back: `{external URL}/oidc/callback`.
    pub redirect_url: String,
    /// Where the provider's sign-out sends the browser back (registered at the provider).
    pub post_logout_redirect_url: Option<String>,
    /// Scopes asked for besides `openid` (`profile`, `groups`, ...).
    pub scopes: Vec<String>,
    /// The claim listing the user's groups.
    pub roles_claim: String,
    /// Holding any of these groups grants `support`.
    pub support_groups: Vec<String>,
    /// Holding any of these groups grants `viewer` (when no support group is held).
    pub viewer_groups: Vec<String>,
    /// The claims tried, in order, for the name shown and audited.
    pub name_claims: Vec<String>,
    /// The sign-in button says "Sign in with {display_name}".
    pub display_name: String,
    /// Deadline of each call to the provider.
    pub timeout: Duration,
}

impl OidcSettings {
    /// Settings with the usual defaults: scopes `profile` and `groups`, groups in `groups`.
    pub fn new(issuer: &str, client_id: &str, client_secret: Option<&str>, external: &str) -> Self {
        let external = external.trim_end_matches('/');
        OidcSettings {
            issuer: issuer.to_owned(),
            client_id: client_id.to_owned(),
            client_secret: client_secret.map(str::to_owned),
            redirect_url: format!("{external}{CALLBACK_PATH}"),
            post_logout_redirect_url: Some(format!("{external}/sign-in?signed_out=1")),
            scopes: vec!["profile".into(), "groups".into()],
            roles_claim: "groups".into(),
            support_groups: vec!["screenlimit-support".into()],
            viewer_groups: vec!["screenlimit-viewer".into()],
            name_claims: vec!["preferred_username".into(), "name".into(), "email".into()],
            display_name: "your company account".into(),
            timeout: Duration::from_secs(5),
        }
    }

    /// Checks what can be checked before the provider is reached.
    pub fn validate(&self) -> Result<(), String> {
        let url = |what: &str, text: &str| -> Result<(), String> {
            let parsed = reqwest::Url::parse(text).map_err(|e| format!("{what} `{text}`: {e}"))?;
            if !matches!(parsed.scheme(), "https" | "http") {
                return Err(format!("{what} `{text}` must be an https URL"));
            }
            Ok(())
        };
        url("the issuer URL", &self.issuer)?;
        url("the redirect URL", &self.redirect_url)?;
        if self.client_id.trim().is_empty() {
            return Err("the client id is empty".into());
        }
        if self.roles_claim.trim().is_empty() {
            return Err("the roles claim is empty".into());
        }
        if self.support_groups.is_empty() && self.viewer_groups.is_empty() {
            return Err("name at least one support or viewer group".into());
        }
        Ok(())
    }

    /// The role that `groups` grant, if any.
    pub fn role_of(&self, groups: &[String]) -> Option<Role> {
        let holds = |wanted: &[String]| groups.iter().any(|g| wanted.contains(g));
        if holds(&self.support_groups) {
            Some(Role::Support)
        } else if holds(&self.viewer_groups) {
            Some(Role::Viewer)
        } else {
            None
        }
    }
}

/// Why an OpenID Connect sign-in did not happen, in words for the page.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error(
        "the identity provider at {issuer} does not answer ({detail}); try again in a minute, or \
         sign in with a dashboard password if you have one"
    )]
    ProviderDown { issuer: String, detail: String },
    #[error(
        "the identity provider at {issuer} answered something the dashboard cannot use \
         ({detail}); ask an administrator to check the dashboard's OpenID Connect settings"
    )]
    ProviderMisconfigured { issuer: String, detail: String },
    #[error(
        "this sign-in was already used, has expired or was started in another browser; start \
         again from the sign-in page"
    )]
    StaleFlow,
    #[error("the identity provider refused the sign-in: {0}")]
    Refused(String),
    #[error(
        "the identity provider's answer failed the dashboard's checks ({0}); nothing was signed \
         in. Start again from the sign-in page; if it happens again, tell an administrator"
    )]
    BadToken(String),
}

/// The flow state in the [`FLOW_COOKIE`].
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Flow {
    #[serde(rename = "s")]
    state: String,
    #[serde(rename = "n")]
    nonce: String,
    #[serde(rename = "v")]
    verifier: String,
    #[serde(rename = "x")]
    next: String,
    #[serde(rename = "e")]
    expires: u64,
}

/// A person the provider vouched for.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The provider's subject (`sub`).
    pub subject: String,
    /// The name shown and audited (the first of the name claims present, else the subject).
    pub display: String,
    /// The groups in the roles claim.
    pub groups: Vec<String>,
    /// The role they grant, if any.
    pub role: Option<Role>,
    /// Where to go after.
    pub next: String,
}

impl Verified {
    /// The dashboard user: named `oidc:{sub}` (a session generation and audit actor of its own,
    /// never a password user's), or `oidch:{digest of sub}` when that is no id.
    pub fn user(&self, role: Role) -> User {
        User {
            name: user_id(&self.subject),
            role,
            display: Some(self.display.clone()),
        }
    }
}

/// The dashboard user id of a provider subject.
pub fn user_id(subject: &str) -> String {
    let plain = format!("oidc:{subject}");
    if screenlimit_limiter::ids::validate_token(&plain).is_ok() {
        plain
    } else {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(subject.as_bytes());
        format!("oidch:{}", b64(&digest[..18]))
    }
}

type Client = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

struct Loaded {
    client: Client,
    end_session: Option<openidconnect::EndSessionUrl>,
    fetched: Instant,
}

/// The provider as this replica knows it (discovery and JWKS, refreshed), and the flows.
pub struct Oidc {
    settings: OidcSettings,
    http: reqwest::Client,
    signer: Signer,
    loaded: RwLock<Option<Loaded>>,
    last_refetch: Mutex<Option<Instant>>,
    /// `state` values taken here, until their flow would have expired.
    taken: Mutex<HashMap<String, u64>>,
}

impl Oidc {
    pub fn new(settings: OidcSettings, secret: &[u8]) -> anyhow::Result<Oidc> {
        settings.validate().map_err(anyhow::Error::msg)?;
        let http = reqwest::Client::builder()
            // No redirects (the provider's endpoints are taken as discovered) and a deadline on
            // every call.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .build()?;
        Ok(Oidc {
            signer: Signer::derive(secret, "screenlimit-admin-ui oidc flow v1"),
            settings,
            http,
            loaded: RwLock::new(None),
            last_refetch: Mutex::new(None),
            taken: Mutex::new(HashMap::new()),
        })
    }

    pub fn settings(&self) -> &OidcSettings {
        &self.settings
    }

    fn down(&self, detail: impl std::fmt::Display) -> OidcError {
        OidcError::ProviderDown {
            issuer: self.settings.issuer.clone(),
            detail: detail.to_string(),
        }
    }

    /// Discovery and the JWKS, fetched now.
    async fn fetch(&self) -> Result<Loaded, OidcError> {
        let issuer = IssuerUrl::new(self.settings.issuer.clone()).map_err(|e| self.down(e))?;
        let metadata = ProviderMetadataWithLogout::discover_async(issuer, &self.http)
            .await
            .map_err(|error| {
                use openidconnect::DiscoveryError;
                match error {
                    DiscoveryError::Request(e) => self.down(e),
                    DiscoveryError::Response(status, _, _) => {
                        self.down(format!("it answered HTTP {status}"))
                    }
                    other => OidcError::ProviderMisconfigured {
                        issuer: self.settings.issuer.clone(),
                        detail: error_chain(&other),
                    },
                }
            })?;
        let end_session = metadata.additional_metadata().end_session_endpoint.clone();
        let redirect =
            RedirectUrl::new(self.settings.redirect_url.clone()).map_err(|e| self.down(e))?;
        let client = CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.settings.client_id.clone()),
            self.settings.client_secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(redirect);
        Ok(Loaded {
            client,
            end_session,
            fetched: Instant::now(),
        })
    }

    /// Makes sure the provider's metadata is loaded and fresh; `force` fetches it again.
    async fn ensure(&self, force: bool) -> Result<(), OidcError> {
        {
            let loaded = self.loaded.read().await;
            if let Some(loaded) = &*loaded
                && !force
                && loaded.fetched.elapsed() < METADATA_TTL
            {
                return Ok(());
            }
        }
        match self.fetch().await {
            Ok(fresh) => {
                let mut loaded = self.loaded.write().await;
                if loaded.is_none() {
                    tracing::info!(issuer = self.settings.issuer, "identity provider reached");
                }
                *loaded = Some(fresh);
                Ok(())
            }
            Err(error) => {
                let loaded = self.loaded.read().await;
                // Stale metadata beats none while the provider is briefly away (not for a
                // forced refetch, which asked because a key is missing).
                if loaded.is_some() && !force {
                    tracing::warn!(%error, "identity provider metadata not refreshed");
                    return Ok(());
                }
                Err(error)
            }
        }
    }

    /// Starts a sign-in: the provider's authorization URL and the flow cookie's value. The
    /// provider's metadata is read afresh first (sign-ins are rare): a provider that is down
    /// gets a page that says so here, not a browser error at the provider.
    pub async fn start(&self, next: &str) -> Result<(String, String), OidcError> {
        self.ensure(true).await?;
        let loaded = self.loaded.read().await;
        let loaded = loaded.as_ref().expect("ensured");
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = loaded.client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in &self.settings.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        let flow = Flow {
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            verifier: verifier.secret().clone(),
            next: next.to_owned(),
            expires: now_unix() + FLOW_TTL.as_secs(),
        };
        let payload = b64(&serde_json::to_vec(&flow).expect("flow serializes"));
        let tag = b64(&self.signer.sign(payload.as_bytes()));
        Ok((url.to_string(), format!("{payload}.{tag}")))
    }

    fn read_flow(&self, value: &str) -> Option<Flow> {
        let (payload, tag) = value.split_once('.')?;
        if !self.signer.verify(payload.as_bytes(), &unb64(tag)?) {
            return None;
        }
        let flow: Flow = serde_json::from_slice(&unb64(payload)?).ok()?;
        (flow.expires > now_unix()).then_some(flow)
    }

    /// Takes `state` once: false when it was taken here before.
    fn take_state(&self, state: &str, expires: u64) -> bool {
        let now = now_unix();
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        taken.retain(|_, until| *until > now);
        if taken.len() >= 100_000 {
            // Bounded: a flood of genuine flows would be needed to get here.
            taken.clear();
        }
        taken.insert(state.to_owned(), expires).is_none()
    }

    /// Finishes a sign-in: the provider sent the browser back with `code` and `state`; `flow`
    /// is the flow cookie's value.
    pub async fn finish(
        &self,
        flow: Option<&str>,
        code: &str,
        state: &str,
    ) -> Result<Verified, OidcError> {
        let flow = flow
            .and_then(|value| self.read_flow(value))
            .ok_or(OidcError::StaleFlow)?;
        if !bool::from(flow.state.as_bytes().ct_eq(state.as_bytes())) {
            return Err(OidcError::StaleFlow);
        }
        if !self.take_state(&flow.state, flow.expires) {
            return Err(OidcError::StaleFlow);
        }
        self.ensure(false).await?;
        let token = {
            let loaded = self.loaded.read().await;
            let loaded = loaded.as_ref().expect("ensured");
            let request = loaded
                .client
                .exchange_code(AuthorizationCode::new(code.to_owned()))
                .map_err(|e| OidcError::ProviderMisconfigured {
                    issuer: self.settings.issuer.clone(),
                    detail: e.to_string(),
                })?
                .set_pkce_verifier(PkceCodeVerifier::new(flow.verifier.clone()));
            request.request_async(&self.http).await.map_err(|error| {
                use openidconnect::RequestTokenError;
                match error {
                    RequestTokenError::ServerResponse(response) => {
                        OidcError::Refused(format!("{response}"))
                    }
                    RequestTokenError::Request(e) => self.down(error_chain(&e)),
                    other => OidcError::BadToken(error_chain(&other)),
                }
            })?
        };
        let id_token = token
            .id_token()
            .ok_or_else(|| OidcError::BadToken("no ID token in the answer".into()))?;
        let nonce = Nonce::new(flow.nonce.clone());
        let claims = {
            let first = {
                let loaded = self.loaded.read().await;
                let client = &loaded.as_ref().expect("ensured").client;
                id_token
                    .claims(&client.id_token_verifier(), &nonce)
                    .cloned()
            };
            match first {
                Err(ClaimsVerificationError::SignatureVerification(
                    SignatureVerificationError::NoMatchingKey,
                )) if self.may_refetch() => {
                    // A key this replica has not seen: the provider may have rotated its keys.
                    tracing::info!(
                        issuer = self.settings.issuer,
                        "unknown signing key: JWKS fetched again"
                    );
                    self.ensure(true).await?;
                    let loaded = self.loaded.read().await;
                    let client = &loaded.as_ref().expect("ensured").client;
                    id_token
                        .claims(&client.id_token_verifier(), &nonce)
                        .cloned()
                }
                other => other,
            }
        }
        .map_err(|e| OidcError::BadToken(error_chain(&e)))?;
        // The claims were verified; the roles claim (any name) is read from the same token.
        let payload = id_token
            .to_string()
            .split('.')
            .nth(1)
            .and_then(unb64)
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .unwrap_or_default();
        let groups = match &payload[self.settings.roles_claim.as_str()] {
            serde_json::Value::Array(items) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            serde_json::Value::String(one) => one
                .split([',', ' '])
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        let subject = claims.subject().as_str().to_owned();
        let display = self
            .settings
            .name_claims
            .iter()
            .find_map(|claim| payload[claim.as_str()].as_str().filter(|s| !s.is_empty()))
            .unwrap_or(&subject)
            .chars()
            .filter(|c| !c.is_control())
            .take(80)
            .collect();
        let role = self.settings.role_of(&groups);
        Ok(Verified {
            subject,
            display,
            groups,
            role,
            next: flow.next,
        })
    }

    fn may_refetch(&self) -> bool {
        let mut last = self.last_refetch.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|at| at.elapsed() < JWKS_REFETCH_EVERY) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    /// The provider's end-session URL (RP-initiated logout), when it has one.
    pub async fn end_session_url(&self) -> Option<String> {
        if self.ensure(false).await.is_err() {
            return None;
        }
        let loaded = self.loaded.read().await;
        let endpoint = loaded.as_ref()?.end_session.clone()?;
        let mut request = LogoutRequest::from(endpoint)
            .set_client_id(ClientId::new(self.settings.client_id.clone()));
        if let Some(back) = &self.settings.post_logout_redirect_url
            && let Ok(url) = PostLogoutRedirectUrl::new(back.clone())
        {
            request = request.set_post_logout_redirect_uri(url);
        }
        Some(request.http_get_url().to_string())
    }
}

/// An error and its causes, one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_map_to_roles() {
        let mut settings = OidcSettings::new("https://idp.example", "dash", None, "https://d");
        settings.support_groups = vec!["sl-support".into()];
        settings.viewer_groups = vec!["sl-viewer".into(), "staff".into()];
        let groups = |g: &[&str]| g.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            settings.role_of(&groups(&["staff", "sl-support"])),
            Some(Role::Support)
        );
        assert_eq!(settings.role_of(&groups(&["staff"])), Some(Role::Viewer));
        assert_eq!(settings.role_of(&groups(&["other"])), None);
        assert_eq!(settings.role_of(&[]), None);
        assert_eq!(settings.redirect_url, "https://d/oidc/callback");
        assert!(settings.validate().is_ok());
        settings.issuer = "ftp://x".into();
        assert!(settings.validate().unwrap_err().contains("issuer"));
    }

    #[test]
    fn subjects_become_ids() {
        assert_eq!(user_id("248289761001"), "oidc:248289761001");
        let odd = user_id("CiQwOGE4Njg0Yi1kYjg4LTRiNzMtOTBhOS0zY2QxNjYxZjU0NjYSBWxvY2Fs/+=");
        assert!(odd.starts_with("oidch:"), "{odd}");
        assert!(screenlimit_limiter::ids::validate_token(&odd).is_ok());
        assert_eq!(
            odd,
            user_id("CiQwOGE4Njg0Yi1kYjg4LTRiNzMtOTBhOS0zY2QxNjYxZjU0NjYSBWxvY2Fs/+=")
        );
    }
}
