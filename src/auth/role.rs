//! The role a token carries (SPEC 4.3): `admin` changes which status some not-found answers
//! have (3.6); any other role is an ordinary user's. It has no other effect anywhere.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Admin,
    /// What /register gives and what a token without a role claim has.
    User,
    /// Any other claim, kept as given. Never `admin` or `user` (every conversion maps those to
    /// their variants), so two roles are equal exactly when their texts are.
    Other(Box<str>),
}

impl Role {
    pub fn as_str(&self) -> &str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
            Role::Other(s) => s,
        }
    }

    pub fn is_admin(&self) -> bool {
        matches!(self, Role::Admin)
    }
}

// Exact text, as the claim is compared: `Admin` is not `admin`.
impl From<&str> for Role {
    fn from(s: &str) -> Role {
        match s {
            "admin" => Role::Admin,
            "user" => Role::User,
            _ => Role::Other(s.into()),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_the_exact_text_admin_is_the_admin() {
        assert!(Role::from("admin").is_admin());
        assert_eq!(Role::from("user"), Role::User);
        for s in ["Admin", "ADMIN", " admin", "administrator", "", "user "] {
            let r = Role::from(s);
            assert!(!r.is_admin(), "{s:?}");
            assert!(matches!(r, Role::Other(_)), "{s:?}");
        }
    }

    proptest! {
        #[test]
        fn any_role_reads_back_as_given(s in ".{0,100}") {
            let r = Role::from(s.as_str());
            prop_assert_eq!(r.as_str(), s.as_str());
            prop_assert_eq!(r.to_string(), s.clone());
            prop_assert_eq!(r.is_admin(), s == "admin");
        }
    }
}
