//! POST /import (docs/import.md): a bank statement in, as a preview of what each line would do,
//! or (`commit=true`) applied as one atomic, durable operation.
//!
//! Each line gets an import id: the bank's own id scoped to the bank account, or, where the bank
//! gives none, one made of account, amount, date and occurrence (as YNAB's
//! `YNAB:<milliunits>:<date>:<n>`). The id is the record's `TransactionID`, and the index of
//! transaction ids holds it whatever account the line went to (SPEC D28's index of the main
//! account's ids, extended to imported records): importing the same file again, or an
//! overlapping statement, adds nothing twice, on one node or several.
//!
//! A line's account is the client's choice for that line (`envelopes`), else the first import
//! rule that matches it, else the target account (for a withdrawal, only a target without child
//! accounts: money leaves from an envelope, not from a pool that is split further).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use blake2::{Blake2b256, Digest};

use super::decl::{row, Access, Body, Endpoint, Kind as P, Msgs, Param, Row, Shape, Verb};
use super::endpoints::{Ep, NO_TREE};
use super::import_settings::{parse_mapping, rules_of, saved_mapping};
use super::json::{array, Obj};
use super::money::TXID_MAX_CHARS;
use super::schedules::schedules_of;
use super::{engine_err, find, Answer, ApiError, Locked, Rq};
use crate::app::App;
use crate::domain::dates::fmt_day;
use crate::domain::dates::DAY_SECS;
use crate::domain::docs::{Docs, Rules};
use crate::domain::engine::{Ctx, Mode, OpError, Posting};
use crate::domain::note::Note;
use crate::domain::origin::Origin;
use crate::domain::sched_match::{open_near, take, within_pct};
use crate::domain::schedule::Schedule;
use crate::domain::text::Text;
use crate::domain::tree::{fmt_uuid, AccountId, Tree};
use crate::import::{self, text, Format, Line, Statement};
use crate::store::users::UserState;

/// How many days apart a statement line and an existing transaction of the same amount may be
/// dated and still be taken for the same payment (card payments post a day or three late).
pub const MATCH_DAYS: i64 = 3;
/// Records read from the end of each account's log when looking for a line's match: a bound on
/// what a preview reads, whatever the history.
pub const MATCH_SCAN_RECORDS: u64 = 5_000;

static UUID: Param = Param::text(
    "uuid",
    None,
    None,
    "Account the statement is imported into; default the main account. Deposits go into it (and down its subtree); withdrawals come out of it when it has no child accounts.",
);
static FORMAT: Param =
    Param::text("format", None, Some(16), "ofx, qfx, camt053, mt940 or csv; default taken from the content.");
static MAPPING: Param =
    Param::text("mapping", None, Some(8192), "For CSV: the column mapping, as JSON (see docs/import.md).");
static MAPPING_NAME: Param = Param::text(
    "mapping_name",
    None,
    Some(super::import_settings::MAPPING_NAME_MAX_CHARS),
    "For CSV: a mapping saved with /save_csv_mapping.",
);
static ENVELOPES: Param = Param::text(
    "envelopes",
    None,
    Some(65_536),
    "JSON object from a line's import id (the preview's `import_id`) to the account that line goes to or comes from; overrides the rules.",
);
static COMMIT: Param = Param::new(
    "commit",
    P::Bool,
    Msgs::invalid("commit must be a boolean"),
    "true applies every applicable line as one operation; default false (a preview).",
);

const NO_MAPPING: Row = row!(404, "`mapping_name` names no saved mapping", "`CSV mapping not found`");

pub static IMPORT: Endpoint = Endpoint {
    verb: Verb::Post,
    path: "/import",
    ep: Ep::Import,
    prefix: "Import failed",
    summary: "Preview a bank statement (OFX, QFX, CAMT.053, MT940, CSV), or apply it with commit=true",
    access: Access::Bearer,
    writes: true,
    body: Body::Raw { max_bytes: import::MAX_FILE_BYTES },
    params: &[&UUID, &FORMAT, &MAPPING, &MAPPING_NAME, &ENVELOPES, &COMMIT],
    fields: &[
        ("uuid", Shape::Str),
        ("format", Shape::Str),
        ("committed", Shape::Bool),
        ("lines", Shape::Rows { schema: "ImportLine", frame: false }),
        ("summary", Shape::Object { schema: "ImportSummary" }),
    ],
    errors: &[
        row!(400, "`format` not one of the formats read", "`Unknown format`"),
        row!(400, "the body is empty, or not a statement of any format read", "`Not a bank statement`"),
        NO_TREE,
        NO_MAPPING,
        row!(400, "the file cannot be read (names the line)", "`line <n>: <what is wrong>`"),
        row!(400, "CSV without a valid `mapping`", "`a CSV file needs a mapping` / `Invalid mapping: <why>`"),
        row!(404, "`uuid` is not an account of the tree", "`Account not found`"),
        row!(
            400,
            "`envelopes` is not an object of the statement's import ids and accounts of the tree",
            "`Invalid envelopes: <why>`"
        ),
    ],
};

/// What a line would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Deposit,
    Withdraw,
    Duplicate,
    /// An existing transaction (its index among the candidates) is taken for this line.
    Matched(usize),
    /// The line is the payment of an open scheduled occurrence (its index among the open
    /// ones), applied into or out of this account.
    Scheduled(usize, AccountId),
    NeedsAttention(&'static str),
}

/// The actions' names, in the order of [`Action::index`].
const ACTIONS: [&str; 5] = ["deposit", "withdraw", "duplicate", "matched", "needs_attention"];

impl Action {
    fn index(self) -> usize {
        match self {
            Action::Deposit => 0,
            Action::Withdraw => 1,
            Action::Duplicate => 2,
            Action::Matched(_) | Action::Scheduled(..) => 3,
            Action::NeedsAttention(_) => 4,
        }
    }
    fn name(self) -> &'static str {
        ACTIONS[self.index()]
    }
}

/// Where a line goes (deposits) or comes from (withdrawals), and what chose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choice {
    /// The client's `envelopes` entry for the line.
    Chosen(AccountId),
    /// The rule with this id.
    Rule(u64, AccountId),
    /// The import's target account.
    Target(AccountId),
    /// A rule whose envelope was deleted since.
    RuleGone(u64),
    /// Nothing: a withdrawal from an account with child accounts needs an envelope.
    Nothing,
}

impl Choice {
    fn account(self) -> Option<AccountId> {
        match self {
            Choice::Chosen(a) | Choice::Rule(_, a) | Choice::Target(a) => Some(a),
            Choice::RuleGone(_) | Choice::Nothing => None,
        }
    }
    fn rule(self) -> Option<u64> {
        match self {
            Choice::Rule(r, _) | Choice::RuleGone(r) => Some(r),
            _ => None,
        }
    }
}

/// A line of the file with its import id.
struct Planned<'a> {
    account: Option<&'a str>,
    line: &'a Line,
    id: String,
}

/// The import id of a line (see the module doc); hashed when it would be longer than a
/// transaction id may be.
fn import_id(account: Option<&str>, line: &Line, occurrence: u32) -> String {
    let acct = account.unwrap_or("-");
    let id = match &line.bank_id {
        Some(b) => format!("imp:{acct}:{b}"),
        None => format!("imp:{acct}:{}:{}:{occurrence}", line.amount_cents, fmt_day(line.day)),
    };
    if id.chars().count() <= TXID_MAX_CHARS {
        return id;
    }
    let digest = Blake2b256::digest(id.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("imp:{hex}")
}

/// Every line of every statement with its import id, in file order.
fn plan(statements: &[Statement]) -> Vec<Planned<'_>> {
    let mut seen: HashMap<(Option<&str>, i64, i64), u32> = HashMap::new();
    let mut out = Vec::new();
    for st in statements {
        let account = st.account.as_deref();
        for line in &st.lines {
            let n = seen.entry((account, line.amount_cents, line.day)).or_insert(0);
            *n += 1;
            out.push(Planned { account, line, id: import_id(account, line, *n) });
        }
    }
    out
}

/// Reads the statement. Parsing a file of up to 8 MiB is CPU work of up to a few hundred
/// milliseconds: it runs on a blocking thread, so a few large imports never hold every async
/// worker.
async fn read_file(rq: &Rq, docs: &Docs) -> Result<(Format, Vec<Statement>), ApiError> {
    let p = &rq.params;
    let format = match p.text_of(&FORMAT)? {
        Some(f) => Format::parse(&f).ok_or_else(|| ApiError::bad("Unknown format"))?,
        None => import::detect(&rq.document)
            .filter(|_| !rq.document.is_empty())
            .ok_or_else(|| ApiError::bad("Not a bank statement"))?,
    };
    p.check_lengths(IMPORT.params)?;
    let text = match (p.text_of(&MAPPING)?, p.text_of(&MAPPING_NAME)?) {
        (Some(m), _) => Some(m.into_owned()),
        (None, Some(name)) => Some(saved_mapping(docs, &name).ok_or_else(|| NO_MAPPING.err())?.to_string()),
        (None, None) => None,
    };
    let mapping = text.as_deref().map(parse_mapping).transpose()?;
    let doc = rq.document.clone();
    let statements = tokio::task::spawn_blocking(move || import::read(&doc, format, mapping.as_ref()))
        .await
        .map_err(|e| ApiError::Internal(format!("statement reader: {e}")))?
        .map_err(|e| ApiError::bad(e.to_string()))?;
    Ok((format, statements))
}

/// The `envelopes` parameter: import id to account. Keyed by import id, not line number:
/// several transactions may share a line (an OFX file written on one line).
fn overrides(rq: &Rq, planned: &[Planned], tree: &Tree) -> Result<HashMap<String, AccountId>, ApiError> {
    let Some(json) = rq.params.text_of(&ENVELOPES)? else { return Ok(HashMap::new()) };
    let bad = |why: String| ApiError::bad(format!("Invalid envelopes: {why}"));
    let map: HashMap<String, String> = serde_json::from_str(&json)
        .map_err(|e| bad(format!("{e} (an object of import ids and account uuids)")))?;
    let ids: HashSet<&str> = planned.iter().map(|p| p.id.as_str()).collect();
    let mut out = HashMap::with_capacity(map.len());
    for (id, uuid) in map {
        if !ids.contains(id.as_str()) {
            return Err(bad(format!(
                "{} is not the import id of a line of this statement",
                text::shown(&id)
            )));
        }
        let acc = tree
            .by_uuid_str(&uuid)
            .ok_or_else(|| bad(format!("{}: account {} not found", text::shown(&id), text::shown(&uuid))))?;
        out.insert(id, acc.uuid);
    }
    Ok(out)
}

/// What chooses each line's account: the client's choice, else the first matching rule, else
/// the target (for a withdrawal, only when the target has no child accounts).
fn choices(
    planned: &[Planned],
    chosen: &HashMap<String, AccountId>,
    rules: &Rules,
    tree: &Tree,
    target: AccountId,
) -> Vec<Choice> {
    let matcher = rules.matcher();
    let leaf = tree.get(target).is_some_and(|a| a.children.is_empty());
    planned
        .iter()
        .map(|p| {
            let l = p.line;
            if let Some(a) = chosen.get(&p.id) {
                return Choice::Chosen(*a);
            }
            match matcher.choose(l.payee.as_deref(), l.memo.as_deref(), l.amount_cents) {
                Some(r) if tree.get(r.envelope).is_some() => Choice::Rule(r.id, r.envelope),
                Some(r) => Choice::RuleGone(r.id),
                None if l.amount_cents > 0 || leaf => Choice::Target(target),
                None => Choice::Nothing,
            }
        })
        .collect()
}

/// A transaction already in a log that a line may be taken for.
struct Candidate {
    acc: AccountId,
    deposit: bool,
    amount_cents: i64,
    day: i64,
    id: Text,
    /// Posted by a schedule the user still keeps: its `approx_pct`. Such a transaction is the
    /// schedule's payment whatever account the line was headed for.
    approx_pct: Option<u8>,
}

/// Transactions in the logs of `accounts`, dated within [`MATCH_DAYS`] of `days`, that a line
/// may match: made by someone (not the engine's own allocations), not imported (an imported
/// record carries a note with its import id; a schedule's posting, a note naming the
/// schedule). Reads at most [`MATCH_SCAN_RECORDS`] records from the end of each log.
async fn candidates(
    app: &App,
    st: &UserState,
    accounts: &HashSet<AccountId>,
    days: (i64, i64),
) -> Result<Vec<Candidate>, ApiError> {
    let (lo, hi) = (days.0 - MATCH_DAYS, days.1 + MATCH_DAYS);
    let mut out = Vec::new();
    for &acc in accounts {
        let len = st.tree.get(acc).map_or(0, |a| a.log_len);
        let recs = app.users.read_log_range(st, acc, len.saturating_sub(MATCH_SCAN_RECORDS), len).await?;
        for r in recs {
            let day = r.date_secs.div_euclid(DAY_SECS);
            let imported = r.note.as_ref().is_some_and(|n| n.import_id.is_some()) || r.id.starts_with("imp:");
            if (lo..=hi).contains(&day) && r.by != Origin::System && !imported {
                let approx_pct = r
                    .note
                    .as_ref()
                    .and_then(|n| n.schedule)
                    .and_then(|id| schedule_of(&st.tree, id).map(|s| s.approx_pct));
                out.push(Candidate {
                    acc,
                    deposit: r.deposit,
                    amount_cents: r.amount_cents,
                    day,
                    id: r.id,
                    approx_pct,
                });
            }
        }
    }
    Ok(out)
}

/// The candidate a line is taken for: same direction, same account (`acc`, the line's) and
/// amount, or a schedule's posting within the schedule's `approx_pct` in any account; the
/// nearest date, then the nearest amount; each candidate at most once.
fn find_match(
    cands: &[Candidate],
    used: &mut [bool],
    acc: Option<AccountId>,
    amount_cents: i64,
    day: i64,
) -> Option<usize> {
    let best = cands
        .iter()
        .enumerate()
        .filter(|(i, c)| {
            !used[*i]
                && c.deposit == (amount_cents > 0)
                && (c.day - day).abs() <= MATCH_DAYS
                && match c.approx_pct {
                    Some(pct) => within_pct(c.amount_cents, amount_cents.abs(), pct),
                    None => Some(c.acc) == acc && c.amount_cents == amount_cents.abs(),
                }
        })
        .min_by_key(|(_, c)| ((c.day - day).abs(), (c.amount_cents - amount_cents.abs()).abs()))
        .map(|(i, _)| i)?;
    used[best] = true;
    Some(best)
}

/// Why a line could not be applied: SPEC's rules refuse it (the line waits for attention), or
/// the engine failed.
enum LineErr {
    Refused(&'static str),
    Failed(ApiError),
}

/// Applies one line on `ctx`: a credit deposited into `acc` (and down its subtree), a debit
/// withdrawn from it.
fn apply_line(ctx: &mut Ctx, acc: AccountId, posting: Posting<'_>, deposit: bool) -> Result<(), LineErr> {
    if deposit {
        return match ctx.deposit(acc, posting, Mode::External) {
            Ok(()) => Ok(()),
            Err(OpError::NotActive) => Err(LineErr::Refused("the account is not active")),
            Err(e) => Err(LineErr::Failed(engine_err(e))),
        };
    }
    let balance = ctx.acc(acc).map_err(|e| LineErr::Failed(engine_err(e)))?.balance_cents;
    if posting.amount_cents > balance {
        return Err(LineErr::Refused("not enough money in the account"));
    }
    ctx.withdraw(acc, posting).map_err(|e| LineErr::Failed(engine_err(e)))
}

/// The user's schedule `id`, if it still exists.
fn schedule_of(tree: &Tree, id: u64) -> Option<&Schedule> {
    schedules_of(tree).into_iter().find(|s| s.id == id)
}

pub async fn import(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let commit = rq.params.flag_of(&COMMIT, false)?;
    let uuid = rq.params.text_of(&UUID)?.map(|u| u.into_owned());
    // A read of the committed state first: the saved mappings, and the logs a line may match
    // (read outside the write lock, which on a shared engine holds a database connection).
    let st = super::snapshot(app, rq).await?;
    let (format, statements) = read_file(rq, &st.tree.docs).await?;
    let planned = plan(&statements);
    let target_of = |tree: &Tree| -> Result<AccountId, ApiError> {
        match &uuid {
            None => Ok(tree.root),
            Some(u) => Ok(find(tree, u, || ApiError::new(404, "Account not found"))?.uuid),
        }
    };
    let chosen = overrides(rq, &planned, &st.tree)?;
    let rules = rules_of(&st.tree.docs);
    let first = choices(&planned, &chosen, &rules, &st.tree, target_of(&st.tree)?);
    // The lines' accounts, and those the schedules pay from and into (their postings match a
    // line headed anywhere).
    let accounts: HashSet<AccountId> = first
        .iter()
        .filter_map(|c| c.account())
        .chain(schedules_of(&st.tree).iter().flat_map(|s| s.what.accounts()))
        .collect();
    let days =
        planned.iter().fold((i64::MAX, i64::MIN), |(lo, hi), p| (lo.min(p.line.day), hi.max(p.line.day)));
    let cands = if planned.is_empty() { Vec::new() } else { candidates(app, &st, &accounts, days).await? };
    drop(st);

    let (guard, cur) = match super::lock_tree(app, rq, super::no_tree).await? {
        Locked::Tree(guard, cur) => (guard, cur),
        Locked::Answered(a) => return Ok(a),
    };
    let target = target_of(&cur.tree)?;
    let rules = rules_of(&cur.tree.docs);
    let choice = choices(&planned, &chosen, &rules, &cur.tree, target);
    // Open occurrences of the schedules a line may be the payment of (docs/import.md).
    let line_days: Vec<i64> = planned.iter().map(|p| p.line.day).collect();
    let mut open = open_near(&schedules_of(&cur.tree), &line_days, MATCH_DAYS);
    open.retain(|o| cur.tree.get(o.account).is_some());
    let open_ids: Vec<Text> = open
        .iter()
        .map(|o| schedule_of(&cur.tree, o.schedule).map_or_else(|| Text::from(""), |s| s.txid(o.n)))
        .collect();
    // Lines already applied (the same id earlier in the file, or in the index of ids), and
    // occurrences posted already (their ids indexed), in one look at the index.
    let all: Vec<&str> =
        planned.iter().map(|p| p.id.as_str()).chain(open_ids.iter().map(|t| t.as_str())).collect();
    let mut there = guard.main_txids_exist(&all).await?;
    let occ_there = there.split_off(planned.len());
    let mut seen = HashSet::new();
    let dup: Vec<bool> = all.iter().zip(there).map(|(id, there)| !seen.insert(*id) || there).collect();
    drop(seen);
    let channel = Text::from(format!("import:{}", format.name()));
    // Imported lines are the person's own payments and income: counted as theirs by spending
    // and income (SPEC 10.15), like a deposit or withdrawal they enter by hand.
    let by = Origin::User;
    let ids: Vec<Text> = planned.iter().map(|p| Text::from(p.id.as_str())).collect();
    // Kept by the records a commit writes; a preview's records are dropped with its copy.
    let notes: Vec<Arc<Note>> = planned
        .iter()
        .zip(&ids)
        .filter(|_| commit)
        .map(|(p, id)| {
            Arc::new(Note {
                payee: p.line.payee.as_deref().map(Text::from),
                memo: p.line.memo.as_deref().map(Text::from),
                import_id: Some(id.clone()),
                schedule: None,
            })
        })
        .collect();
    // Runs every line on `ctx` in file order, as the commit does: what a line can do depends on
    // what the lines before it left (a deposit flows down the tree).
    let apply = |ctx: &mut Ctx| -> Result<Vec<Action>, ApiError> {
        let mut used = vec![false; cands.len()];
        // An occurrence already posted is no line's to take.
        let mut taken = occ_there.clone();
        let mut actions = Vec::with_capacity(planned.len());
        for (i, p) in planned.iter().enumerate() {
            let a = p.line.amount_cents;
            let posting = Posting {
                amount_cents: a.abs(),
                by: &by,
                channel: &channel,
                txid: Some(&ids[i]),
                date_secs: p.line.day * DAY_SECS,
                note: notes.get(i),
            };
            let action = if dup[i] {
                Action::Duplicate
            } else if a == 0 {
                Action::NeedsAttention("the amount is zero")
            } else if let Some(m) = find_match(&cands, &mut used, choice[i].account(), a, p.line.day) {
                ctx.claim_id(ids[i].clone());
                Action::Matched(m)
            } else if let Some(k) = take(&open, &mut taken, a, p.line.day, MATCH_DAYS) {
                // The client's choice of envelope for the line stands; else the schedule's.
                let acc = match choice[i] {
                    Choice::Chosen(x) => x,
                    _ => open[k].account,
                };
                match apply_line(ctx, acc, posting, a > 0) {
                    Ok(()) => Action::Scheduled(k, acc),
                    Err(LineErr::Refused(why)) => {
                        taken[k] = false;
                        Action::NeedsAttention(why)
                    }
                    Err(LineErr::Failed(e)) => return Err(e),
                }
            } else {
                match (choice[i], a > 0) {
                    (Choice::RuleGone(_), _) => {
                        Action::NeedsAttention("the rule's envelope no longer exists")
                    }
                    (Choice::Nothing, _) => Action::NeedsAttention(
                        "no envelope chosen: add an import rule or choose one for this line",
                    ),
                    (c, deposit) => {
                        let acc = c.account().ok_or(OpError::Internal).map_err(engine_err)?;
                        match apply_line(ctx, acc, posting, deposit) {
                            Ok(()) if deposit => Action::Deposit,
                            Ok(()) => Action::Withdraw,
                            Err(LineErr::Refused(why)) => Action::NeedsAttention(why),
                            Err(LineErr::Failed(e)) => return Err(e),
                        }
                    }
                }
            };
            actions.push(action);
        }
        let settled: Vec<(u64, u32)> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Scheduled(k, _) => Some((open[*k].schedule, open[*k].n)),
                _ => None,
            })
            .collect();
        if !settled.is_empty() {
            // In the same write as the lines: the poster never posts these occurrences.
            super::schedules::settle_paid(ctx, &settled);
        }
        Ok(actions)
    };
    let render = |actions: &[Action], committed: bool, tree: &Tree| {
        let mut counts = [0i64; ACTIONS.len()];
        let mut sum_cents: i128 = 0;
        let lines = planned.iter().zip(actions).zip(&choice).map(|((p, act), c)| {
            counts[act.index()] += 1;
            if matches!(act, Action::Deposit | Action::Withdraw | Action::Scheduled(..)) {
                sum_cents += i128::from(p.line.amount_cents);
            }
            let mut o = Obj::new()
                .int("line", p.line.source_line as i128)
                .opt_str("account", p.account)
                .str("date", &fmt_day(p.line.day))
                .money("amount", p.line.amount_cents.into())
                .opt_str("payee", p.line.payee.as_deref())
                .opt_str("memo", p.line.memo.as_deref())
                .opt_str("bank_id", p.line.bank_id.as_deref())
                .str("import_id", &p.id)
                .str("action", act.name());
            if let Action::NeedsAttention(why) = act {
                o = o.str("reason", why);
            }
            if let Action::Matched(m) = act {
                o = o.str("matched", &cands[*m].id);
            }
            if let Action::Scheduled(k, _) = act {
                let occ = &open[*k];
                o = o
                    .str("matched", &open_ids[*k])
                    .int("schedule", occ.schedule.into())
                    .opt_str("schedule_name", schedule_of(tree, occ.schedule).map(|s| s.name.as_str()))
                    .int("occurrence", occ.n.into())
                    .str("occurrence_date", &fmt_day(occ.day));
            }
            let acc = match act {
                Action::Duplicate => None,
                Action::Scheduled(_, acc) => Some(*acc),
                _ => c.account(),
            };
            if let Some(acc) = acc {
                o = o
                    .str("envelope", &fmt_uuid(acc))
                    .opt_str("envelope_name", tree.get(acc).map(|a| a.name.as_str()));
            }
            if let Some(r) = c.rule().filter(|_| !matches!(act, Action::Scheduled(..))) {
                o = o.int("rule", r.into());
            }
            o.finish()
        });
        let lines = array(lines.collect::<Vec<_>>());
        let summary = Obj::new()
            .int("lines", planned.len() as i128)
            .int("deposit", counts[0].into())
            .int("withdraw", counts[1].into())
            .int("duplicate", counts[2].into())
            .int("matched", counts[3].into())
            .int("needs_attention", counts[4].into())
            .money("net_amount", sum_cents);
        Obj::new()
            .str("uuid", &fmt_uuid(target))
            .str("format", format.name())
            .bool("committed", committed)
            .raw("lines", &lines)
            .obj("summary", summary)
    };
    if !commit {
        let mut scratch = cur.tree.clone();
        let actions = apply(&mut Ctx::new(&mut scratch, rq.now()))?;
        return Ok(render(&actions, false, &scratch).into());
    }
    let mut counted = [0u64; ACTIONS.len()];
    let answer = super::mutate_locked(app, guard, cur, rq, |ctx, _| {
        let actions = apply(ctx)?;
        for a in &actions {
            counted[a.index()] += 1;
        }
        Ok(render(&actions, true, ctx.tree))
    })
    .await
    .map_err(|e| match e {
        // Another node committed some of these lines meanwhile (the shared engine's unique key on
        // transaction ids): nothing of this import was applied, and a retry skips what is there.
        ApiError::Client(409, ..) => ApiError::new(
            409,
            "Import failed: some of these lines were imported at the same time by another request; import again",
        ),
        e => e,
    })?;
    for (i, n) in counted.into_iter().enumerate() {
        crate::metrics::imported(ACTIONS[i], n);
    }
    Ok(answer)
}
