//! `screenlimit-admin-ui`: the support dashboard server (and `--dev`, and `hash-password`).

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use axum::http::HeaderName;
use clap::{Parser, Subcommand};
use screenlimit_admin_ui::auth::Role;
use screenlimit_admin_ui::auth::oidc::OidcSettings;
use screenlimit_admin_ui::auth::throttle::ThrottleRules;
use screenlimit_admin_ui::auth::users::{Users, hash_password};
use screenlimit_admin_ui::config::{AuthMode, Settings, default_signin_concurrency};
use screenlimit_admin_ui::drain::DrainSettings;
use screenlimit_admin_ui::web::client;

/// screenlimit's support dashboard: an account's live devices, force-stop, audit, fleet health.
///
/// Talks to the limiter over HTTP. `--dev` also starts a limiter on the embedded store in this
/// process and prints a sign-in.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Start an in-process limiter (embedded store) on --dev-limiter-listen too, and sign in
    /// with printed random passwords (users `support` and `viewer`).
    #[arg(long)]
    dev: bool,
    /// Where the dev limiter listens.
    #[arg(long, default_value = "127.0.0.1:8080")]
    dev_limiter_listen: SocketAddr,
    /// Address the dashboard listens on.
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_LISTEN",
        default_value = "127.0.0.1:8081"
    )]
    listen: SocketAddr,
    /// Base URL of the limiter API (or the Service in front of its replicas)
    /// [default: http://127.0.0.1:8080; env SCREENLIMIT_LIMITER_URL works too].
    #[arg(long, env = "SCREENLIMIT_ADMIN_LIMITER_URL")]
    limiter_url: Option<String>,
    /// File holding the bearer token the limiter requires (its `auth.support_token_file`, or
    /// the older `auth_token_file`)
    /// [env SCREENLIMIT_LIMITER_TOKEN_FILE works too].
    #[arg(long, env = "SCREENLIMIT_ADMIN_LIMITER_TOKEN_FILE")]
    limiter_token_file: Option<PathBuf>,
    /// Deadline of each limiter call ("2s", "500ms").
    #[arg(long, env = "SCREENLIMIT_ADMIN_LIMITER_TIMEOUT", default_value = "3s", value_parser = humantime::parse_duration)]
    limiter_timeout: Duration,
    /// Limiter instances the fleet page polls one by one (comma separated); default: --limiter-url.
    #[arg(long, env = "SCREENLIMIT_ADMIN_FLEET_URLS", value_delimiter = ',')]
    fleet_url: Vec<String>,
    /// How often the dashboard samples every fleet instance in the background (the fleet
    /// charts' last 10 minutes, there as soon as the page opens).
    #[arg(long, env = "SCREENLIMIT_ADMIN_FLEET_SAMPLE_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    fleet_sample_interval: Duration,
    /// A Prometheus that scrapes the limiters (`http://prometheus:9090`, a path prefix allowed):
    /// the fleet charts then offer 1 h, 6 h and 24 h from its `query_range`, and the fleet page
    /// shows the shares of plays that would be refused in shadow.
    #[arg(long, env = "SCREENLIMIT_ADMIN_PROMETHEUS_URL")]
    prometheus_url: Option<String>,
    /// Deadline of each Prometheus query.
    #[arg(long, env = "SCREENLIMIT_ADMIN_PROMETHEUS_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    prometheus_timeout: Duration,
    /// How people sign in: `credentials` (a users file) or `proxy-header` (an authenticating proxy).
    #[arg(long, env = "SCREENLIMIT_ADMIN_AUTH", default_value = "credentials", value_parser = ["credentials", "proxy-header"])]
    auth: String,
    /// Users file, one `name:role:argon2-hash` a line (a mounted Kubernetes Secret works).
    #[arg(long, env = "SCREENLIMIT_ADMIN_CREDENTIALS_FILE")]
    credentials_file: Option<PathBuf>,
    /// A mounted Kubernetes Secret with keys `users` (the credentials file) and, optionally,
    /// `session-secret`; used for whichever of the two files is not given on its own.
    #[arg(long, env = "SCREENLIMIT_ADMIN_AUTH_DIR")]
    auth_dir: Option<PathBuf>,
    /// proxy-header mode: the header holding the signed-in user's name.
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_PROXY_USER_HEADER",
        default_value = "x-forwarded-user"
    )]
    proxy_user_header: HeaderName,
    /// proxy-header mode: a header listing the user's groups (comma or space separated).
    #[arg(long, env = "SCREENLIMIT_ADMIN_PROXY_GROUPS_HEADER")]
    proxy_groups_header: Option<HeaderName>,
    /// proxy-header mode: the group that grants the `support` role.
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_PROXY_SUPPORT_GROUP",
        default_value = "support"
    )]
    proxy_support_group: String,
    /// proxy-header mode: the role of everyone else the proxy lets in.
    #[arg(long, env = "SCREENLIMIT_ADMIN_PROXY_DEFAULT_ROLE", default_value = "viewer", value_parser = ["viewer", "support"])]
    proxy_default_role: String,
    /// File holding the secret that signs sessions and CSRF tokens (replicas must share it);
    /// without it a random one is drawn and sessions end with the process.
    #[arg(long, env = "SCREENLIMIT_ADMIN_SESSION_SECRET_FILE")]
    session_secret_file: Option<PathBuf>,
    /// How long a sign-in lasts.
    #[arg(long, env = "SCREENLIMIT_ADMIN_SESSION_TTL", default_value = "8h", value_parser = humantime::parse_duration)]
    session_ttl: Duration,
    /// How long a user's session generation read from the limiter is trusted when reading
    /// pages (a sign-out on another replica shows within it); state changes always ask afresh.
    #[arg(long, env = "SCREENLIMIT_ADMIN_SESSION_CHECK_INTERVAL", default_value = "2s", value_parser = humantime::parse_duration)]
    session_check_interval: Duration,
    /// The URL people open; `https://…` marks cookies `Secure` (so does `X-Forwarded-Proto: https`).
    #[arg(long, env = "SCREENLIMIT_ADMIN_EXTERNAL_URL")]
    external_url: Option<String>,
    /// How often the device table refreshes itself.
    #[arg(long, env = "SCREENLIMIT_ADMIN_REFRESH", default_value = "3s", value_parser = humantime::parse_duration)]
    refresh: Duration,
    /// Peers whose client-address header is believed: reverse proxies or load balancers in
    /// front of the dashboard (addresses or networks, comma separated; default none).
    #[arg(long, env = "SCREENLIMIT_ADMIN_TRUSTED_PROXIES", value_delimiter = ',', value_parser = client::parse_trusted_proxy)]
    trusted_proxy: Vec<ipnet::IpNet>,
    /// The header a trusted proxy names the client's address in (a list, the nearest hop last).
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_CLIENT_ADDRESS_HEADER",
        default_value = "x-forwarded-for"
    )]
    client_address_header: HeaderName,
    /// OpenID Connect: the issuer URL of the company's identity provider (turns provider
    /// sign-in on; needs --external-url, which gives the redirect URL `{external}/oidc/callback`).
    #[arg(long, env = "SCREENLIMIT_ADMIN_OIDC_ISSUER")]
    oidc_issuer: Option<String>,
    /// OpenID Connect: the dashboard's client id at the provider.
    #[arg(long, env = "SCREENLIMIT_ADMIN_OIDC_CLIENT_ID")]
    oidc_client_id: Option<String>,
    /// OpenID Connect: a file holding the client secret (a mounted Secret); none for a public
    /// client.
    #[arg(long, env = "SCREENLIMIT_ADMIN_OIDC_CLIENT_SECRET_FILE")]
    oidc_client_secret_file: Option<PathBuf>,
    /// OpenID Connect: scopes asked for besides `openid` (comma separated).
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_OIDC_SCOPES",
        value_delimiter = ',',
        default_value = "profile,groups"
    )]
    oidc_scopes: Vec<String>,
    /// OpenID Connect: the ID token claim listing the user's groups.
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_OIDC_ROLES_CLAIM",
        default_value = "groups"
    )]
    oidc_roles_claim: String,
    /// OpenID Connect: groups that grant `support` (comma separated).
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_OIDC_SUPPORT_GROUPS",
        value_delimiter = ','
    )]
    oidc_support_groups: Vec<String>,
    /// OpenID Connect: groups that grant `viewer` (comma separated).
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_OIDC_VIEWER_GROUPS",
        value_delimiter = ','
    )]
    oidc_viewer_groups: Vec<String>,
    /// OpenID Connect: claims tried in order for the name shown and audited.
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_OIDC_NAME_CLAIMS",
        value_delimiter = ',',
        default_value = "preferred_username,name,email"
    )]
    oidc_name_claims: Vec<String>,
    /// OpenID Connect: the sign-in button reads "Sign in with …".
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_OIDC_DISPLAY_NAME",
        default_value = "your company account"
    )]
    oidc_display_name: String,
    /// OpenID Connect: deadline of each call to the provider.
    #[arg(long, env = "SCREENLIMIT_ADMIN_OIDC_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    oidc_timeout: Duration,
    /// Failed sign-ins (per user name and per address) answered without delay.
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_SIGNIN_FREE_FAILURES",
        default_value_t = 3
    )]
    signin_free_failures: u32,
    /// Delay after the first failure beyond the free ones; doubles with each further one.
    #[arg(long, env = "SCREENLIMIT_ADMIN_SIGNIN_DELAY", default_value = "500ms", value_parser = humantime::parse_duration)]
    signin_delay: Duration,
    /// Longest delay a sign-in is made to wait; an attempt whose turn is further away is
    /// refused (429 with Retry-After).
    #[arg(long, env = "SCREENLIMIT_ADMIN_SIGNIN_MAX_DELAY", default_value = "8s", value_parser = humantime::parse_duration)]
    signin_max_delay: Duration,
    /// Failed sign-ins one known browser (a device cookie from an earlier sign-in as that user)
    /// makes, answered at once, before its cookie is distrusted for --signin-lockout.
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_SIGNIN_DEVICE_FAILURES",
        default_value_t = 5
    )]
    signin_device_failures: u32,
    /// How long a device cookie (proof that a browser signed in before) lasts.
    #[arg(long, env = "SCREENLIMIT_ADMIN_SIGNIN_DEVICE_TTL", default_value = "90days", value_parser = humantime::parse_duration)]
    signin_device_ttl: Duration,
    /// Failed sign-ins from one client address that pause sign-in from it for --signin-lockout.
    #[arg(
        long,
        env = "SCREENLIMIT_ADMIN_SIGNIN_ADDRESS_LOCKOUT_AFTER",
        default_value_t = 30
    )]
    signin_address_lockout_after: u32,
    /// How long a lockout lasts (and how long failures are remembered).
    #[arg(long, env = "SCREENLIMIT_ADMIN_SIGNIN_LOCKOUT", default_value = "15m", value_parser = humantime::parse_duration)]
    signin_lockout: Duration,
    /// Password verifications (argon2) at once, at most [default: half the cores, 1 to 4].
    #[arg(long, env = "SCREENLIMIT_ADMIN_SIGNIN_CONCURRENCY")]
    signin_concurrency: Option<usize>,
    /// How long a sign-in waits for a verification slot before it is answered 503.
    #[arg(long, env = "SCREENLIMIT_ADMIN_SIGNIN_QUEUE_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    signin_queue_timeout: Duration,
    /// After SIGTERM, how long the dashboard keeps answering (with /readyz 503 and
    /// `Connection: close`) before it stops accepting: the time the Service's endpoints take to
    /// drop it (0s: stop at once; at most 5m).
    #[arg(long, env = "SCREENLIMIT_ADMIN_DRAIN_PERIOD", default_value = "5s", value_parser = humantime::parse_duration)]
    drain_period: Duration,
    /// After the drain period, how long requests in flight get to finish (100ms to 10m).
    #[arg(long, env = "SCREENLIMIT_ADMIN_SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    shutdown_timeout: Duration,
    /// How long a browser or proxy may keep one connection (each connection's own, within
    /// ±10 %): then the next answer carries `Connection: close`, so kept-alive clients spread
    /// over the replicas a roll added (0s: never; else 1s to 24h).
    #[arg(long, env = "SCREENLIMIT_ADMIN_MAX_CONNECTION_AGE", default_value = "5m", value_parser = humantime::parse_duration)]
    max_connection_age: Duration,
    /// Log format.
    #[arg(long, env = "SCREENLIMIT_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
}

#[derive(Subcommand)]
enum Command {
    /// Reads a password from stdin and prints its argon2id hash; with --user, a whole
    /// credentials-file line.
    HashPassword {
        /// Print `user:role:hash` for the credentials file.
        #[arg(long)]
        user: Option<String>,
        #[arg(long, default_value = "support", value_parser = ["viewer", "support"])]
        role: String,
    },
}

fn read_secret_file(path: &Path, flag: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{flag}: cannot read {}", path.display()))?;
    let text = text.trim().to_owned();
    anyhow::ensure!(!text.is_empty(), "{flag}: {} is empty", path.display());
    Ok(text)
}

fn hash_password_command(user: Option<String>, role: &str) -> anyhow::Result<()> {
    eprintln!("Type the password and press Enter (it is read from stdin):");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let password = line.trim_end_matches(['\r', '\n']);
    anyhow::ensure!(
        password.len() >= 8,
        "use a password of at least 8 characters"
    );
    let hash = hash_password(password);
    match user {
        Some(user) => {
            screenlimit_limiter::ids::validate_token(&user)
                .map_err(|e| anyhow::anyhow!("--user {e}"))?;
            anyhow::ensure!(!user.contains(':'), "--user may not contain `:`");
            println!("{user}:{role}:{hash}");
        }
        None => println!("{hash}"),
    }
    Ok(())
}

/// The default limiter URL.
const LIMITER_URL: &str = "http://127.0.0.1:8080";

/// Fills what the flags leave open from the other names the operator's Deployment uses
/// (`SCREENLIMIT_LIMITER_URL`, `SCREENLIMIT_LIMITER_TOKEN_FILE`) and from `--auth-dir`.
fn resolve_aliases(cli: &mut Cli) {
    if cli.limiter_url.is_none() {
        cli.limiter_url = std::env::var("SCREENLIMIT_LIMITER_URL").ok();
    }
    if cli.limiter_token_file.is_none() {
        cli.limiter_token_file =
            std::env::var_os("SCREENLIMIT_LIMITER_TOKEN_FILE").map(PathBuf::from);
    }
    if let Some(dir) = &cli.auth_dir {
        // With the identity provider on, a Secret without `users` means no password users.
        let users = dir.join("users");
        if cli.credentials_file.is_none() && (users.exists() || cli.oidc_issuer.is_none()) {
            cli.credentials_file = Some(users);
        }
        let secret = dir.join("session-secret");
        if cli.session_secret_file.is_none() && secret.exists() {
            cli.session_secret_file = Some(secret);
        }
    }
}

fn settings_from(cli: &Cli, dev_users: Option<Users>) -> anyhow::Result<Settings> {
    let auth = match (dev_users, cli.auth.as_str()) {
        (Some(users), _) => AuthMode::Credentials(users),
        (None, "proxy-header") => AuthMode::ProxyHeader {
            user_header: cli.proxy_user_header.clone(),
            role_header: cli.proxy_groups_header.clone(),
            support_group: cli.proxy_support_group.clone(),
            default_role: Role::parse(&cli.proxy_default_role).unwrap_or(Role::Viewer),
        },
        (None, _) if cli.credentials_file.is_none() && cli.oidc_issuer.is_some() => {
            AuthMode::Credentials(Users::none())
        }
        (None, _) => {
            let path = cli.credentials_file.as_ref().context(
                "--credentials-file (SCREENLIMIT_ADMIN_CREDENTIALS_FILE) is required with \
                 --auth credentials; make lines with `screenlimit-admin-ui hash-password --user NAME`",
            )?;
            AuthMode::Credentials(
                Users::from_file(path).with_context(|| "--credentials-file".to_string())?,
            )
        }
    };
    let secret = match &cli.session_secret_file {
        Some(path) => {
            let secret = read_secret_file(path, "--session-secret-file")?;
            anyhow::ensure!(
                secret.len() >= 32,
                "--session-secret-file: use at least 32 characters"
            );
            secret.into_bytes()
        }
        None => {
            if !cli.dev {
                tracing::warn!(
                    "no --session-secret-file: sessions are signed with a random secret and end \
                     when this process stops (and replicas will not share them)"
                );
            }
            screenlimit_admin_ui::auth::keys::random_bytes::<32>().to_vec()
        }
    };
    anyhow::ensure!(
        cli.session_ttl.as_secs() <= screenlimit_limiter::model::MAX_DASHBOARD_SESSION_SEC,
        "--session-ttl: at most 30 days (the limiter keeps a user's session generation that long \
         after the last sign-in event)"
    );
    let oidc = oidc_settings(cli)?;
    let limiter_token = match &cli.limiter_token_file {
        Some(path) => Some(read_secret_file(path, "--limiter-token-file")?),
        None => None,
    };
    Ok(Settings {
        limiter_url: cli
            .limiter_url
            .clone()
            .unwrap_or_else(|| LIMITER_URL.to_owned()),
        limiter_token,
        limiter_timeout: cli.limiter_timeout,
        fleet_urls: cli.fleet_url.clone(),
        fleet_sample_interval: cli.fleet_sample_interval,
        prometheus_url: cli.prometheus_url.clone(),
        prometheus_timeout: cli.prometheus_timeout,
        auth,
        secret,
        session_ttl: cli.session_ttl,
        session_check_interval: cli.session_check_interval,
        secure_cookies: cli
            .external_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https://")),
        refresh: cli.refresh,
        trusted_proxies: cli.trusted_proxy.clone(),
        client_address_header: cli.client_address_header.clone(),
        throttle: ThrottleRules {
            free_failures: cli.signin_free_failures,
            base_delay: cli.signin_delay,
            max_delay: cli.signin_max_delay,
            device_failures: cli.signin_device_failures.max(1),
            device_ttl: cli.signin_device_ttl,
            address_lockout_after: cli.signin_address_lockout_after,
            lockout: cli.signin_lockout,
            ..ThrottleRules::default()
        },
        signin_concurrency: cli
            .signin_concurrency
            .unwrap_or_else(default_signin_concurrency)
            .max(1),
        signin_queue_timeout: cli.signin_queue_timeout,
        oidc,
    })
}

/// The `--oidc-*` flags, checked: none at all means no provider sign-in.
fn oidc_settings(cli: &Cli) -> anyhow::Result<Option<OidcSettings>> {
    let Some(issuer) = &cli.oidc_issuer else {
        anyhow::ensure!(
            cli.oidc_client_id.is_none() && cli.oidc_client_secret_file.is_none(),
            "--oidc-client-id and --oidc-client-secret-file need --oidc-issuer"
        );
        return Ok(None);
    };
    let client_id = cli
        .oidc_client_id
        .as_deref()
        .context("--oidc-issuer needs --oidc-client-id (the dashboard's client at the provider)")?;
    let external = cli.external_url.as_deref().context(
        "--oidc-issuer needs --external-url: the provider sends people back to \
         {external-url}/oidc/callback",
    )?;
    let secret = match &cli.oidc_client_secret_file {
        Some(path) => Some(read_secret_file(path, "--oidc-client-secret-file")?),
        None => None,
    };
    let mut settings = OidcSettings::new(issuer, client_id, secret.as_deref(), external);
    let list = |items: &[String]| -> Vec<String> {
        items
            .iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    };
    settings.scopes = list(&cli.oidc_scopes);
    settings.roles_claim = cli.oidc_roles_claim.trim().to_owned();
    settings.support_groups = list(&cli.oidc_support_groups);
    settings.viewer_groups = list(&cli.oidc_viewer_groups);
    settings.name_claims = list(&cli.oidc_name_claims);
    settings.display_name = cli.oidc_display_name.clone();
    settings.timeout = cli.oidc_timeout;
    settings
        .validate()
        .map_err(|e| anyhow::anyhow!("--oidc-*: {e}"))?;
    Ok(Some(settings))
}

/// The drain flags, checked by the limiter's own bounds for the same settings.
fn drain_settings(cli: &Cli) -> anyhow::Result<DrainSettings> {
    use screenlimit_limiter::config::{
        MAX_CONNECTION_AGE_RANGE, MAX_DRAIN_PERIOD, SHUTDOWN_TIMEOUT_RANGE,
    };
    anyhow::ensure!(
        cli.drain_period <= MAX_DRAIN_PERIOD,
        "--drain-period {} must be at most {}",
        humantime::format_duration(cli.drain_period),
        humantime::format_duration(MAX_DRAIN_PERIOD)
    );
    anyhow::ensure!(
        SHUTDOWN_TIMEOUT_RANGE.contains(&cli.shutdown_timeout),
        "--shutdown-timeout {} must be between 100ms and 10m",
        humantime::format_duration(cli.shutdown_timeout)
    );
    anyhow::ensure!(
        cli.max_connection_age.is_zero()
            || MAX_CONNECTION_AGE_RANGE.contains(&cli.max_connection_age),
        "--max-connection-age {} must be 0s (never) or between 1s and 24h",
        humantime::format_duration(cli.max_connection_age)
    );
    Ok(DrainSettings {
        period: cli.drain_period,
        shutdown_timeout: cli.shutdown_timeout,
        max_connection_age: cli.max_connection_age,
    })
}

async fn run(mut cli: Cli) -> anyhow::Result<()> {
    resolve_aliases(&mut cli);
    let mut dev_users = None;
    let mut banner = None;
    if cli.dev {
        let listener =
            screenlimit_admin_ui::bind(cli.dev_limiter_listen, "--dev-limiter-listen").await?;
        let limiter = screenlimit_admin_ui::dev::start_limiter(listener, None)?;
        cli.limiter_url = Some(limiter.url());
        let password = std::env::var("SCREENLIMIT_ADMIN_DEV_PASSWORD")
            .unwrap_or_else(|_| screenlimit_admin_ui::dev::random_password(16));
        dev_users = Some(Users::with_passwords(&[
            ("support", Role::Support, &password),
            ("viewer", Role::Viewer, &password),
        ]));
        banner = Some((limiter.url(), password));
    }
    let settings = settings_from(&cli, dev_users)?;
    let drain = drain_settings(&cli)?;
    let listener = screenlimit_admin_ui::bind(cli.listen, "--listen").await?;
    let dashboard = format!("http://{}", listener.local_addr()?);
    tracing::info!(
        listen = dashboard,
        limiter = settings.limiter_url,
        "screenlimit dashboard serving"
    );
    if let Some((limiter, password)) = banner {
        println!(
            "\nscreenlimit dev mode (embedded store; nothing persists)\n\
             \x20 limiter API: {limiter}\n\
             \x20 dashboard:   {dashboard}\n\
             \x20 sign in as   support / {password}   (may force-stop)\n\
             \x20         or   viewer  / {password}   (read only)\n\n\
             Start a play, then find account acct-42 in the dashboard:\n\
             \x20 curl -s {limiter}/v1/streams -H 'content-type: application/json' \\\n\
             \x20   -d '{{\"account_id\":\"acct-42\",\"device_id\":\"living-room-tv\",\"plan\":\"standard\",\"device_type\":\"tv\",\"device_meta\":\"Living Room TV\"}}'\n"
        );
    }
    screenlimit_admin_ui::serve_until_drained(listener, settings, drain).await
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::HashPassword { user, role }) = cli.command {
        return match hash_password_command(user, &role) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("screenlimit-admin-ui hash-password: {error:#}");
                ExitCode::from(2)
            }
        };
    }
    screenlimit_limiter::lifecycle::init_tracing(&cli.log_format);
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("screenlimit-admin-ui: {error:#}");
            ExitCode::FAILURE
        }
    }
}
