//! The device cookie (OWASP's "device cookies"): proof that this browser signed in as a user
//! before. Signed with the dashboard secret, so any replica sharing it reads it; it names the
//! user and a random device id, and lasts `--signin-device-ttl`. It grants nothing by itself:
//! it only lets the throttle judge this browser's failed sign-ins on its own budget instead of
//! with everyone else's (see `throttle`).

use serde::{Deserialize, Serialize};

use super::keys::{Signer, b64, random_bytes, unb64};
use super::session::now_unix;

pub const COOKIE: &str = "sl_device";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Device {
    #[serde(rename = "u")]
    user: String,
    /// The device id: random, one per browser and user.
    #[serde(rename = "d")]
    id: String,
    /// Unix seconds after which the cookie proves nothing.
    #[serde(rename = "e")]
    expires: u64,
}

/// Issues and reads device cookies.
pub struct Devices {
    signer: Signer,
    ttl_secs: u64,
}

impl Devices {
    pub fn new(secret: &[u8], ttl: std::time::Duration) -> Devices {
        Devices {
            signer: Signer::derive(secret, "screenlimit-admin-ui device v1"),
            ttl_secs: ttl.as_secs(),
        }
    }

    pub fn ttl_secs(&self) -> u64 {
        self.ttl_secs
    }

    /// A cookie value for `user` in this browser: the device id of `existing` (the browser's
    /// cookie for the same user) is kept, so its budget stays its own.
    pub fn issue(&self, user: &str, existing: Option<&str>) -> String {
        let id = existing
            .and_then(|value| self.read(value, user))
            .unwrap_or_else(|| b64(&random_bytes::<16>()));
        let device = Device {
            user: user.to_owned(),
            id,
            expires: now_unix() + self.ttl_secs,
        };
        let payload = b64(&serde_json::to_vec(&device).expect("device serializes"));
        let tag = b64(&self.signer.sign(payload.as_bytes()));
        format!("{payload}.{tag}")
    }

    /// The device id in `value` when it is genuine, unexpired and names `user`.
    pub fn read(&self, value: &str, user: &str) -> Option<String> {
        let (payload, tag) = value.split_once('.')?;
        if !self.signer.verify(payload.as_bytes(), &unb64(tag)?) {
            return None;
        }
        let device: Device = serde_json::from_slice(&unb64(payload)?).ok()?;
        (device.user == user && device.expires > now_unix()).then_some(device.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn names_one_user_and_cannot_be_forged() {
        let devices = Devices::new(b"secret", Duration::from_secs(60));
        let cookie = devices.issue("ana", None);
        let id = devices.read(&cookie, "ana").expect("genuine");
        assert_eq!(devices.read(&cookie, "bo"), None, "another user's name");
        assert_eq!(
            Devices::new(b"other", Duration::from_secs(60)).read(&cookie, "ana"),
            None
        );
        let (payload, tag) = cookie.split_once('.').unwrap();
        let forged = b64(&serde_json::to_vec(&Device {
            user: "ana".into(),
            id: "mine".into(),
            expires: u64::MAX,
        })
        .unwrap());
        assert_eq!(devices.read(&format!("{forged}.{tag}"), "ana"), None);
        assert_eq!(devices.read(payload, "ana"), None);
        // Signing in again keeps the id; another user gets a new one.
        let again = devices.issue("ana", Some(&cookie));
        assert_eq!(devices.read(&again, "ana"), Some(id.clone()));
        let bo = devices.issue("bo", Some(&cookie));
        assert_ne!(devices.read(&bo, "bo"), Some(id));
        let expired = Devices::new(b"secret", Duration::ZERO).issue("ana", None);
        assert_eq!(devices.read(&expired, "ana"), None);
    }
}
