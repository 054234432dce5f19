//! POST /import (docs/import.md): a bank statement in, as a preview of what each line would do,
//! or (`commit=true`) applied as one atomic, durable operation.
//!
//! Each line gets an import id: the bank's own id scoped to the bank account, or, where the bank
//! gives none, one made of account, amount, date and occurrence (as YNAB's
//! `YNAB:<milliunits>:<date>:<n>`). The id is the record's `TransactionID`, and lines are applied
//! to the main account, whose log is indexed by transaction id (SPEC D28): importing the same
//! file again, or an overlapping statement, adds nothing twice, on one node or several.

use blake2::{Blake2b256, Digest};

use super::decl::{row, Access, Body, Endpoint, Kind as P, Msgs, Param, Shape, Verb};
use super::endpoints::{Ep, NO_TREE};
use super::json::{array, Obj};
use super::money::TXID_MAX_CHARS;
use super::{engine_err, find, Answer, ApiError, Locked, Rq};
use crate::app::App;
use crate::domain::dates::fmt_day;
use crate::domain::dates::DAY_SECS;
use crate::domain::engine::{Ctx, Mode, OpError, Posting};
use crate::domain::origin::Origin;
use crate::domain::text::Text;
use crate::domain::tree::{fmt_uuid, AccountId};
use crate::import::{self, Format, Line, Statement};

/// Who an imported record says made it (its `By`).
const IMPORT_BY: &str = "Import";

static UUID: Param = Param::text(
    "uuid",
    None,
    None,
    "Account the statement belongs to; default the main account. Only the main account is committed to.",
);
static FORMAT: Param =
    Param::text("format", None, Some(16), "ofx, qfx, camt053, mt940 or csv; default taken from the content.");
static MAPPING: Param =
    Param::text("mapping", None, Some(8192), "For CSV: the column mapping, as JSON (see docs/import.md).");
static COMMIT: Param = Param::new(
    "commit",
    P::Bool,
    Msgs::invalid("commit must be a boolean"),
    "true applies every applicable line as one operation; default false (a preview).",
);

pub static IMPORT: Endpoint = Endpoint {
    verb: Verb::Post,
    path: "/import",
    ep: Ep::Import,
    prefix: "Import failed",
    summary: "Preview a bank statement (OFX, QFX, CAMT.053, MT940, CSV), or apply it with commit=true",
    access: Access::Bearer,
    writes: true,
    body: Body::Raw { max_bytes: import::MAX_FILE_BYTES },
    params: &[&UUID, &FORMAT, &MAPPING, &COMMIT],
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
        row!(400, "the file cannot be read (names the line)", "`line <n>: <what is wrong>`"),
        row!(400, "CSV without a valid `mapping`", "`a CSV file needs a mapping` / `Invalid mapping: <why>`"),
        NO_TREE,
        row!(404, "`uuid` is not an account of the tree", "`Account not found`"),
        row!(
            400,
            "`commit=true` for an account other than the main account",
            "`Only the main account can be committed to`"
        ),
    ],
};

/// What a line would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Deposit,
    Withdraw,
    Duplicate,
    NeedsAttention(&'static str),
}

/// The actions' names, in the order of [`Action::index`].
const ACTIONS: [&str; 4] = ["deposit", "withdraw", "duplicate", "needs_attention"];

impl Action {
    fn index(self) -> usize {
        match self {
            Action::Deposit => 0,
            Action::Withdraw => 1,
            Action::Duplicate => 2,
            Action::NeedsAttention(_) => 3,
        }
    }
    fn name(self) -> &'static str {
        ACTIONS[self.index()]
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
    let mut seen: std::collections::HashMap<(Option<&str>, i64, i64), u32> = std::collections::HashMap::new();
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

fn read_file(rq: &Rq) -> Result<(Format, Vec<Statement>), ApiError> {
    let p = &rq.params;
    let format = match p.text_of(&FORMAT)? {
        Some(f) => Format::parse(&f).ok_or_else(|| ApiError::bad("Unknown format"))?,
        None => import::detect(&rq.document)
            .filter(|_| !rq.document.is_empty())
            .ok_or_else(|| ApiError::bad("Not a bank statement"))?,
    };
    p.check_lengths(IMPORT.params)?;
    let mapping = match p.text_of(&MAPPING)? {
        Some(m) => Some(
            serde_json::from_str::<import::csv::Mapping>(&m)
                .map_err(|e| ApiError::bad(format!("Invalid mapping: {e}")))?,
        ),
        None => None,
    };
    let statements =
        import::read(&rq.document, format, mapping.as_ref()).map_err(|e| ApiError::bad(e.to_string()))?;
    Ok((format, statements))
}

pub async fn import(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let (format, statements) = read_file(rq)?;
    let commit = rq.params.flag_of(&COMMIT, false)?;
    let uuid = rq.params.text_of(&UUID)?.map(|u| u.into_owned());
    let planned = plan(&statements);
    let (guard, cur) = match super::lock_tree(app, rq, super::no_tree).await? {
        Locked::Tree(guard, cur) => (guard, cur),
        Locked::Answered(a) => return Ok(a),
    };
    let target: AccountId = match &uuid {
        None => cur.tree.root,
        Some(u) => find(&cur.tree, u, || ApiError::new(404, "Account not found"))?.uuid,
    };
    let main = target == cur.tree.root;
    if commit && !main {
        return Err(ApiError::bad("Only the main account can be committed to"));
    }
    // Lines already applied (the same id earlier in the file, or in the main account's log).
    let mut seen = std::collections::HashSet::new();
    let mut dup = Vec::with_capacity(planned.len());
    for p in &planned {
        dup.push(!seen.insert(p.id.as_str()) || (main && guard.main_txid_exists(&p.id).await?));
    }
    drop(seen);
    let channel = Text::from(format!("import:{}", format.name()));
    let by = Origin::from(Text::from(IMPORT_BY));
    let ids: Vec<Text> = planned.iter().map(|p| Text::from(p.id.as_str())).collect();
    // Runs every line on `ctx` in file order, as the commit does: what a line can do depends on
    // what the lines before it left (a deposit into the main account flows down the tree).
    let apply = |ctx: &mut Ctx| -> Result<Vec<Action>, ApiError> {
        let mut actions = Vec::with_capacity(planned.len());
        for ((p, dup), id) in planned.iter().zip(&dup).zip(&ids) {
            let a = p.line.amount_cents;
            let posting = Posting {
                amount_cents: a.abs(),
                by: &by,
                channel: &channel,
                txid: Some(id),
                date_secs: p.line.day * DAY_SECS,
                note: None,
            };
            let action = if *dup {
                Action::Duplicate
            } else if a == 0 {
                Action::NeedsAttention("the amount is zero")
            } else if a > 0 {
                match ctx.deposit(target, posting, Mode::External) {
                    Ok(()) => Action::Deposit,
                    Err(OpError::NotActive) => Action::NeedsAttention("the account is not active"),
                    Err(e) => return Err(engine_err(e)),
                }
            } else if -a > ctx.acc(target).map_err(engine_err)?.balance_cents {
                Action::NeedsAttention("not enough money in the account")
            } else {
                ctx.withdraw(target, posting).map_err(engine_err)?;
                Action::Withdraw
            };
            actions.push(action);
        }
        Ok(actions)
    };
    let render = |actions: &[Action], committed: bool| {
        let mut counts = [0i64; 4];
        let mut sum_cents: i128 = 0;
        let lines = planned.iter().zip(actions).map(|(p, act)| {
            counts[act.index()] += 1;
            if matches!(act, Action::Deposit | Action::Withdraw) {
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
            o.finish()
        });
        let lines = array(lines.collect::<Vec<_>>());
        let summary = Obj::new()
            .int("lines", planned.len() as i128)
            .int("deposit", counts[0].into())
            .int("withdraw", counts[1].into())
            .int("duplicate", counts[2].into())
            .int("needs_attention", counts[3].into())
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
        return Ok(render(&actions, false).into());
    }
    let mut counted = [0u64; 4];
    let answer = super::mutate_locked(app, guard, cur, rq, |ctx, _| {
        let actions = apply(ctx)?;
        for a in &actions {
            counted[a.index()] += 1;
        }
        Ok(render(&actions, true))
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
