//! Who is signed in and what they may do: roles, password users, signed session cookies,
//! CSRF tokens, and the trusted-proxy-header mode.

pub mod csrf;
pub mod device;
pub mod keys;
pub mod oidc;
pub mod session;
pub mod throttle;
pub mod users;

/// What a signed-in person may do.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads accounts, audit and fleet pages.
    Viewer,
    /// Everything a viewer does, and force-stops streams and grants temporary limits.
    Support,
}

impl Role {
    pub fn label(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Support => "support",
        }
    }

    pub fn parse(text: &str) -> Option<Role> {
        match text.trim() {
            "viewer" => Some(Role::Viewer),
            "support" => Some(Role::Support),
            _ => None,
        }
    }
}

/// A signed-in person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub role: Role,
    /// The name shown, when it is not `name` (an identity provider's user: their name there).
    pub display: Option<String>,
}

impl User {
    /// The name the page shows.
    pub fn shown(&self) -> &str {
        self.display.as_deref().unwrap_or(&self.name)
    }

    pub fn can_force_stop(&self) -> bool {
        self.role >= Role::Support
    }

    /// Grant or remove an account's temporary limit override.
    pub fn can_change_limits(&self) -> bool {
        self.role >= Role::Support
    }
}
