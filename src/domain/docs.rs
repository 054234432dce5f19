//! A user's settings beside the tree, each stored under a key of its own and written in the
//! same atomic operation as any change of the tree: the import rules, and the CSV mappings
//! saved by name (docs/import.md).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::text::Text;
use super::tree::AccountId;

/// One stored setting. New kinds are added at the end: the variant's place is its stored tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Doc {
    Rules(Rules),
    /// A CSV mapping as the client sent it (JSON text, checked when saved).
    CsvMapping(Text),
    /// A scheduled transaction with the state of its occurrences.
    Schedule(super::schedule::Schedule),
    /// A counter (the next id of a kind of setting).
    Counter(u64),
    /// A personal access token (docs/tokens.md).
    Token(super::token::AccessToken),
    /// A webhook (`domain::events`).
    Webhook(super::events::Webhook),
    /// One event for one webhook, waiting or finished.
    Delivery(super::events::Delivery),
}

/// A user's settings by key.
pub type Docs = BTreeMap<Text, Arc<Doc>>;

/// The settings whose keys start with `prefix`, in key order: one range of the map, not a scan
/// of every setting. (A `&'static str` prefix costs no allocation; an owned one is kept.)
pub fn with_prefix<'a, P: AsRef<str> + 'a>(
    docs: &'a Docs,
    prefix: P,
) -> impl Iterator<Item = (&'a Text, &'a Arc<Doc>)> + 'a {
    docs.range::<str, _>((std::ops::Bound::Included(prefix.as_ref()), std::ops::Bound::Unbounded))
        .take_while(move |(k, _)| k.starts_with(prefix.as_ref()))
}

/// The key of the import rules.
pub const RULES_KEY: &str = "rules";
/// Rules one user may keep; a statement line is tested against each in turn.
pub const MAX_RULES: usize = 500;
/// CSV mappings one user may save.
pub const MAX_MAPPINGS: usize = 100;

/// The key of the CSV mapping saved as `name`.
pub fn mapping_key(name: &str) -> Text {
    Text::from(format!("csv:{name}"))
}

/// The name of a mapping's key, for keys that are mappings'.
pub fn mapping_name(key: &str) -> Option<&str> {
    key.strip_prefix("csv:")
}

/// Which text of a line a rule reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Field {
    Payee,
    Memo,
    /// Either the payee or the memo.
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Match {
    Equals,
    Contains,
    StartsWith,
}

/// Which lines a rule may choose for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Applies {
    Withdrawals,
    Deposits,
    Both,
}

macro_rules! names {
    ($t:ty: $($v:ident = $s:literal),+) => {
        impl $t {
            pub const NAMES: &'static [&'static str] = &[$($s),+];
            pub fn name(self) -> &'static str {
                match self { $(Self::$v => $s),+ }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($s => Some(Self::$v),)+ _ => None }
            }
        }
    };
}
pub(crate) use names;

names!(Field: Payee = "payee", Memo = "memo", Any = "payee_or_memo");
names!(Match: Equals = "equals", Contains = "contains", StartsWith = "starts_with");
names!(Applies: Withdrawals = "withdrawals", Deposits = "deposits", Both = "both");

/// A condition on a line's text; compared without regard to case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextTest {
    pub field: Field,
    pub op: Match,
    pub value: Text,
}

/// One rule: when a line passes every condition it has, the line goes to `envelope`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub id: u64,
    pub text: Option<TextTest>,
    /// Bounds on the line's amount without its sign, in cents, both inclusive.
    pub min_cents: Option<i64>,
    pub max_cents: Option<i64>,
    pub applies: Applies,
    pub envelope: AccountId,
}

/// A user's ordered rules: the first that matches a line chooses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rules {
    /// The id the next rule gets: ids are never reused, so a client's id never names another
    /// rule later.
    pub next_id: u64,
    pub list: Vec<Rule>,
}

/// Rules ready to test many lines: their texts lowercased once.
pub struct Matcher<'a> {
    rules: Vec<(&'a Rule, Option<String>)>,
}

impl Rules {
    pub fn matcher(&self) -> Matcher<'_> {
        Matcher {
            rules: self.list.iter().map(|r| (r, r.text.as_ref().map(|t| t.value.to_lowercase()))).collect(),
        }
    }

    pub fn position(&self, id: u64) -> Option<usize> {
        self.list.iter().position(|r| r.id == id)
    }
}

impl Matcher<'_> {
    /// The first rule that matches a line of `amount_cents` (signed: below zero is money out)
    /// with this payee and memo.
    pub fn choose(&self, payee: Option<&str>, memo: Option<&str>, amount_cents: i64) -> Option<&Rule> {
        if self.rules.is_empty() {
            return None;
        }
        let payee = payee.map(str::to_lowercase);
        let memo = memo.map(str::to_lowercase);
        let size = amount_cents.unsigned_abs();
        self.rules
            .iter()
            .find(|(r, value)| {
                let direction = match r.applies {
                    Applies::Withdrawals => amount_cents < 0,
                    Applies::Deposits => amount_cents > 0,
                    Applies::Both => amount_cents != 0,
                };
                let fits = |t: &Option<String>, op: Match, v: &str| match (t, op) {
                    (None, _) => false,
                    (Some(t), Match::Equals) => t.trim() == v.trim(),
                    (Some(t), Match::Contains) => t.contains(v),
                    (Some(t), Match::StartsWith) => t.trim_start().starts_with(v),
                };
                let text = match (&r.text, value) {
                    (Some(t), Some(v)) => match t.field {
                        Field::Payee => fits(&payee, t.op, v),
                        Field::Memo => fits(&memo, t.op, v),
                        Field::Any => fits(&payee, t.op, v) || fits(&memo, t.op, v),
                    },
                    _ => true,
                };
                direction
                    && text
                    && r.min_cents.is_none_or(|m| size >= m.unsigned_abs())
                    && r.max_cents.is_none_or(|m| size <= m.unsigned_abs())
            })
            .map(|(r, _)| *r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(
        id: u64,
        text: Option<(Field, Match, &str)>,
        min: Option<i64>,
        max: Option<i64>,
        applies: Applies,
    ) -> Rule {
        Rule {
            id,
            text: text.map(|(field, op, v)| TextTest { field, op, value: v.into() }),
            min_cents: min,
            max_cents: max,
            applies,
            envelope: u128::from(id),
        }
    }

    #[test]
    fn the_first_matching_rule_chooses_and_case_is_ignored() {
        let rules = Rules {
            next_id: 5,
            list: vec![
                rule(1, Some((Field::Payee, Match::Equals, "ACME Power")), None, None, Applies::Withdrawals),
                rule(
                    2,
                    Some((Field::Memo, Match::Contains, "rent")),
                    Some(50_000),
                    None,
                    Applies::Withdrawals,
                ),
                rule(3, Some((Field::Any, Match::StartsWith, "salary")), None, None, Applies::Deposits),
                rule(4, None, None, Some(500), Applies::Both),
            ],
        };
        let m = rules.matcher();
        let id = |p: Option<&str>, memo: Option<&str>, a: i64| m.choose(p, memo, a).map(|r| r.id);
        assert_eq!(id(Some("acme power"), None, -4_000), Some(1));
        // Rule 1 reads withdrawals only, and a refund of 40.00 is over rule 4's ceiling.
        assert_eq!(id(Some("ACME POWER"), None, 4_000), None);
        assert_eq!(id(Some("Landlord"), Some("March RENT"), -80_000), Some(2));
        // Under the amount floor, rule 2 does not match; nothing else does either.
        assert_eq!(id(Some("Landlord"), Some("March RENT"), -40_000), None);
        assert_eq!(id(None, Some("SALARY NOV"), 250_000), Some(3));
        assert_eq!(id(Some("Kiosk"), None, -450), Some(4));
        assert_eq!(id(Some("Kiosk"), None, 450), Some(4));
        assert_eq!(id(Some("Kiosk"), None, 0), None);
        assert_eq!(id(None, None, -501), None);
    }
}
