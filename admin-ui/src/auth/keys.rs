//! The dashboard's secret and the HMAC keys derived from it (one per purpose).

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Signs and checks short messages; one instance per purpose.
#[derive(Clone)]
pub struct Signer {
    key: [u8; 32],
}

impl Signer {
    /// Derives the key for `purpose` from the dashboard secret.
    pub fn derive(secret: &[u8], purpose: &str) -> Signer {
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
        mac.update(purpose.as_bytes());
        Signer {
            key: mac.finalize().into_bytes().into(),
        }
    }

    pub fn sign(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(message);
        mac.finalize().into_bytes().into()
    }

    /// Constant-time check of a signature.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(message);
        mac.verify_slice(signature).is_ok()
    }
}

/// Random bytes for nonces and dev secrets.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    use rand::RngCore;
    let mut bytes = [0u8; N];
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub fn unb64(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()
}
