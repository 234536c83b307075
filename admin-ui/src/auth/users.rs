//! Password users from a credentials file (or a mounted Kubernetes Secret holding one).
//!
//! One user a line: `name:role:argon2-hash`, where `role` is `viewer` or `support` and the hash
//! is a PHC string as printed by `screenlimit-admin-ui hash-password`. Blank lines and lines
//! starting with `#` are ignored. Names follow the id rules (1-64 of `A-Z a-z 0-9 . _ : -`,
//! without `:`).

use std::collections::BTreeMap;
use std::path::Path;

use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::{Argon2, PasswordHash};

use super::keys::{b64, random_bytes};
use super::{Role, User};

#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    #[error("cannot read credentials file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("credentials file line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("the credentials file names no user")]
    Empty,
}

struct Entry {
    role: Role,
    hash: String,
}

/// The users that may sign in with a password.
///
/// Every check does the same work, whoever is named: one argon2 verification per set of hash
/// parameters the file holds (usually one), against the named user's own hash for the user's
/// set and against a decoy (another user's hash of that set, which never signs anyone in) for
/// every other set; an unknown name is checked against the decoys alone. So no answer tells a
/// known name from an unknown one, even when the file mixes hash parameters.
pub struct Users {
    entries: BTreeMap<String, Entry>,
    /// One hash per parameter set (algorithm, version, memory, passes, lanes), in a fixed order.
    decoys: Vec<(String, String)>,
}

impl Users {
    pub fn from_file(path: &Path) -> Result<Users, UsersError> {
        let text = std::fs::read_to_string(path).map_err(|source| UsersError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Users::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Users, UsersError> {
        let mut entries = BTreeMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let raw = raw.trim();
            if raw.is_empty() || raw.starts_with('#') {
                continue;
            }
            let bad = |message: &str| UsersError::Line {
                line,
                message: message.to_owned(),
            };
            let mut parts = raw.splitn(3, ':');
            let (Some(name), Some(role), Some(hash)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad("expected `name:role:argon2-hash`"));
            };
            screenlimit_limiter::ids::validate_token(name)
                .map_err(|e| bad(&format!("user name {e}")))?;
            let role =
                Role::parse(role).ok_or_else(|| bad("role must be `viewer` or `support`"))?;
            PasswordHash::new(hash).map_err(|e| {
                bad(&format!(
                    "not a password hash ({e}); make one with `screenlimit-admin-ui hash-password`"
                ))
            })?;
            if entries
                .insert(
                    name.to_owned(),
                    Entry {
                        role,
                        hash: hash.to_owned(),
                    },
                )
                .is_some()
            {
                return Err(bad(&format!("user `{name}` appears twice")));
            }
        }
        if entries.is_empty() {
            return Err(UsersError::Empty);
        }
        let mut decoys: BTreeMap<String, String> = BTreeMap::new();
        for entry in entries.values() {
            decoys
                .entry(parameter_set(&entry.hash))
                .or_insert_with(|| entry.hash.clone());
        }
        Ok(Users {
            entries,
            decoys: decoys.into_iter().collect(),
        })
    }

    /// No password users (sign-in through the identity provider only).
    pub fn none() -> Users {
        let decoy = hash_password(&b64(&random_bytes::<16>()));
        Users {
            entries: BTreeMap::new(),
            decoys: vec![(parameter_set(&decoy), decoy)],
        }
    }

    /// Builds the user list from (name, role, password) triples, hashing each password.
    pub fn with_passwords(users: &[(&str, Role, &str)]) -> Users {
        let text: String = users
            .iter()
            .map(|(name, role, password)| {
                format!("{name}:{}:{}\n", role.label(), hash_password(password))
            })
            .collect();
        Users::parse(&text).expect("generated credentials are valid")
    }

    /// Checks a password; slow on purpose (argon2), so call it off the async threads.
    pub fn verify(&self, name: &str, password: &str) -> Option<User> {
        let entry = self.entries.get(name);
        let own_set = entry.map(|e| parameter_set(&e.hash));
        let mut matched = false;
        for (set, decoy) in &self.decoys {
            let mine = own_set.as_deref() == Some(set.as_str());
            let hash = match entry {
                Some(entry) if mine => entry.hash.as_str(),
                _ => decoy.as_str(),
            };
            let ok = PasswordHash::new(hash).is_ok_and(|hash| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &hash)
                    .is_ok()
            });
            // Only the user's own hash can sign them in.
            matched |= ok && mine;
        }
        let entry = entry?;
        matched.then(|| User {
            name: name.to_owned(),
            role: entry.role,
            display: None,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What a hash's check costs, as text: its algorithm, version and parameters (memory, passes,
/// lanes), without salt or output.
fn parameter_set(hash: &str) -> String {
    match PasswordHash::new(hash) {
        Ok(hash) => format!(
            "{}${}${}",
            hash.algorithm,
            hash.version.unwrap_or_default(),
            hash.params
        ),
        Err(_) => String::new(),
    }
}

/// An argon2id PHC string for `password`, with a fresh random salt.
pub fn hash_password(password: &str) -> String {
    Argon2::default()
        .hash_password(password.as_bytes())
        .expect("argon2 with default parameters accepts any password")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_the_right_password_only() {
        let users =
            Users::with_passwords(&[("ana", Role::Support, "s3cret"), ("bo", Role::Viewer, "pw")]);
        assert_eq!(
            users.verify("ana", "s3cret").map(|u| u.role),
            Some(Role::Support)
        );
        assert_eq!(users.verify("bo", "pw").map(|u| u.role), Some(Role::Viewer));
        assert!(users.verify("ana", "wrong").is_none());
        assert!(users.verify("nobody", "s3cret").is_none());
        // An unknown name is checked against a known user's hash (the same work), and never
        // signs in, even with that user's password.
        assert_eq!(users.decoys.len(), 1, "one parameter set");
        assert!(users.entries.values().any(|e| e.hash == users.decoys[0].1));
        assert!(users.verify("nobody", "pw").is_none());
    }

    #[test]
    fn mixed_parameters_each_verify_and_every_check_covers_every_set() {
        let cheap = {
            let params = argon2::Params::new(8192, 1, 1, None).unwrap();
            Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params)
                .hash_password(b"cheap-pw")
                .unwrap()
                .to_string()
        };
        let text = format!(
            "ana:support:{}\nbo:viewer:{cheap}\n",
            hash_password("ana-pw")
        );
        let users = Users::parse(&text).unwrap();
        assert_eq!(users.decoys.len(), 2);
        assert!(users.verify("ana", "ana-pw").is_some());
        assert!(users.verify("bo", "cheap-pw").is_some());
        // Another set's hash never signs anyone in, nor an unknown name.
        assert!(users.verify("ana", "cheap-pw").is_none());
        assert!(users.verify("bo", "ana-pw").is_none());
        assert!(users.verify("nobody", "ana-pw").is_none());
    }

    #[test]
    fn file_errors_name_the_line() {
        let hash = hash_password("x");
        let text = format!("# staff\n\nana:support:{hash}\nbo:admin:{hash}\n");
        let error = Users::parse(&text).err().expect("bad role").to_string();
        assert!(
            error.contains("line 4") && error.contains("viewer"),
            "{error}"
        );
        let error = Users::parse("ana:viewer:plaintext")
            .err()
            .expect("bad hash")
            .to_string();
        assert!(error.contains("hash-password"), "{error}");
        assert!(matches!(Users::parse("# nobody\n"), Err(UsersError::Empty)));
    }
}
