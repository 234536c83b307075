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
pub struct Users {
    entries: BTreeMap<String, Entry>,
    /// Verified against when the name is unknown, so that both cases take as long: the
    /// costliest known user's hash (an unknown name never signs in, whatever matches).
    decoy: String,
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
        // An unknown name is verified against the costliest known hash: the same work, so its
        // answer takes as long (no user enumeration by timing); its answer is never a match.
        let decoy = entries
            .values()
            .max_by_key(|e| cost(&e.hash))
            .map(|e| e.hash.clone())
            .expect("at least one entry");
        Ok(Users { entries, decoy })
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
        let (entry, known) = match self.entries.get(name) {
            Some(entry) => (entry.hash.as_str(), true),
            None => (self.decoy.as_str(), false),
        };
        let hash = PasswordHash::new(entry).ok()?;
        let ok = Argon2::default()
            .verify_password(password.as_bytes(), &hash)
            .is_ok();
        (ok && known).then(|| User {
            name: name.to_owned(),
            role: self.entries[name].role,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The work a hash asks for (memory × passes × lanes), 0 when it cannot be read.
fn cost(hash: &str) -> u64 {
    PasswordHash::new(hash)
        .ok()
        .and_then(|h| argon2::Params::try_from(&h).ok())
        .map_or(0, |p| {
            u64::from(p.m_cost()) * u64::from(p.t_cost()) * u64::from(p.p_cost())
        })
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
        assert!(users.entries.values().any(|e| e.hash == users.decoy));
        assert!(users.verify("nobody", "pw").is_none());
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
