//! The account tree of one user (SPEC 2) with its precomputed aggregates, and the pure read-only
//! questions asked of it (traversals 10.16, totals 10.12-10.13, range analytics 10.15).
//!
//! Every account carries, next to its own fields, the subtree totals (balance and amount due) and
//! per-day sums of the quantities the range queries need, so no read scans transaction history.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use super::days::{DayLedger, DaySums, TrackLog, TrackRow};
use super::frac::Frac;
use super::num::{div_round, fmt_scaled};
pub use super::status::Status;
pub use super::text::Text;

pub type AccountId = u128;

/// A map keyed by account id. Ids are random uuids the server made, and foldhash is seeded per
/// map, so a fast hash is safe here; SipHash was about 2 % of a deposit's CPU.
pub type IdMap<V> = HashMap<AccountId, V, foldhash::fast::RandomState>;

/// Deepest allowed account (main is depth 0), SPEC 14.2.
pub const MAX_DEPTH: usize = 8;
/// Children per account, SPEC 14.2.
pub const MAX_CHILDREN: usize = 100;
/// Accounts per tree including main, SPEC 14.2.
pub const MAX_ACCOUNTS: usize = 1000;
/// Allocation 1.0 in millionths.
pub const ALLOC_ONE: i64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    Main,
    Child,
    Grandchild,
}

impl Kind {
    pub fn wire(self) -> &'static str {
        match self {
            Kind::Main => "MainAccount",
            Kind::Child => "ChildAccount",
            Kind::Grandchild => "GrandchildAccount",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grand {
    pub due_date_secs: Option<i64>,
    pub fixed_amount_cents: i64,
    pub amount_due_cents: i64,
    pub account_type: Text,
    pub freq_days: Option<u32>,
    pub periods: Frac,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    pub uuid: AccountId,
    pub name: Text,
    pub kind: Kind,
    pub parent: Option<AccountId>,
    pub children: Vec<AccountId>,
    pub balance_cents: i64,
    /// 0 for main.
    pub allocation_ppm: i64,
    pub priority_ppm: i64,
    pub status: Status,
    pub grand: Option<Grand>,
    /// Number of records in this account's log (the next record's sequence number).
    pub log_len: u64,
    /// total_balance (10.12), kept current by every balance change.
    pub sub_balance_cents: i128,
    /// total_due (10.12), kept current by every amount_due change.
    pub sub_due_cents: i128,
    /// Per-day sums; stored as day rows of their own, not inside the account row.
    #[serde(skip)]
    pub days: DayLedger,
    /// Tracker rows (grandchild-kind only); stored as rows of their own.
    #[serde(skip)]
    pub track: TrackLog,
}

impl Account {
    /// A fresh account: no money, no log, no children. `grand` only for grandchild-kind.
    pub fn new(
        uuid: AccountId,
        name: Text,
        kind: Kind,
        parent: Option<AccountId>,
        grand: Option<Grand>,
    ) -> Account {
        let sub_due = grand.as_ref().map_or(0, |g| i128::from(g.amount_due_cents));
        Account {
            uuid,
            name,
            kind,
            parent,
            children: Vec::new(),
            balance_cents: 0,
            allocation_ppm: 0,
            priority_ppm: 0,
            status: Status::Active,
            grand,
            log_len: 0,
            sub_balance_cents: 0,
            sub_due_cents: sub_due,
            days: DayLedger::default(),
            track: TrackLog::default(),
        }
    }

    pub fn is_child_kind(&self) -> bool {
        self.kind != Kind::Main
    }
    pub fn own_due(&self) -> i64 {
        self.grand.as_ref().map_or(0, |g| g.amount_due_cents)
    }
}

/// Lifetime money totals used by the conservation invariant (SPEC 13.2 item 10).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub initial_balance_cents: i64,
    pub deposits_cents: i128,
    pub withdrawals_cents: i128,
}

impl Ledger {
    /// What the tree must hold: the initial balance, plus every deposit, minus every withdrawal.
    pub fn expected_total(&self) -> i128 {
        i128::from(self.initial_balance_cents) + self.deposits_cents - self.withdrawals_cents
    }
}

/// One user's tree. Accounts are shared copy-on-write so a mutation clones only what it touches.
#[derive(Debug, Clone)]
pub struct Tree {
    pub root: AccountId,
    pub accounts: IdMap<Arc<Account>>,
    pub ledger: Ledger,
    /// The key of the main account's generated ids, when the engine gives one (see
    /// [`super::txid`]); without it generated ids are random.
    pub id_key: Option<super::txid::IdKey>,
    /// The user's settings (import rules, saved CSV mappings), shared until one is written.
    pub docs: Arc<super::docs::Docs>,
}

/// `acc` + lowercase hyphenated uuid.
pub fn fmt_uuid(id: AccountId) -> String {
    format!("acc{}", uuid::Uuid::from_u128(id).hyphenated())
}

/// Inverse of [`fmt_uuid`]; unknown shapes simply are not found.
pub fn parse_uuid(s: &str) -> Option<AccountId> {
    let rest = s.strip_prefix("acc")?;
    if rest.len() != 36 {
        return None;
    }
    // Only the canonical form names an account: at 36 characters uuid parses nothing but the
    // hyphenated form, so canonical means lowercase. Of the characters that parse (digits,
    // hyphens, hex letters) only 'A'-'F' lack bit 0x20: one AND over the bytes tells.
    let u = uuid::Uuid::try_parse(rest).ok()?;
    (rest.bytes().fold(0x20, |all, c| all & c) & 0x20 != 0).then(|| u.as_u128())
}

impl Tree {
    /// A new user's tree: the main account `Main` holding the opening balance.
    pub fn new_user(root: AccountId, initial_balance_cents: i64) -> Tree {
        let mut main = Account::new(root, Text::Static("Main"), Kind::Main, None, None);
        main.balance_cents = initial_balance_cents;
        main.sub_balance_cents = i128::from(initial_balance_cents);
        Tree {
            root,
            accounts: [(root, Arc::new(main))].into_iter().collect(),
            ledger: Ledger { initial_balance_cents, deposits_cents: 0, withdrawals_cents: 0 },
            id_key: None,
            docs: Default::default(),
        }
    }

    pub fn get(&self, id: AccountId) -> Option<&Account> {
        self.accounts.get(&id).map(|a| a.as_ref())
    }

    pub fn by_uuid_str(&self, s: &str) -> Option<&Account> {
        parse_uuid(s).and_then(|id| self.get(id))
    }

    pub fn depth(&self, id: AccountId) -> usize {
        let mut d = 0;
        let mut cur = self.get(id).and_then(|a| a.parent);
        while let Some(p) = cur {
            d += 1;
            cur = self.get(p).and_then(|a| a.parent);
        }
        d
    }

    /// The names of `ids`, in order.
    pub fn names(&self, ids: &[AccountId]) -> Vec<&str> {
        ids.iter().filter_map(|c| self.get(*c)).map(|c| c.name.as_str()).collect()
    }

    /// Sum of the direct children's allocations (millionths), always exact (D7).
    pub fn total_allocation(&self, id: AccountId) -> i64 {
        self.get(id)
            .map(|a| a.children.iter().filter_map(|c| self.get(*c)).map(|c| c.allocation_ppm).sum())
            .unwrap_or(0)
    }

    /// Pre-order of the subtree of `id` (10.16).
    pub fn preorder(&self, id: AccountId) -> Vec<AccountId> {
        let mut out = Vec::new();
        self.preorder_into(id, &mut out);
        out
    }

    fn preorder_into(&self, id: AccountId, out: &mut Vec<AccountId>) {
        if let Some(a) = self.get(id) {
            out.push(id);
            for c in &a.children {
                self.preorder_into(*c, out);
            }
        }
    }

    /// list_all_accounts order (10.16): own subtree, then each ancestor and its other subtrees.
    pub fn list_all(&self, id: AccountId) -> Vec<AccountId> {
        let mut out = self.preorder(id);
        let mut cur = id;
        while let Some(p) = self.get(cur).and_then(|a| a.parent) {
            out.push(p);
            if let Some(pa) = self.get(p) {
                for c in pa.children.iter().filter(|c| **c != cur) {
                    self.preorder_into(*c, &mut out);
                }
            }
            cur = p;
        }
        out
    }

    pub fn path(&self, id: AccountId) -> String {
        let mut names = Vec::new();
        let mut cur = Some(id);
        while let Some(c) = cur {
            let Some(a) = self.get(c) else { break };
            if a.parent.is_some() {
                names.push(a.name.as_str());
            }
            cur = a.parent;
        }
        let mut p = String::from("main_account");
        for n in names.iter().rev() {
            p.push_str("$child_accounts$`");
            p.push_str(n);
            p.push('`');
        }
        p
    }

    /// Sums of the subtree's per-day aggregates over `[from_day, to_day]`, split into the
    /// account's own sums and the strict descendants' sums.
    pub fn range_sums(&self, id: AccountId, from_day: i64, to_day: i64) -> (DaySums, DaySums) {
        let mut own = DaySums::default();
        let mut desc = DaySums::default();
        for a in self.preorder(id).into_iter().filter_map(|x| self.get(x)) {
            let target = if a.uuid == id { &mut own } else { &mut desc };
            target.add(&a.days.range(from_day, to_day));
        }
        (own, desc)
    }

    /// walking_amount (10.15): latest tracker row inside the range of every grandchild-kind
    /// account of the subtree.
    pub fn walking(&self, id: AccountId, due: bool, from_day: i64, to_day: i64) -> i128 {
        self.preorder(id)
            .into_iter()
            .filter_map(|x| self.get(x))
            .filter(|a| a.kind == Kind::Grandchild)
            .filter_map(|a| a.track.latest(from_day, to_day))
            .map(|r| i128::from(if due { r.amount_due_cents } else { r.balance_cents }))
            .sum()
    }

    /// due_within (10.13): `days_micro` is N in millionths of a day.
    pub fn due_within(&self, id: AccountId, now_secs: i64, days_micro: i128) -> i128 {
        self.preorder(id)
            .into_iter()
            .filter_map(|x| self.get(x))
            .filter_map(|a| a.grand.as_ref())
            .filter(|g| match g.due_date_secs {
                Some(due) => {
                    let ahead = i128::from(due) - i128::from(now_secs);
                    ahead >= 0 && ahead * 1_000_000 <= days_micro * 86_400
                }
                None => false,
            })
            .map(|g| i128::from(g.amount_due_cents))
            .sum()
    }
}

/// The range answers of 10.15 for one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeFigures {
    pub spending_cents: i128,
    pub income_cents: i128,
    pub allocated_cents: i128,
}

impl RangeFigures {
    /// The 10.15 rules from an account's own sums and its strict descendants' sums.
    pub fn from_sums(own: &DaySums, desc: &DaySums) -> RangeFigures {
        RangeFigures {
            spending_cents: own.wd_user_cents + desc.wd_user_cents,
            income_cents: own.dep_user_cents + desc.dep_user_cents,
            allocated_cents: own.dep_all_cents + desc.dep_alloc_cents,
        }
    }
}

pub fn range_figures(tree: &Tree, id: AccountId, from_day: i64, to_day: i64) -> RangeFigures {
    let (own, desc) = tree.range_sums(id, from_day, to_day);
    RangeFigures::from_sums(&own, &desc)
}

/// income_utilization (10.15) as exact decimal text.
pub fn utilization_text(spending_cents: i128, allocated_cents: i128) -> String {
    if allocated_cents > 0 {
        fmt_scaled(div_round(spending_cents * 1_000_000, allocated_cents), 6)
    } else if spending_cents == 0 {
        "0".to_string()
    } else {
        // The reference divides by f64 epsilon (2^-52): S units * 2^52, exact in cents.
        fmt_scaled(spending_cents * 4_503_599_627_370_496, 2)
    }
}

/// Money conservation (SPEC 13.2 item 10) in O(1), cheap enough to run before every commit in
/// release builds too: the root's subtree balance, which every posting keeps current, against
/// `ledger`, the money in and out that the engine counts as it runs. Unlike
/// [`check_invariants`] it trusts the subtree aggregates instead of recomputing them (that walks
/// the whole tree).
pub fn check_ledger(tree: &Tree, ledger: &Ledger) -> Result<(), String> {
    let total = tree.get(tree.root).ok_or("root missing")?.sub_balance_cents;
    let expected = ledger.expected_total();
    if total != expected {
        return Err(format!(
            "the tree's total {total} is not what its ledger counts, {expected} ({ledger:?})"
        ));
    }
    Ok(())
}

/// Recomputes every aggregate from the accounts themselves and checks the invariants of SPEC
/// 13.2 item 10. Returns a description of the first violation.
pub fn check_invariants(tree: &Tree) -> Result<(), String> {
    let root = tree.get(tree.root).ok_or("root missing")?;
    if root.parent.is_some() || root.kind != Kind::Main {
        return Err("root shape".into());
    }
    let mut seen = 0usize;
    fn walk(t: &Tree, id: AccountId, depth: usize, seen: &mut usize) -> Result<(i128, i128), String> {
        let a = t.get(id).ok_or_else(|| format!("dangling child {id}"))?;
        *seen += 1;
        if depth > MAX_DEPTH {
            return Err("depth exceeded".into());
        }
        if a.balance_cents < 0 {
            return Err(format!("negative balance on {}", a.name));
        }
        let expected_kind = match depth {
            0 => Kind::Main,
            1 => Kind::Child,
            _ => Kind::Grandchild,
        };
        if a.kind != expected_kind || a.grand.is_some() != (a.kind == Kind::Grandchild) {
            return Err(format!("kind mismatch on {}", a.name));
        }
        let mut names = std::collections::HashSet::new();
        let mut alloc = 0i64;
        let mut bal = i128::from(a.balance_cents);
        let mut due = i128::from(a.own_due());
        for c in &a.children {
            let ca = t.get(*c).ok_or("dangling child")?;
            if ca.parent != Some(id) {
                return Err(format!("parent link broken under {}", a.name));
            }
            if !names.insert(ca.name.as_str()) {
                return Err(format!("duplicate child name {}", ca.name));
            }
            if !(0..=ALLOC_ONE).contains(&ca.allocation_ppm) {
                return Err("allocation out of range".into());
            }
            alloc += ca.allocation_ppm;
            let (b, d) = walk(t, *c, depth + 1, seen)?;
            bal += b;
            due += d;
        }
        if alloc > ALLOC_ONE {
            return Err(format!("allocations under {} exceed 1", a.name));
        }
        if bal != a.sub_balance_cents || due != a.sub_due_cents {
            return Err(format!("stale subtree aggregate on {}", a.name));
        }
        Ok((bal, due))
    }
    let (total, _) = walk(tree, tree.root, 0, &mut seen)?;
    if seen != tree.accounts.len() {
        return Err("unreachable accounts".into());
    }
    let l = &tree.ledger;
    if total != l.expected_total() {
        return Err(format!("money not conserved: {total} vs ledger {l:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_canonical_lowercase_uuid_names_an_account() {
        let id = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef_u128;
        let s = fmt_uuid(id);
        assert_eq!(s, "acc01234567-89ab-cdef-0123-456789abcdef");
        assert_eq!(parse_uuid(&s), Some(id));
        for other in [
            "acc01234567-89AB-cdef-0123-456789abcdef",
            "acc0123456789abcdef0123456789abcdef",
            "acc0123456789ab-cdef-0123-4567-89abcdef",
            "acc01234567+89ab-cdef-0123-456789abcdef",
            "acc{01234567-89ab-cdef-0123-456789abcdef}",
            "01234567-89ab-cdef-0123-456789abcdef",
            "acc01234567-89ab-cdef-0123-456789abcdeg",
            "",
        ] {
            assert_eq!(parse_uuid(other), None, "{other}");
        }
    }

    #[test]
    fn the_ledger_check_compares_the_root_total_with_money_in_and_out() {
        let mut t = Tree::new_user(1, 500);
        assert_eq!(check_ledger(&t, &t.ledger.clone()), Ok(()));
        // Money in that no account holds.
        let ledger = Ledger { deposits_cents: 100, ..t.ledger.clone() };
        assert!(check_ledger(&t, &ledger).is_err());
        // Money an account holds that never came in.
        let main = Arc::make_mut(t.accounts.get_mut(&1).unwrap());
        main.balance_cents += 100;
        main.sub_balance_cents += 100;
        assert!(check_ledger(&t, &t.ledger.clone()).unwrap_err().contains("not what its ledger counts"));
        assert_eq!(check_ledger(&t, &ledger), Ok(()));
        // It trusts the aggregates: a stale one is for the full check to find.
        Arc::make_mut(t.accounts.get_mut(&1).unwrap()).balance_cents -= 100;
        assert_eq!(check_ledger(&t, &ledger), Ok(()));
        t.ledger = ledger;
        assert!(check_invariants(&t).is_err());
    }

    proptest::proptest! {
        /// Any case change of a letter in an account's uuid makes it name no account.
        #[test]
        fn a_uuid_with_any_uppercase_letter_names_nothing(id: u128, flips: u64) {
            let s = fmt_uuid(id);
            proptest::prop_assert_eq!(parse_uuid(&s), Some(id));
            let mut b = s.into_bytes();
            let mut flipped = false;
            for (i, c) in b.iter_mut().enumerate().skip(3) {
                if c.is_ascii_lowercase() && flips >> (i % 64) & 1 == 1 {
                    *c = c.to_ascii_uppercase();
                    flipped = true;
                }
            }
            let s = String::from_utf8(b).unwrap();
            proptest::prop_assert_eq!(parse_uuid(&s), (!flipped).then_some(id), "{}", s);
        }
    }
}
