//! The money engine of SPEC 10: ledger primitives, deposit, split, capping and surplus return,
//! rollover, withdrawals, transfers, distribution, deletion. Pure: it mutates a working copy of
//! a [`Tree`] and collects the new transaction records; the caller commits or discards both.

use std::sync::Arc;

use super::dates::{day_of, DAY_SECS};
use super::docs::Doc;
use super::note::Note;
pub use super::origin::Origin;
use super::text::Text;
use super::tree::{Account, AccountId, DaySums, Kind, Ledger, Status, TrackRow, Tree};

/// One transaction record (SPEC 2.6).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TxRecord {
    pub deposit: bool,
    pub by: Origin,
    pub id: Text,
    pub channel: Text,
    pub amount_cents: i64,
    pub balance_cents: i64,
    pub amount_due_cents: i128,
    pub overall_balance_cents: i128,
    pub date_secs: i64,
    /// Payee, memo and import id, for a record made from a statement line. Stored in a row of
    /// its own beside the record (`Change::notes`), so a record's row is what it always was.
    #[serde(skip)]
    pub note: Option<Arc<Note>>,
}

impl TxRecord {
    /// Whether the index of transaction ids holds this record's id, in an account of a tree
    /// whose main account is `root`: every id of the main account's log (SPEC D28), and the id
    /// of a record made from outside (a statement line, a schedule's occurrence), whatever its
    /// account, which must never be applied twice.
    pub fn indexed(&self, acc: AccountId, root: AccountId) -> bool {
        acc == root || self.note.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpError {
    /// A child-kind target is not `active` (deposit 12, move_balance 11).
    NotActive,
    /// A stored value would leave signed 64-bit cents (14.3).
    TooLarge,
    /// An id that must exist does not: a bug, answered as 500.
    Internal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    External,
    Transfer,
    Share,
    Surplus,
}

/// The terms of one posting: how much, who started it, through which channel, under which id,
/// dated when. Every money primitive takes one, so their arguments cannot be swapped; it borrows
/// its texts, so passing one down a split copies a few words and allocates nothing.
#[derive(Debug, Clone, Copy)]
pub struct Posting<'a> {
    pub amount_cents: i64,
    pub by: &'a Origin,
    pub channel: &'a Text,
    /// The client's or the split's id; `None` has the record generate one (10.2).
    pub txid: Option<&'a Text>,
    pub date_secs: i64,
    /// Carried by the record of the account posted to, never by a split's records.
    pub note: Option<&'a Arc<Note>>,
}

impl<'a> Posting<'a> {
    /// A posting the engine makes on its own (10.2): by `System`, generated id.
    pub fn system(amount_cents: i64, channel: &'a Text, date_secs: i64) -> Posting<'a> {
        Posting { amount_cents, by: &Origin::System, channel, txid: None, date_secs, note: None }
    }

    /// The same terms for another amount.
    pub fn with_amount(self, amount_cents: i64) -> Posting<'a> {
        Posting { amount_cents, ..self }
    }
}

pub const CH_SPLIT: Text = Text::Static("Allocation to child accounts");
pub const CH_UP: Text = Text::Static("Returned Extra Allocation-up");
pub const CH_DOWN: Text = Text::Static("Returned Extra Allocation-down");
pub const CH_TRANSFER: Text = Text::Static("Internal Transfer");

/// Whether `hay` contains `needle`, ASCII case ignored (a deposit's split credits test their
/// channel this way, so without building a lowercase copy).
fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    needle.is_empty()
        || hay.as_bytes().windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// `SYS` + 10 uppercase hex characters, random (10.2).
pub fn generate_id() -> Text {
    let r = uuid::Uuid::new_v4().into_bytes();
    super::txid::sys_id(u64::from_be_bytes([0, 0, 0, r[0], r[1], r[2], r[3], r[4]]))
}

/// A mutation in progress: the working tree, the clock reading and everything written so far.
pub struct Ctx<'a> {
    pub tree: &'a mut Tree,
    pub now_secs: i64,
    /// New records in creation order, with the account they belong to and their sequence
    /// number in its log (so the change takes this list as it is).
    pub records: Vec<(AccountId, u64, TxRecord)>,
    /// Accounts whose stored form changed.
    dirty: Touched<AccountId>,
    /// Day rows written: (account, day).
    days: Touched<(AccountId, i64)>,
    /// Tracker rows written: (account, day).
    track_days: Touched<(AccountId, i64)>,
    /// Accounts removed, with the length of their logs.
    removed: Vec<(AccountId, u64)>,
    /// Settings written (`None`: removed), by key, last write last.
    docs: Vec<(Text, Option<Arc<Doc>>)>,
    /// Ids indexed without a record of their own (see [`Ctx::claim_id`]).
    claimed: Vec<Text>,
    /// Whether [`Ctx::finish`] writes the wake time whatever was written (see
    /// [`Ctx::refresh_wake`]).
    refresh_wake: bool,
    /// While the user has a live webhook: each account this mutation touched, as it was.
    before: Option<Box<super::events::Before>>,
}

/// Keys an operation touched, in any order and repeated (an account is touched by each of its
/// postings and by every balance bubbling through it): sorted and deduplicated once, at the end.
/// Why not a `BTreeSet`: a deposit touches a handful of keys a dozen times, and each touch was a
/// search of an allocated tree (about 650 instructions per deposit).
#[derive(Debug)]
struct Touched<T>(Vec<T>);

impl<T> Default for Touched<T> {
    fn default() -> Self {
        Touched(Vec::new())
    }
}

impl<T: Ord + Copy> Touched<T> {
    fn insert(&mut self, t: T) {
        if self.0.last() != Some(&t) {
            self.0.push(t);
        }
    }

    fn retain(&mut self, f: impl FnMut(&T) -> bool) {
        self.0.retain(f);
    }

    fn sorted(mut self) -> Vec<T> {
        self.0.sort_unstable();
        self.0.dedup();
        self.0
    }
}

/// Everything one mutation changed, in domain terms: what a storage engine commits atomically.
/// Values are absolute (the state after the mutation), so applying a change twice is harmless.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Change {
    /// Accounts created or changed, in their new state.
    pub accounts: Vec<Arc<Account>>,
    /// Accounts removed, with their log lengths (their log rows are deleted by computed keys).
    pub removed: Vec<(AccountId, u64)>,
    /// New log records: account, sequence number in that account's log, record.
    pub records: Vec<(AccountId, u64, TxRecord)>,
    /// Day rows written, with their new sums.
    pub days: Vec<(AccountId, i64, DaySums)>,
    /// Tracker rows written.
    pub track: Vec<(AccountId, i64, TrackRow)>,
    /// The lifetime ledger after the change (SPEC 13.2 item 10).
    pub ledger: Ledger,
    /// Transaction ids newly present in the main account's log (the /deposit 409 index), and
    /// the ids of records with a note in any account (so a statement line or a schedule's
    /// occurrence is never applied twice).
    pub main_txids: Vec<Text>,
    /// Notes of the new records that carry one: account, sequence number, note.
    pub notes: Vec<(AccountId, u64, Arc<Note>)>,
    /// Settings written, in their new state (`None`: removed).
    pub docs: Vec<(Text, Option<Arc<Doc>>)>,
    /// When the user next needs the service: a scheduled occurrence, a webhook delivery or a
    /// Bill's notice (seconds), when it changed (`Some(None)`: nothing left to do).
    pub wake: Option<Option<i64>>,
}

impl<'a> Ctx<'a> {
    pub fn new(tree: &'a mut Tree, now_secs: i64) -> Self {
        let before = super::events::listening(&tree.docs).then(Box::default);
        Ctx {
            tree,
            now_secs,
            records: Vec::new(),
            dirty: Touched::default(),
            days: Touched::default(),
            track_days: Touched::default(),
            removed: Vec::new(),
            docs: Vec::new(),
            claimed: Vec::new(),
            refresh_wake: false,
            before,
        }
    }

    /// Has [`Ctx::finish`] write when the user next needs the service, for the index every
    /// node's waker reads, even if nothing that moves it was written (a waker's visit corrects
    /// an index entry that was early).
    pub fn refresh_wake(&mut self) {
        self.refresh_wake = true;
    }

    /// The next id of a kind of setting, from its counter under `key` (ids start at 1 and are
    /// never reused); the counter moves in this mutation.
    pub fn next_id(&mut self, key: &'static str) -> u64 {
        let id = match self.tree.docs.get(key).map(|d| &**d) {
            Some(Doc::Counter(n)) => *n,
            _ => 1,
        };
        self.set_doc(Text::Static(key), Some(Doc::Counter(id + 1)));
        id
    }

    /// Puts `id` in the transaction-id index without a record: a statement line matched to a
    /// transaction already there is then a duplicate the next time it is imported.
    pub fn claim_id(&mut self, id: Text) {
        self.claimed.push(id);
    }

    /// Writes the setting under `key` (`None` removes it), in the tree and in the change.
    pub fn set_doc(&mut self, key: Text, doc: Option<Doc>) {
        let doc = doc.map(Arc::new);
        let docs = Arc::make_mut(&mut self.tree.docs);
        match &doc {
            Some(d) => _ = docs.insert(key.clone(), d.clone()),
            None => _ = docs.remove(key.as_str()),
        }
        self.docs.retain(|(k, _)| *k != key);
        self.docs.push((key, doc));
    }

    /// Keeps `id` as it is now, the first time this mutation touches it, while events are
    /// watched for.
    fn saw(&mut self, id: AccountId) {
        if let Some(b) = &mut self.before {
            b.0.entry(id).or_insert_with(|| self.tree.accounts.get(&id).cloned());
        }
    }

    /// The events of this mutation, as deliveries to each webhook that wants them, written with
    /// it (the wake time, which they move, is written after them, in [`Ctx::finish`]).
    fn emit(&mut self) {
        let Some(before) = self.before.take() else { return };
        let events = super::events::of_write(self.tree, &before, &self.records, self.now_secs);
        for (k, d) in super::events::deliveries_for(&self.tree.docs, events, self.now_secs) {
            self.set_doc(k, Some(d));
        }
    }

    /// Everything this mutation changed, read from the working tree.
    pub fn finish(mut self) -> Change {
        let listening = self.before.is_some();
        self.emit();
        // The wake time follows the settings that decide it, whoever wrote them, and after this
        // mutation's own deliveries.
        let wake = (listening || self.refresh_wake || self.docs.iter().any(|(k, _)| super::wake::moves(k)))
            .then(|| super::wake::next(self.tree, self.now_secs));
        let t = &*self.tree;
        // Records of accounts deleted later in the operation are dropped with them.
        let mut records = self.records;
        records.retain(|(acc, _, _)| t.get(*acc).is_some());
        let mut main_txids = Vec::new();
        // A split's debit of main carries the credit's id: index each id once, in record order
        // (a set, as an import makes thousands of ids in one operation).
        let mut seen = std::collections::HashSet::new();
        let mut notes = Vec::new();
        for (acc, seq, rec) in &records {
            if rec.indexed(*acc, t.root) && seen.insert(rec.id.as_str()) {
                main_txids.push(rec.id.clone());
            }
            if let Some(n) = &rec.note {
                notes.push((*acc, *seq, n.clone()));
            }
        }
        for id in &self.claimed {
            if seen.insert(id.as_str()) {
                main_txids.push(id.clone());
            }
        }
        Change {
            accounts: self.dirty.sorted().iter().filter_map(|id| t.accounts.get(id).cloned()).collect(),
            removed: self.removed,
            records,
            days: self
                .days
                .sorted()
                .iter()
                .filter_map(|(a, d)| t.get(*a).map(|x| (*a, *d, x.days.day(*d))))
                .collect(),
            track: self
                .track_days
                .sorted()
                .iter()
                .filter_map(|(a, d)| t.get(*a).and_then(|x| x.track.latest(*d, *d)).map(|r| (*a, *d, r)))
                .collect(),
            ledger: t.ledger.clone(),
            main_txids,
            notes,
            docs: self.docs,
            wake,
        }
    }

    pub fn acc(&self, id: AccountId) -> Result<&Account, OpError> {
        self.tree.get(id).ok_or(OpError::Internal)
    }

    pub fn acc_mut(&mut self, id: AccountId) -> Result<&mut Account, OpError> {
        self.dirty.insert(id);
        self.saw(id);
        self.tree.accounts.get_mut(&id).map(Arc::make_mut).ok_or(OpError::Internal)
    }

    /// Adds the deltas to the subtree balance and subtree amount due of `id` and all its
    /// ancestors, keeping the 10.12 totals current without recomputing them.
    fn bubble(&mut self, id: AccountId, balance_delta: i128, due_delta: i128) -> Result<(), OpError> {
        let mut cur = Some(id);
        while let Some(c) = cur {
            let a = self.acc_mut(c)?;
            a.sub_balance_cents += balance_delta;
            a.sub_due_cents += due_delta;
            cur = a.parent;
        }
        Ok(())
    }

    pub fn set_amount_due(&mut self, id: AccountId, amount_due_cents: i64) -> Result<(), OpError> {
        let a = self.acc_mut(id)?;
        let g = a.grand.as_mut().ok_or(OpError::Internal)?;
        let delta = i128::from(amount_due_cents) - i128::from(g.amount_due_cents);
        g.amount_due_cents = amount_due_cents;
        if delta != 0 {
            self.bubble(id, 0, delta)?;
        }
        Ok(())
    }

    /// A generated id for the next record of `x`: derived from its sequence number in the main
    /// account's log when the tree has a key (so it needs no index row), random otherwise.
    fn new_id(&self, x: AccountId) -> Result<Text, OpError> {
        if x == self.tree.root {
            if let Some(k) = &self.tree.id_key {
                if let Some(id) = k.id(self.acc(x)?.log_len) {
                    return Ok(id);
                }
            }
        }
        Ok(generate_id())
    }

    /// The ledger primitives CREDIT and DEBIT (10.1). Returns the id written.
    fn post(&mut self, x: AccountId, deposit: bool, p: Posting<'_>) -> Result<Text, OpError> {
        let Posting { amount_cents: a, by, channel, txid, date_secs: date, note } = p;
        if a <= 0 {
            return Err(OpError::Internal);
        }
        let id = match txid {
            Some(id) => id.clone(),
            None => self.new_id(x)?,
        };
        let acc = self.acc_mut(x)?;
        acc.balance_cents =
            if deposit { acc.balance_cents.checked_add(a) } else { acc.balance_cents.checked_sub(a) }
                .ok_or(OpError::TooLarge)?;
        if acc.balance_cents < 0 {
            return Err(OpError::Internal);
        }
        let amt = i128::from(a);
        let mut sums = DaySums::default();
        if deposit {
            sums.dep_all_cents = amt;
            if *by == Origin::User {
                sums.dep_user_cents = amt;
            }
            if *by == Origin::User
                || (*by == Origin::System && contains_ignore_case(channel, "returned extra allocation-up"))
            {
                sums.dep_alloc_cents = amt;
            }
        } else if *by == Origin::User {
            sums.wd_user_cents = amt;
        }
        acc.days.add(day_of(date), &sums);
        let seq = acc.log_len;
        acc.log_len += 1;
        self.days.insert((x, day_of(date)));
        self.bubble(x, if deposit { amt } else { -amt }, 0)?;
        let acc = self.acc(x)?;
        let rec = TxRecord {
            deposit,
            by: by.clone(),
            id: id.clone(),
            channel: channel.clone(),
            amount_cents: a,
            balance_cents: acc.balance_cents,
            amount_due_cents: acc.sub_due_cents,
            overall_balance_cents: acc.sub_balance_cents,
            date_secs: date,
            note: note.cloned(),
        };
        self.records.push((x, seq, rec));
        Ok(id)
    }

    pub fn credit(&mut self, x: AccountId, p: Posting<'_>) -> Result<Text, OpError> {
        self.post(x, true, p)
    }

    pub fn debit(&mut self, x: AccountId, p: Posting<'_>) -> Result<Text, OpError> {
        self.post(x, false, p)
    }

    /// TRACK(G): the latest row of the wall-clock day replaces earlier rows of that day, since
    /// only the latest row inside a range is ever read.
    fn track(&mut self, g: AccountId) -> Result<(), OpError> {
        let day = day_of(self.now_secs);
        let a = self.acc_mut(g)?;
        let row = TrackRow { amount_due_cents: a.own_due(), balance_cents: a.balance_cents };
        a.track.insert(day, row);
        self.track_days.insert((g, day));
        Ok(())
    }

    /// need(G) = target(periods, fixed) - balance (10.1).
    pub fn need(&self, g: AccountId) -> Result<i64, OpError> {
        let a = self.acc(g)?;
        let gr = a.grand.as_ref().ok_or(OpError::Internal)?;
        let need = gr.periods.times_round(gr.fixed_amount_cents) - i128::from(a.balance_cents);
        i64::try_from(need).map_err(|_| OpError::TooLarge)
    }

    /// ROLLOVER(G, d) of 10.6 (catch-up of every missed period, D12).
    pub fn rollover(&mut self, g: AccountId, date_secs: i64) -> Result<(), OpError> {
        let a = self.acc(g)?;
        let Some(gr) = a.grand.as_ref() else { return Ok(()) };
        let (Some(due), Some(freq)) = (gr.due_date_secs, gr.freq_days) else {
            return Ok(());
        };
        if gr.account_type != "Bill" || freq < 1 || date_secs <= due {
            return Ok(());
        }
        let period = i64::from(freq) * DAY_SECS;
        let k = (date_secs - due + period - 1) / period;
        let new_due = due.checked_add(k.checked_mul(period).ok_or(OpError::TooLarge)?);
        let new_periods = gr.periods.add_int(k).ok_or(OpError::TooLarge)?;
        let fixed = gr.fixed_amount_cents;
        let a = self.acc_mut(g)?;
        if a.status != Status::Closed {
            a.status = Status::Active;
        }
        let gr = a.grand.as_mut().ok_or(OpError::Internal)?;
        gr.due_date_secs = Some(new_due.ok_or(OpError::TooLarge)?);
        gr.periods = new_periods;
        if fixed > 0 {
            let n = self.need(g)?;
            self.set_amount_due(g, n)?;
        }
        Ok(())
    }

    /// DEPOSIT(X, a, id, by, channel, d, mode) of 10.3, the terms in `p`.
    pub fn deposit(&mut self, x: AccountId, p: Posting<'_>, mode: Mode) -> Result<(), OpError> {
        let (a, d) = (p.amount_cents, p.date_secs);
        let kind = self.acc(x)?.kind;
        if mode == Mode::External {
            // Money entering the tree from outside: the conservation ledger counts it here, so no
            // caller can forget to.
            self.tree.ledger.deposits_cents += i128::from(a);
        }
        let checks_status = matches!(mode, Mode::External | Mode::Transfer);
        match kind {
            Kind::Main => self.credit_and_split(x, p, mode),
            Kind::Child => {
                if checks_status && self.acc(x)?.status != Status::Active {
                    return Err(OpError::NotActive);
                }
                self.credit_and_split(x, p, mode)
            }
            Kind::Grandchild => {
                self.rollover(x, d)?;
                if checks_status && self.acc(x)?.status != Status::Active {
                    return Err(OpError::NotActive);
                }
                let fixed = self.acc(x)?.grand.as_ref().map_or(0, |g| g.fixed_amount_cents);
                let need = if fixed > 0 { self.need(x)? } else { 0 };
                if fixed > 0 && a >= need {
                    let c = need.max(0);
                    if c > 0 {
                        self.credit_and_split(x, p.with_amount(c), mode)?;
                    }
                    let acc = self.acc_mut(x)?;
                    if acc.status != Status::Closed {
                        acc.status = Status::Inactive;
                    }
                    self.set_amount_due(x, 0)?;
                    let s = a - c;
                    if s > 0 {
                        let parent = self.acc(x)?.parent.ok_or(OpError::Internal)?;
                        self.return_surplus(parent, s, p.by)?;
                    }
                    self.track(x)
                } else {
                    self.credit_and_split(x, p, mode)?;
                    if fixed > 0 {
                        let n = self.need(x)?;
                        self.set_amount_due(x, n)?;
                    }
                    self.track(x)
                }
            }
        }
    }

    /// CREDIT, then SPLIT of the same amount unless the credit is a surplus return (10.3). The
    /// split always runs as `System` and carries the credit's id (the generated one if none).
    fn credit_and_split(&mut self, x: AccountId, p: Posting<'_>, mode: Mode) -> Result<(), OpError> {
        let used = self.credit(x, p)?;
        if mode != Mode::Surplus {
            self.split(x, p.amount_cents, Some(&used), &Origin::System)?;
        }
        Ok(())
    }

    /// RETURN_SURPLUS(Q, s, origin_by) of 10.5.
    fn return_surplus(&mut self, q: AccountId, s: i64, origin_by: &Origin) -> Result<(), OpError> {
        let channel = if *origin_by == Origin::User { CH_UP } else { CH_DOWN };
        let now = self.now_secs;
        match self.acc(q)?.kind {
            Kind::Child => self.credit(q, Posting::system(s, &channel, now)).map(|_| ()),
            Kind::Grandchild => self.deposit(q, Posting::system(s, &channel, now), Mode::Surplus),
            Kind::Main => Err(OpError::Internal),
        }
    }

    /// Step 2 of SPLIT: roll every grandchild-kind child over at `now`.
    pub fn rollover_children(&mut self, p: AccountId) -> Result<(), OpError> {
        let children = self.acc(p)?.children.clone();
        let now = self.now_secs;
        for c in children {
            if self.acc(c)?.kind == Kind::Grandchild {
                self.rollover(c, now)?;
            }
        }
        Ok(())
    }

    /// Active children sorted by priority, highest first, insertion order among equals.
    pub fn active_children(&self, p: AccountId) -> Result<Vec<AccountId>, OpError> {
        let mut e: Vec<(i64, AccountId)> = Vec::new();
        for c in &self.acc(p)?.children {
            let ca = self.acc(*c)?;
            if ca.status == Status::Active {
                e.push((ca.priority_ppm, *c));
            }
        }
        e.sort_by_key(|(prio, _)| std::cmp::Reverse(*prio));
        Ok(e.into_iter().map(|(_, c)| c).collect())
    }

    /// A split's debit of the parent: a grandchild-kind parent gets a tracker row but keeps its
    /// periods (D15).
    fn split_debit(&mut self, p: AccountId, a: i64, by: &Origin, channel: &Text) -> Result<(), OpError> {
        let now = self.now_secs;
        self.debit(p, Posting { amount_cents: a, by, channel, txid: None, date_secs: now, note: None })?;
        if self.acc(p)?.kind == Kind::Grandchild {
            self.track(p)?;
        }
        Ok(())
    }

    /// SPLIT(P, a, id, by) of 10.4.
    pub fn split(&mut self, p: AccountId, a: i64, id: Option<&Text>, by: &Origin) -> Result<(), OpError> {
        if self.acc(p)?.children.is_empty() {
            return Ok(());
        }
        self.rollover_children(p)?;
        let e = self.active_children(p)?;
        let Some(&first) = e.first() else { return Ok(()) };
        let now = self.now_secs;
        let from = Text::from(format!("Allocation from {}", self.acc(p)?.name));
        let credit = Posting { amount_cents: a, by, channel: &from, txid: id, date_secs: now, note: None };
        if a < 10 {
            let to = Text::from(format!("Allocation to {}", self.acc(first)?.name));
            self.split_debit(p, a, by, &to)?;
            return self.deposit(first, credit, Mode::Share);
        }
        let weights: Vec<i64> =
            e.iter().map(|c| self.acc(*c).map(|x| x.allocation_ppm)).collect::<Result<_, _>>()?;
        let Some(shares) = largest_remainder(a, &weights) else {
            return Ok(());
        };
        self.split_debit(p, a, by, &CH_SPLIT)?;
        for (c, share) in e.into_iter().zip(shares) {
            if share > 0 {
                self.deposit(c, credit.with_amount(share), Mode::Share)?;
            }
        }
        Ok(())
    }

    /// WITHDRAW of 10.7 (funds already checked by the caller).
    pub fn withdraw(&mut self, x: AccountId, p: Posting<'_>) -> Result<(), OpError> {
        let a = p.amount_cents;
        self.debit(x, p)?;
        // Money leaving the tree: counted by the engine (see `deposit`).
        self.tree.ledger.withdrawals_cents += i128::from(a);
        self.after_user_debit(x, a)
    }

    /// Periods bookkeeping after a withdrawal or transfer out of a grandchild (10.7, 10.8).
    fn after_user_debit(&mut self, x: AccountId, a: i64) -> Result<(), OpError> {
        let acc = self.acc_mut(x)?;
        if let Some(g) = acc.grand.as_mut() {
            if g.fixed_amount_cents > 0 {
                g.periods = g.periods.sub_ratio(a, g.fixed_amount_cents).ok_or(OpError::TooLarge)?;
            }
            self.track(x)?;
        }
        Ok(())
    }

    /// /move_balance effects (10.8).
    pub fn transfer(&mut self, from: AccountId, to: AccountId, amount_cents: i64) -> Result<(), OpError> {
        let terms = Posting::system(amount_cents, &CH_TRANSFER, self.now_secs);
        self.debit(from, terms)?;
        self.after_user_debit(from, amount_cents)?;
        self.deposit(to, terms, Mode::Transfer)
    }

    /// Appends `acc` (already shaped, parent set) to its parent's children.
    pub fn attach(&mut self, acc: Account) -> Result<AccountId, OpError> {
        let (id, parent, due) = (acc.uuid, acc.parent.ok_or(OpError::Internal)?, acc.sub_due_cents);
        self.saw(id);
        self.tree.accounts.insert(id, Arc::new(acc));
        self.dirty.insert(id);
        self.acc_mut(parent)?.children.push(id);
        self.bubble(parent, 0, due)?;
        Ok(id)
    }

    /// Sets a child's allocation; 0 makes it inactive unless closed (7.2, D32).
    pub fn set_allocation(&mut self, child: AccountId, allocation_ppm: i64) -> Result<(), OpError> {
        let c = self.acc_mut(child)?;
        c.allocation_ppm = allocation_ppm;
        if allocation_ppm == 0 && c.status != Status::Closed {
            c.status = Status::Inactive;
        }
        Ok(())
    }

    /// Deletes sub-account `x` and its subtree; its money goes to the parent (10.17).
    pub fn delete_sub(&mut self, x: AccountId) -> Result<(), OpError> {
        let acc = self.acc(x)?;
        let parent = acc.parent.ok_or(OpError::Internal)?;
        let name = acc.name.clone();
        let (b, due) = (acc.sub_balance_cents, acc.sub_due_cents);
        let removed: Vec<(AccountId, u64)> = self
            .tree
            .preorder(x)
            .into_iter()
            .map(|r| (r, self.tree.get(r).map_or(0, |a| a.log_len)))
            .collect();
        self.acc_mut(parent)?.children.retain(|c| *c != x);
        for (r, _) in &removed {
            self.saw(*r);
            self.tree.accounts.remove(r);
        }
        // Once for the whole subtree: a list is filtered in one pass, not once per account.
        self.dirty.retain(|a| self.tree.accounts.contains_key(a));
        self.days.retain(|(a, _)| self.tree.accounts.contains_key(a));
        self.track_days.retain(|(a, _)| self.tree.accounts.contains_key(a));
        self.removed.extend(removed);
        self.bubble(parent, -b, -due)?;
        if b > 0 {
            let b = i64::try_from(b).map_err(|_| OpError::TooLarge)?;
            let now = self.now_secs;
            let channel = Text::from(format!("Returned from deleted account {name}"));
            self.credit(parent, Posting::system(b, &channel, now))?;
        }
        Ok(())
    }
}

/// Largest-remainder shares of `amount` by `weights` (10.4.1); `None` when all weights are 0.
pub fn largest_remainder(amount: i64, weights: &[i64]) -> Option<Vec<i64>> {
    let w_sum: i128 = weights.iter().map(|w| i128::from(*w)).sum();
    if w_sum <= 0 {
        return None;
    }
    let a = i128::from(amount);
    let mut shares: Vec<i128> = Vec::with_capacity(weights.len());
    let mut rems: Vec<(i128, usize)> = Vec::with_capacity(weights.len());
    for (i, w) in weights.iter().enumerate() {
        let p = a * i128::from(*w);
        shares.push(p / w_sum);
        rems.push((p % w_sum, i));
    }
    let left = a - shares.iter().sum::<i128>();
    // Largest remainder first; ties go to the earlier child (stable sort keeps index order).
    rems.sort_by_key(|(r, _)| std::cmp::Reverse(*r));
    for (_, i) in rems.iter().take(left as usize) {
        shares[*i] += 1;
    }
    shares.into_iter().map(|s| i64::try_from(s).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_ignore_case_matches_as_lowercasing_both_would() {
        for (hay, needle) in [
            ("Returned Extra Allocation-up", "returned extra allocation-up"),
            ("x RETURNED EXTRA ALLOCATION-UP y", "returned extra allocation-up"),
            ("Returned Extra Allocation-down", "returned extra allocation-up"),
            ("short", "returned extra allocation-up"),
            ("", ""),
            ("Ünïcode Returned extra allocation-UP", "returned extra allocation-up"),
        ] {
            assert_eq!(
                contains_ignore_case(hay, needle),
                hay.to_ascii_lowercase().contains(needle),
                "{hay:?} {needle:?}"
            );
        }
    }

    /// A deposit into main with two children: the credit carries the posting's terms, the split
    /// runs as `System` under the credit's id and is dated now, and the money is all there.
    #[test]
    fn a_posting_lands_in_its_record_and_money_is_conserved() {
        let mut tree = Tree::new_user(1, 500);
        let now = 1_000 * DAY_SECS;
        let mut ctx = Ctx::new(&mut tree, now);
        for (id, alloc) in [(2, 600_000), (3, 400_000)] {
            let mut a = Account::new(id, format!("C{id}").into(), Kind::Child, Some(1), None);
            a.allocation_ppm = alloc;
            ctx.attach(a).unwrap();
        }
        let (by, channel, txid) = (Origin::from("Payroll"), Text::from("bank"), Text::from("T-1"));
        let terms = Posting {
            amount_cents: 1_001,
            by: &by,
            channel: &channel,
            txid: Some(&txid),
            date_secs: now - 5,
            note: None,
        };
        ctx.deposit(1, terms, Mode::External).unwrap();
        let w = Posting {
            amount_cents: 100,
            by: &Origin::User,
            channel: &channel,
            txid: None,
            date_secs: now,
            note: None,
        };
        ctx.withdraw(2, w).unwrap();
        let change = ctx.finish();
        let recs: Vec<_> = change.records.iter().map(|(a, _, r)| (*a, r)).collect();
        let (acc, credit) = recs[0];
        assert_eq!(acc, 1);
        assert!(credit.deposit);
        assert_eq!((&credit.by, &credit.channel, &credit.id), (&by, &channel, &txid));
        assert_eq!((credit.amount_cents, credit.date_secs), (1_001, now - 5));
        // The split: main's debit, then the shares, all by System under the credit's id.
        for (_, r) in &recs[1..4] {
            assert_eq!((&r.by, r.date_secs), (&Origin::System, now));
        }
        assert_eq!(
            recs[2..4].iter().map(|(_, r)| (r.amount_cents, &r.id)).collect::<Vec<_>>(),
            [(601, &txid), (400, &txid)]
        );
        let (acc, wd) = recs[4];
        assert_eq!((acc, wd.deposit, wd.amount_cents, &wd.by), (2, false, 100, &Origin::User));
        assert_eq!(
            tree.ledger,
            Ledger { initial_balance_cents: 500, deposits_cents: 1_001, withdrawals_cents: 100 }
        );
        assert_eq!(crate::domain::tree::check_invariants(&tree), Ok(()));
        assert_eq!(tree.get(1).unwrap().sub_balance_cents, 1_401);
    }

    #[test]
    fn split_examples() {
        // S1
        assert_eq!(
            largest_remainder(123_457, &[500_000, 300_000, 200_000]).unwrap(),
            vec![61_729, 37_037, 24_691]
        );
        // S2
        assert_eq!(largest_remainder(10_000, &[400_000, 200_000]).unwrap(), vec![6_667, 3_333]);
        // S3
        assert_eq!(largest_remainder(10_000, &[333_333; 3]).unwrap(), vec![3_334, 3_333, 3_333]);
        // S4
        assert_eq!(largest_remainder(16, &[100_000; 10]).unwrap(), vec![2, 2, 2, 2, 2, 2, 1, 1, 1, 1]);
        assert!(largest_remainder(100, &[0, 0]).is_none());
    }

    #[test]
    fn touched_keys_come_out_sorted_once_each() {
        let mut t = Touched::default();
        for k in [5u128, 5, 2, 9, 2, 5, 7, 7] {
            t.insert(k);
        }
        t.retain(|k| *k != 9);
        assert_eq!(t.sorted(), vec![2, 5, 7]);
        assert!(Touched::<u128>::default().sorted().is_empty());
    }

    #[test]
    fn generated_ids_are_sys_and_ten_uppercase_hex_digits() {
        for _ in 0..100 {
            let id = generate_id();
            assert_eq!(id.len(), 13, "{id}");
            assert!(id.starts_with("SYS"), "{id}");
            assert!(id[3..].bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b)), "{id}");
        }
        assert_ne!(generate_id(), generate_id());
    }
}
