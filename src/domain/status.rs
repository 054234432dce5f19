//! An account's status (SPEC 2.3, 10.10): the three states the engine acts on, or any other label a
//! client chose, which is kept and shown exactly as given.

use super::text::{labelled_text, Text};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Active,
    Inactive,
    Closed,
    /// A custom label; it behaves like `Inactive` wherever 10.10 does not say otherwise. Never one
    /// of the three texts above (every conversion maps those to their variants), so two statuses
    /// are equal exactly when their texts are.
    Other(Text),
}

impl Status {
    /// The text it is stored and sent as.
    pub fn as_str(&self) -> &str {
        match self {
            Status::Active => "active",
            Status::Inactive => "inactive",
            Status::Closed => "closed",
            Status::Other(t) => t,
        }
    }

    fn known(s: &str) -> Option<Status> {
        match s {
            "active" => Some(Status::Active),
            "inactive" => Some(Status::Inactive),
            "closed" => Some(Status::Closed),
            _ => None,
        }
    }

    /// A status as a client asked for it (9.1, 7.1): the three canonical ones matched with ASCII
    /// case ignored, any other label verbatim.
    pub fn normalise(s: &str) -> Status {
        Status::known(&s.to_ascii_lowercase()).unwrap_or_else(|| Status::Other(Text::from(s)))
    }
}

// Built from its exact text ("Active" is a custom label, as it always was once stored); stored
// and sent exactly as its text is.
labelled_text!(Status);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trips(s: &str) -> Result<(), TestCaseError> {
        let st = Status::from(s);
        prop_assert_eq!(st.as_str(), s);
        crate::domain::text::label_round_trips::<Status>(s)
    }

    #[test]
    fn the_canonical_texts_are_their_variants_and_nothing_else_is() {
        assert_eq!(Status::from("active"), Status::Active);
        assert_eq!(Status::from("inactive"), Status::Inactive);
        assert_eq!(Status::from("closed".to_string()), Status::Closed);
        for s in ["Active", "CLOSED", " closed", "", "paused"] {
            assert!(matches!(Status::from(s), Status::Other(_)), "{s:?}");
            round_trips(s).unwrap();
        }
        for s in ["active", "inactive", "closed"] {
            round_trips(s).unwrap();
        }
        // No larger than the text it replaced in every account.
        assert_eq!(std::mem::size_of::<Status>(), std::mem::size_of::<Text>());
    }

    #[test]
    fn a_requested_status_is_canonical_whatever_its_case_and_other_labels_are_kept() {
        assert_eq!(Status::normalise("ACTIVE"), Status::Active);
        assert_eq!(Status::normalise("InActive"), Status::Inactive);
        assert_eq!(Status::normalise("closed"), Status::Closed);
        assert_eq!(Status::normalise("Nonsense").as_str(), "Nonsense");
        // Only ASCII case is ignored, as the stored-lowercase rule of 9.1 reads.
        assert_eq!(Status::normalise("actİve").as_str(), "actİve");
    }

    proptest! {
        #[test]
        fn any_label_is_stored_and_shown_as_given(s in ".{0,80}") {
            round_trips(&s)?;
            let lower = s.to_ascii_lowercase();
            let canonical = ["active", "inactive", "closed"].contains(&lower.as_str());
            let n = Status::normalise(&s);
            prop_assert_eq!(n.as_str(), if canonical { lower.as_str() } else { s.as_str() });
            prop_assert_eq!(matches!(n, Status::Other(_)), !canonical);
        }
    }
}
