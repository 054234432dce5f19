//! Who started a posting (a record's `By`, SPEC 2.6): `User`, `System`, or any label a client passed
//! as `initiated_by`, kept and shown exactly as given. Analytics count `User` and `System` (10.15).

use super::text::{labelled_text, Text};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    User,
    System,
    /// Any other label. Never `User` or `System` (every conversion maps those to their variants),
    /// so two origins are equal exactly when their texts are.
    Other(Text),
}

impl Origin {
    /// The text it is stored and sent as.
    pub fn as_str(&self) -> &str {
        match self {
            Origin::User => "User",
            Origin::System => "System",
            Origin::Other(t) => t,
        }
    }

    fn known(s: &str) -> Option<Origin> {
        match s {
            "User" => Some(Origin::User),
            "System" => Some(Origin::System),
            _ => None,
        }
    }
}

// Built from its exact text (`user` is a label of its own: 10.15 counts only `User`); stored and
// sent exactly as its text is.
labelled_text!(Origin);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trips(s: &str) -> Result<(), TestCaseError> {
        let o = Origin::from(s);
        prop_assert_eq!(o.as_str(), s);
        crate::domain::text::label_round_trips::<Origin>(s)
    }

    #[test]
    fn user_and_system_are_their_variants_and_nothing_else_is() {
        assert_eq!(Origin::from("User"), Origin::User);
        assert_eq!(Origin::from("System".to_string()), Origin::System);
        for s in ["user", "SYSTEM", "User ", "", "Payroll"] {
            assert!(matches!(Origin::from(s), Origin::Other(_)), "{s:?}");
            round_trips(s).unwrap();
        }
        round_trips("User").unwrap();
        round_trips("System").unwrap();
        // No larger than the text it replaced in every record.
        assert_eq!(std::mem::size_of::<Origin>(), std::mem::size_of::<Text>());
    }

    proptest! {
        #[test]
        fn any_label_is_stored_and_shown_as_given(s in ".{0,64}") {
            round_trips(&s)?;
            prop_assert_eq!(matches!(Origin::from(s.as_str()), Origin::Other(_)), s != "User" && s != "System");
        }
    }
}
