//! What the layout shows of the session, below the extractors and the error pages that fill it.

use crate::auth::User;

/// What the layout shows: who is signed in, the sign-out form's token, the current section.
#[derive(Debug, Clone)]
pub struct Nav {
    pub user: Option<User>,
    pub csrf: String,
    pub active: &'static str,
    /// Whether the sign-out button makes sense (not behind an authenticating proxy).
    pub can_sign_out: bool,
}

impl Nav {
    pub fn anonymous(csrf: String) -> Nav {
        Nav {
            user: None,
            csrf,
            active: "",
            can_sign_out: false,
        }
    }
}
