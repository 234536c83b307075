//! CSRF protection: a signed double-submit token.
//!
//! Every visitor gets a random `sl_csrf` cookie (SameSite=Strict, HttpOnly); every form carries
//! `csrf = HMAC(secret, cookie)`. A POST whose token does not match its own cookie is refused,
//! so a page on another site can neither read nor forge it. The check runs in one middleware
//! for every POST (see `web::guard`).

use super::keys::{Signer, b64, random_bytes, unb64};

pub const COOKIE: &str = "sl_csrf";
/// The form field (and, for htmx, the request header) that carries the token.
pub const FIELD: &str = "csrf";
pub const HEADER: &str = "x-csrf-token";

pub struct Csrf {
    signer: Signer,
}

impl Csrf {
    pub fn new(secret: &[u8]) -> Csrf {
        Csrf {
            signer: Signer::derive(secret, "screenlimit-admin-ui csrf v1"),
        }
    }

    /// A fresh cookie value.
    pub fn new_cookie() -> String {
        b64(&random_bytes::<16>())
    }

    /// The token that forms must send back along with `cookie`.
    pub fn token(&self, cookie: &str) -> String {
        b64(&self.signer.sign(cookie.as_bytes()))
    }

    pub fn check(&self, cookie: &str, token: &str) -> bool {
        match unb64(token) {
            Some(tag) => self.signer.verify(cookie.as_bytes(), &tag),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_matches_only_its_cookie() {
        let csrf = Csrf::new(b"secret");
        let cookie = Csrf::new_cookie();
        assert!(csrf.check(&cookie, &csrf.token(&cookie)));
        assert!(!csrf.check(&Csrf::new_cookie(), &csrf.token(&cookie)));
        assert!(!csrf.check(&cookie, ""));
        assert!(!Csrf::new(b"other").check(&cookie, &csrf.token(&cookie)));
    }
}
