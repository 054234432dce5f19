//! GET /changes: delta sync (docs/api.md, delta sync). Every committed data write of a user raises its
//! `server_knowledge` and stores one change row (accounts upserted and removed, log ranges
//! appended); an answer walks those rows after `since`, or lists everything when `since` is 0.
//!
//! A sync is a sequence of pages pinned to the knowledge of its first page (`server_knowledge`,
//! carried in the cursor): transactions of later writes are left to the next sync, so none is
//! listed twice or missed. Accounts are always shown in their current state (or as deleted),
//! which a client applies as an upsert, so a newer state is harmless.

use std::collections::{HashMap, HashSet};

use super::analytics::{record_obj, BAD_LIMIT, PAGE_MAX};
use super::decl::{row, Endpoint, Kind as P, Msgs, Param, Shape};
use super::endpoints::{Ep, NO_TREE};
use super::json::{array, Obj};
use super::tree::account_obj;
use super::{snapshot, ApiError, Rq};
use crate::app::App;
use crate::domain::engine::TxRecord;
use crate::domain::tree::{fmt_uuid, AccountId};
use crate::store::users::UserState;

const BAD_SINCE: &str = "since must be a whole number between 0 and server_knowledge";
const BAD_CURSOR: &str = "Invalid cursor";

static SINCE: Param = Param::new(
    "since",
    P::Int { min: 0, max: i64::MAX },
    Msgs::invalid(BAD_SINCE),
    "The server_knowledge of the client's last complete sync; 0 (default) lists everything.",
);
static LIMIT: Param = Param::new(
    "limit",
    P::Int { min: 1, max: PAGE_MAX },
    Msgs::invalid(BAD_LIMIT),
    "Page size (accounts plus transactions); default 1000.",
);
static CURSOR: Param =
    Param::text("cursor", None, None, "next_cursor of the previous page, with the same since.");

pub static CHANGES: Endpoint = Endpoint::read(
    "/changes",
    Ep::Changes,
    "Failed to list changes",
    "Delta sync: accounts changed and transactions appended since a server_knowledge, paged",
    &[&SINCE, &LIMIT, &CURSOR],
    &[
        ("since", Shape::Int),
        ("server_knowledge", Shape::Int),
        ("full_listing", Shape::Bool),
        ("accounts", Shape::Rows { schema: "SyncAccount", frame: false }),
        ("transactions", Shape::Rows { schema: "SyncTransaction", frame: true }),
        ("next_cursor", Shape::NullableStr),
    ],
    &[
        row!(
            400,
            "`since` ahead of the user's server_knowledge",
            "`since must be a whole number between 0 and server_knowledge (<server_knowledge>)`"
        ),
        row!(
            400,
            "`cursor` present and not one the service issued for this user and this `since`",
            "`Invalid cursor`"
        ),
        NO_TREE,
    ],
);

/// Where a page starts. Full listings: accounts by uuid from `acc`, then each account's
/// records from `off`. Incremental: item `off` of change row `row` (its accounts, then its
/// appended records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pos {
    FullAccounts { acc: AccountId },
    FullRecords { acc: AccountId, off: u64 },
    Rows { row: u64, off: u64 },
}

/// A cursor: position, the request's `since`, the pinned knowledge and a tag of the user (a
/// cursor of another user, or of a deleted and re-registered one, is refused).
struct Cursor {
    since: u64,
    pinned: u64,
    tag: u32,
    pos: Pos,
}

impl Cursor {
    fn text(&self) -> String {
        let (m, a, b) = match self.pos {
            Pos::FullAccounts { acc } => ('a', acc, 0),
            Pos::FullRecords { acc, off } => ('t', acc, off),
            Pos::Rows { row, off } => ('c', u128::from(row), off),
        };
        format!("{m}{:016x}{:016x}{:08x}{a:032x}{b:016x}", self.since, self.pinned, self.tag)
    }

    fn parse(t: &str) -> Option<Cursor> {
        if t.len() != 89 || !t.is_ascii() || !t[1..].bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let h64 = |r: std::ops::Range<usize>| u64::from_str_radix(&t[r], 16).ok();
        let since = h64(1..17)?;
        let pinned = h64(17..33)?;
        let tag = u32::from_str_radix(&t[33..41], 16).ok()?;
        let a = u128::from_str_radix(&t[41..73], 16).ok()?;
        let b = h64(73..89)?;
        let pos = match &t[..1] {
            "a" => Pos::FullAccounts { acc: a },
            "t" => Pos::FullRecords { acc: a, off: b },
            "c" => Pos::Rows { row: u64::try_from(a).ok()?, off: b },
            _ => return None,
        };
        Some(Cursor { since, pinned, tag, pos })
    }
}

fn user_tag(st: &UserState) -> u32 {
    st.user.user_no as u32
}

/// One page being filled.
struct Page<'a> {
    st: &'a UserState,
    limit: usize,
    items: usize,
    accounts: Vec<String>,
    seen: HashSet<AccountId>,
    txs: Vec<String>,
    /// Records the page shows, in order, not read yet: account, range, change row.
    wanted: Vec<(AccountId, u64, u64, u64)>,
}

impl Page<'_> {
    fn full(&self) -> bool {
        self.items >= self.limit
    }

    /// An account's current state, or its deletion marker; once per page.
    fn account(&mut self, id: AccountId) {
        self.items += 1;
        if !self.seen.insert(id) {
            return;
        }
        let t = &self.st.tree;
        self.accounts.push(match t.get(id) {
            Some(a) => account_obj(t, a, &fmt_uuid(id)).finish(),
            None => Obj::new().str("uuid", &fmt_uuid(id)).bool("deleted", true).finish(),
        });
    }

    /// Records `[from, to)` of `acc` in a full listing (clamped to its current log: a deleted
    /// account's are gone).
    async fn records(&mut self, app: &App, acc: AccountId, from: u64, to: u64) -> Result<(), ApiError> {
        let recs = app.users.read_log_range(self.st, acc, from, to).await?;
        self.push_records(&recs, acc, None);
        self.items += (to - from) as usize;
        Ok(())
    }

    /// `recs` of `acc` in the page's shape; `knowledge`: the write that appended them (none in
    /// a full listing).
    fn push_records(&mut self, recs: &[TxRecord], acc: AccountId, knowledge: Option<u64>) {
        let uuid = fmt_uuid(acc);
        for r in recs {
            let o = record_obj(r).str("account_uuid", &uuid);
            let o = match knowledge {
                Some(k) => o.int("knowledge", i128::from(k)),
                None => o.null("knowledge"),
            };
            self.txs.push(o.finish());
        }
    }

    /// Records `[from, to)` of `acc`, appended by change row `knowledge`, to be read with the
    /// page's others by [`Page::read_wanted`].
    fn want(&mut self, acc: AccountId, from: u64, to: u64, knowledge: u64) {
        self.wanted.push((acc, from, to, knowledge));
        self.items += (to - from) as usize;
    }

    /// Reads the wanted records with one read per run of adjacent ranges of an account (the
    /// writes of consecutive change rows append to a log one after another): a read per range
    /// made a page of 1000 records of small writes cost 20 times a page of the full listing.
    async fn read_wanted(&mut self, app: &App) -> Result<(), ApiError> {
        let wanted = std::mem::take(&mut self.wanted);
        let mut spans: HashMap<AccountId, Vec<(u64, u64)>> = HashMap::new();
        for &(acc, from, to, _) in &wanted {
            let s = spans.entry(acc).or_default();
            match s.last_mut() {
                Some(last) if last.1 == from => last.1 = to,
                _ => s.push((from, to)),
            }
        }
        let mut read: HashMap<(AccountId, u64), Vec<TxRecord>> = HashMap::new();
        for (acc, s) in &spans {
            for &(from, to) in s {
                read.insert((*acc, from), app.users.read_log_range(self.st, *acc, from, to).await?);
            }
        }
        for (acc, from, to, k) in wanted {
            let s = &spans[&acc];
            // The span that holds this range: the last one starting at or before it.
            let (start, _) = s[s.partition_point(|(f, _)| *f <= from).saturating_sub(1)];
            let recs = &read[&(acc, start)];
            // Clamped like a single read: a deleted account's records are gone.
            let lo = ((from - start) as usize).min(recs.len());
            let hi = ((to - start) as usize).min(recs.len());
            self.push_records(&recs[lo..hi], acc, Some(k));
        }
        Ok(())
    }
}

pub async fn changes(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let since = rq.params.num_of(&SINCE)?.unwrap_or(0) as u64;
    // A page is always bounded: without `limit` it holds up to the largest page.
    let limit = rq.params.num_of(&LIMIT)?.unwrap_or(PAGE_MAX) as usize;
    let cursor = match rq.params.text_of(&CURSOR)? {
        Some(c) => Some(Cursor::parse(&c).ok_or_else(|| ApiError::bad(BAD_CURSOR))?),
        None => None,
    };
    let st = snapshot(app, rq).await?;
    if since > st.knowledge {
        return Err(ApiError::bad(format!("{BAD_SINCE} ({})", st.knowledge)));
    }
    let (pinned, pos) = match cursor {
        None if since == 0 => (st.knowledge, Pos::FullAccounts { acc: 0 }),
        None => (st.knowledge, Pos::Rows { row: since + 1, off: 0 }),
        Some(c) => {
            let fits = match c.pos {
                Pos::Rows { row, .. } => since > 0 && row > since && row <= c.pinned,
                _ => since == 0,
            };
            if !fits || c.since != since || c.tag != user_tag(&st) || c.pinned > st.knowledge {
                return Err(ApiError::bad(BAD_CURSOR));
            }
            (c.pinned, c.pos)
        }
    };
    let mut page = Page {
        st: &st,
        limit,
        items: 0,
        accounts: Vec::new(),
        seen: HashSet::new(),
        txs: Vec::new(),
        wanted: Vec::new(),
    };
    let next = match pos {
        Pos::Rows { row, off } => rows_page(app, &mut page, pinned, row, off).await?,
        _ => full_page(app, &mut page, pinned, pos).await?,
    };
    page.read_wanted(app).await?;
    let next = next.map(|pos| Cursor { since, pinned, tag: user_tag(&st), pos }.text());
    Ok(Obj::new()
        .int("since", i128::from(since))
        .int("server_knowledge", i128::from(pinned))
        .bool("full_listing", since == 0)
        .raw("accounts", &array(page.accounts))
        .raw("transactions", &array(page.txs))
        .opt_str("next_cursor", next.as_deref()))
}

/// Change rows `row..=pinned`, from item `off` of the first.
async fn rows_page(
    app: &App,
    page: &mut Page<'_>,
    pinned: u64,
    row: u64,
    off: u64,
) -> Result<Option<Pos>, ApiError> {
    let (mut row, mut off) = (row, off);
    while row <= pinned {
        // Every row holds at least one item, so `limit` rows always fill a page.
        let rows = app.users.read_changes(page.st, row - 1, pinned, page.limit).await?;
        let Some(first) = rows.first() else { break };
        if first.knowledge != row {
            // Rows are written with every knowledge step; a gap is damaged storage.
            return Err(ApiError::Internal(format!(
                "change row {row} missing (next is {})",
                first.knowledge
            )));
        }
        for r in rows {
            row = r.knowledge;
            let mut i = 0u64;
            for id in r.upserted.iter().chain(&r.removed) {
                if i >= off {
                    if page.full() {
                        return Ok(Some(Pos::Rows { row, off: i }));
                    }
                    page.account(*id);
                }
                i += 1;
            }
            for (acc, first, n) in &r.appended {
                let end = i + n;
                if end > off {
                    if page.full() {
                        return Ok(Some(Pos::Rows { row, off: i.max(off) }));
                    }
                    let skip = off.saturating_sub(i);
                    let take = (*n - skip).min((page.limit - page.items) as u64);
                    page.want(*acc, first + skip, first + skip + take, row);
                    if skip + take < *n {
                        return Ok(Some(Pos::Rows { row, off: i + skip + take }));
                    }
                }
                i = end;
            }
            off = 0;
            row += 1;
        }
    }
    Ok(None)
}

/// Everything: every account by uuid, then every account's log as of the pinned knowledge.
async fn full_page(app: &App, page: &mut Page<'_>, pinned: u64, pos: Pos) -> Result<Option<Pos>, ApiError> {
    let mut ids: Vec<AccountId> = page.st.tree.accounts.keys().copied().collect();
    ids.sort_unstable();
    if let Pos::FullAccounts { acc } = pos {
        for id in ids.iter().filter(|id| **id >= acc) {
            if page.full() {
                return Ok(Some(Pos::FullAccounts { acc: *id }));
            }
            page.account(*id);
        }
    }
    // Records appended after the pinned knowledge belong to the next sync: each account's log
    // is cut where the first later write started appending to it.
    let mut cut: HashMap<AccountId, u64> = HashMap::new();
    if page.st.knowledge > pinned {
        for r in app.users.read_changes(page.st, pinned, page.st.knowledge, usize::MAX).await? {
            for (acc, first, _) in r.appended {
                let c = cut.entry(acc).or_insert(first);
                *c = (*c).min(first);
            }
        }
    }
    let (from_acc, from_off) = match pos {
        Pos::FullRecords { acc, off } => (acc, off),
        _ => (0, 0),
    };
    for id in ids.into_iter().filter(|id| *id >= from_acc) {
        let len = page.st.tree.get(id).map_or(0, |a| a.log_len);
        let len = cut.get(&id).map_or(len, |c| len.min(*c));
        let mut off = if id == from_acc { from_off } else { 0 };
        while off < len {
            if page.full() {
                return Ok(Some(Pos::FullRecords { acc: id, off }));
            }
            let take = (len - off).min((page.limit - page.items) as u64);
            page.records(app, id, off, off + take).await?;
            off += take;
        }
    }
    Ok(None)
}
