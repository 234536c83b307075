//! The session cookie: who signed in, their role, when it ends, signed with the dashboard secret.
//!
//! Stateless (any replica sharing the secret can read it). Each session carries its user's
//! session generation, kept by the limiter in its store: a sign-out on any replica raises it,
//! and every replica then refuses the sessions issued before (see [`Generations`] and
//! `web::ctx`). Signing out also remembers the session's nonce on this replica, in case the
//! limiter could not be told.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::keys::{Signer, b64, random_bytes, unb64};
use super::{Role, User};

pub const COOKIE: &str = "sl_session";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Session {
    #[serde(rename = "u")]
    pub user: String,
    #[serde(rename = "r")]
    pub role: Role,
    /// Unix seconds after which the session is over.
    #[serde(rename = "e")]
    pub expires: u64,
    #[serde(rename = "n")]
    pub nonce: String,
    /// The user's session generation when it was issued.
    #[serde(rename = "g", default)]
    pub generation: u64,
    /// The name shown, for a user signed in through the identity provider.
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
    /// Signed in through the identity provider (sign-out offers its end-session URL).
    #[serde(rename = "o", default, skip_serializing_if = "std::ops::Not::not")]
    pub provider: bool,
}

impl Session {
    pub fn user(&self) -> User {
        User {
            name: self.user.clone(),
            role: self.role,
            display: self.display.clone(),
        }
    }
}

pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Issues, reads and ends sessions.
pub struct Sessions {
    signer: Signer,
    ttl: Duration,
    ended: Mutex<HashMap<String, u64>>,
}

impl Sessions {
    pub fn new(secret: &[u8], ttl: Duration) -> Sessions {
        Sessions {
            signer: Signer::derive(secret, "screenlimit-admin-ui session v1"),
            ttl,
            ended: Mutex::new(HashMap::new()),
        }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A new session for `user` under session generation `generation`, as the cookie value.
    pub fn issue(&self, user: &User, generation: u64) -> String {
        self.issue_from(user, generation, false)
    }

    /// As [`Sessions::issue`]; `provider` marks a sign-in through the identity provider.
    pub fn issue_from(&self, user: &User, generation: u64, provider: bool) -> String {
        let session = Session {
            user: user.name.clone(),
            role: user.role,
            expires: now_unix() + self.ttl.as_secs(),
            nonce: b64(&random_bytes::<16>()),
            generation,
            display: user.display.clone(),
            provider,
        };
        let payload = b64(&serde_json::to_vec(&session).expect("session serializes"));
        let tag = b64(&self.signer.sign(payload.as_bytes()));
        format!("{payload}.{tag}")
    }

    /// The session a cookie value holds, if it is genuine, unexpired and not signed out.
    pub fn read(&self, value: &str) -> Option<Session> {
        let (payload, tag) = value.split_once('.')?;
        if !self.signer.verify(payload.as_bytes(), &unb64(tag)?) {
            return None;
        }
        let session: Session = serde_json::from_slice(&unb64(payload)?).ok()?;
        if session.expires <= now_unix() {
            return None;
        }
        let ended = self.ended.lock().expect("ended-sessions lock");
        (!ended.contains_key(&session.nonce)).then_some(session)
    }

    /// Signs a session out for good (on this replica).
    pub fn end(&self, session: &Session) {
        let now = now_unix();
        let mut ended = self.ended.lock().expect("ended-sessions lock");
        ended.retain(|_, expires| *expires > now);
        ended.insert(session.nonce.clone(), session.expires);
    }
}

/// A short local cache of users' session generations, read from the limiter.
pub struct Generations {
    fresh_for: Duration,
    cache: Mutex<HashMap<String, (u64, Instant)>>,
}

/// Users whose generation the cache holds, at most (sessions are signed, so these are users who
/// signed in; the bound only guards against a huge users file).
const CACHED_USERS: usize = 4096;

impl Generations {
    pub fn new(fresh_for: Duration) -> Generations {
        Generations {
            fresh_for,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The cached generation of `user`, if read less than `fresh_for` ago.
    pub fn cached(&self, user: &str) -> Option<u64> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(user)
            .filter(|(_, read)| read.elapsed() < self.fresh_for)
            .map(|(generation, _)| *generation)
    }

    pub fn remember(&self, user: &str, generation: u64) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHED_USERS && !cache.contains_key(user) {
            let fresh_for = self.fresh_for;
            cache.retain(|_, (_, read)| read.elapsed() < fresh_for);
            if cache.len() >= CACHED_USERS {
                cache.clear();
            }
        }
        cache.insert(user.to_owned(), (generation, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ana() -> User {
        User {
            name: "ana".into(),
            role: Role::Support,
            display: None,
        }
    }

    #[test]
    fn round_trips_and_rejects_tampering() {
        let sessions = Sessions::new(b"secret", Duration::from_secs(60));
        let cookie = sessions.issue(&ana(), 0);
        assert_eq!(sessions.read(&cookie).map(|s| s.user()), Some(ana()));
        let other = Sessions::new(b"other secret", Duration::from_secs(60));
        assert!(other.read(&cookie).is_none(), "another secret");
        let (payload, tag) = cookie.split_once('.').unwrap();
        let forged = serde_json::to_vec(&Session {
            user: "ana".into(),
            role: Role::Support,
            expires: u64::MAX,
            nonce: "x".into(),
            generation: 0,
            display: None,
            provider: false,
        })
        .unwrap();
        assert!(sessions.read(&format!("{}.{tag}", b64(&forged))).is_none());
        assert!(sessions.read(payload).is_none());
    }

    #[test]
    fn generations_are_cached_for_a_short_while() {
        let generations = Generations::new(Duration::from_millis(50));
        assert_eq!(generations.cached("ana"), None);
        generations.remember("ana", 3);
        assert_eq!(generations.cached("ana"), Some(3));
        assert_eq!(generations.cached("bo"), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(generations.cached("ana"), None, "stale: asked afresh");
        for i in 0..(CACHED_USERS + 10) {
            generations.remember(&format!("user-{i}"), 0);
        }
        let held = generations.cache.lock().unwrap().len();
        assert!(held <= CACHED_USERS, "{held}");
    }

    #[test]
    fn the_generation_travels_in_the_cookie() {
        let sessions = Sessions::new(b"secret", Duration::from_secs(60));
        let session = sessions.read(&sessions.issue(&ana(), 7)).unwrap();
        assert_eq!(session.generation, 7);
    }

    #[test]
    fn expires_and_ends() {
        let sessions = Sessions::new(b"secret", Duration::ZERO);
        assert!(
            sessions.read(&sessions.issue(&ana(), 0)).is_none(),
            "expired"
        );
        let sessions = Sessions::new(b"secret", Duration::from_secs(60));
        let cookie = sessions.issue(&ana(), 0);
        let session = sessions.read(&cookie).unwrap();
        sessions.end(&session);
        assert!(sessions.read(&cookie).is_none(), "signed out");
    }
}
