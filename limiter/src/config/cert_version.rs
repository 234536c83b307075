//! The X.509 version of the certificates in a PEM file, read before rustls is given them: rustls
//! (webpki) takes only v3, and refuses a v1 client certificate with an error that reads as the
//! server's fault ("invalid peer certificate: UnsupportedCertVersion"). A v1 certificate is what
//! `openssl x509 -req` makes when no extensions are given.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The version (1, 2 or 3) of each certificate in `pem`, in order; `None` for one that is not
/// DER this reader understands (rustls then says what is wrong with it).
pub fn versions(pem: &[u8]) -> Vec<Option<u8>> {
    CertificateDer::pem_slice_iter(pem)
        .map(|der| der.ok().and_then(|der| version(&der)))
        .collect()
}

/// Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] EXPLICIT INTEGER version DEFAULT
/// v1, ... }, ... }: an absent version is v1; the INTEGER is the version minus one.
fn version(der: &[u8]) -> Option<u8> {
    let certificate = inside(der, 0x30)?;
    let tbs = inside(certificate, 0x30)?;
    if tbs.first() != Some(&0xA0) {
        return Some(1);
    }
    match inside(tbs, 0xA0)? {
        [0x02, 0x01, v] if *v < 3 => Some(v + 1),
        _ => None,
    }
}

/// The contents of the DER element at the start of `der`, if it has `tag`.
fn inside(der: &[u8], tag: u8) -> Option<&[u8]> {
    let (&first, rest) = der.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, rest) = rest.split_first()?;
    let (len, rest) = match len {
        0..=0x7f => (usize::from(len), rest),
        0x81..=0x84 => {
            let n = usize::from(len & 0x7f);
            let (bytes, rest) = rest.split_at_checked(n)?;
            let len = bytes
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            (len, rest)
        }
        _ => return None,
    };
    rest.get(..len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junk_is_not_a_version() {
        assert_eq!(version(&[]), None);
        assert_eq!(version(&[0x30, 0x85, 0, 0, 0, 0, 1]), None);
        assert_eq!(version(&[0x30, 0x10, 0x30]), None);
        // 0x80 (indefinite length) is not DER.
        assert_eq!(version(&[0x30, 0x80, 0x30, 0x00]), None);
        // A v3 header: SEQUENCE { SEQUENCE { [0] { INTEGER 2 } } }.
        assert_eq!(
            version(&[0x30, 0x07, 0x30, 0x05, 0xA0, 0x03, 0x02, 0x01, 0x02]),
            Some(3)
        );
        // No [0]: v1.
        assert_eq!(
            version(&[0x30, 0x05, 0x30, 0x03, 0x02, 0x01, 0x07]),
            Some(1)
        );
        assert!(versions(b"not a pem").is_empty());
    }
}
