//! What a user keeps for importing statements (docs/import.md): the ordered import rules that
//! choose a line's envelope, and CSV mappings saved by name. Both are settings of the user
//! (`domain::docs`), written like any change of the tree: atomically and durably.

use super::decl::{row, Endpoint, Kind as P, Msgs, Param, Row, Shape};
use super::endpoints::{Ep, NO_TREE};
use super::json::{array, Obj};
use super::{mutate, snapshot, Answer, ApiError, Rq};
use crate::app::App;
use crate::domain::docs::{
    mapping_key, mapping_name, Applies, Doc, Docs, Field, Match, Rule, Rules, TextTest, MAX_MAPPINGS,
    MAX_RULES, RULES_KEY,
};
use crate::domain::engine::Ctx;
use crate::domain::text::Text;
use crate::domain::tree::{fmt_uuid, Tree};
use crate::import::csv::Mapping;

/// Longest text a rule compares.
pub const RULE_VALUE_MAX_CHARS: usize = 256;
/// Longest name of a saved CSV mapping.
pub const MAPPING_NAME_MAX_CHARS: usize = 64;
/// Longest CSV mapping (JSON text).
pub const MAPPING_MAX_CHARS: usize = 8192;

static ID: Param = Param::new(
    "id",
    P::Int { min: 1, max: i64::MAX },
    Msgs::required("id is required", "id must be a positive whole number"),
    "The rule's id (from /import_rules).",
);
static FIELD: Param =
    Param::text("field", None, Some(16), "payee, memo or payee_or_memo; default payee_or_memo.");
static MATCH: Param =
    Param::text("match", None, Some(16), "equals, contains or starts_with; default contains.");
static VALUE: Param =
    Param::text("value", None, Some(RULE_VALUE_MAX_CHARS), "The text compared, case ignored.");
static MIN_AMOUNT: Param = Param::new(
    "min_amount",
    P::Money { positive: false },
    Msgs::invalid("min_amount must be an amount").out_of_range("min_amount must not be negative"),
    "Smallest amount (without its sign) the rule matches.",
);
static MAX_AMOUNT: Param = Param::new(
    "max_amount",
    P::Money { positive: false },
    Msgs::invalid("max_amount must be an amount").out_of_range("max_amount must not be negative"),
    "Largest amount (without its sign) the rule matches.",
);
static APPLIES_TO: Param =
    Param::text("applies_to", None, Some(16), "withdrawals, deposits or both; default withdrawals.");
static ENVELOPE: Param = Param::text("envelope", None, None, "The account the rule sends matching lines to.");
static ENVELOPE_REQ: Param = Param::text(
    "envelope",
    Some("envelope is required"),
    None,
    "The account the rule sends matching lines to.",
);
static POSITION: Param = Param::new(
    "position",
    P::Int { min: 1, max: MAX_RULES as i64 },
    Msgs::invalid("position must be a whole number from 1 to 500"),
    "1-based place in the list; default last (add) or unchanged (update).",
);
static CLEAR: Param = Param::text(
    "clear",
    None,
    Some(64),
    "Comma-separated conditions to remove: value, min_amount, max_amount.",
);
static IDS: Param = Param::text(
    "ids",
    Some("ids is required"),
    Some(MAX_RULES * 21),
    "Every rule id, comma-separated, in the new order.",
);
static NAME: Param =
    Param::text("name", Some("name is required"), Some(MAPPING_NAME_MAX_CHARS), "The mapping's name.");
static MAPPING: Param = Param::text(
    "mapping",
    Some("mapping is required"),
    Some(MAPPING_MAX_CHARS),
    "The CSV mapping as JSON (docs/import.md).",
);

const BAD_FIELD: Row =
    row!(400, "`field` not one of its values", "`field must be payee, memo or payee_or_memo`");
const BAD_MATCH: Row =
    row!(400, "`match` not one of its values", "`match must be equals, contains or starts_with`");
const BAD_APPLIES: Row =
    row!(400, "`applies_to` not one of its values", "`applies_to must be withdrawals, deposits or both`");
const NO_CONDITION: Row = row!(
    400,
    "the rule would match every line",
    "`A rule needs a text to compare (value) or an amount bound (min_amount, max_amount)`"
);
const MIN_OVER_MAX: Row = row!(400, "`min_amount` > `max_amount`", "`min_amount is more than max_amount`");
const TOO_MANY_RULES: Row =
    row!(400, "the user already keeps 500 rules", "`A user keeps at most 500 import rules`");
const NO_ENVELOPE: Row =
    row!(404, "`envelope` is not an account of the tree", "`Envelope account not found`");
const NO_RULE: Row = row!(404, "no rule has this id", "`Import rule not found`");
const BAD_CLEAR: Row =
    row!(400, "`clear` names something else", "`clear lists value, min_amount or max_amount`");
const BAD_ORDER: Row =
    row!(400, "`ids` is not every rule id once", "`ids must list every rule id exactly once`");
const BAD_MAPPING: Row = row!(400, "`mapping` is not a valid mapping", "`Invalid mapping: <why>`");
const TOO_MANY_MAPPINGS: Row =
    row!(400, "the user already keeps 100 mappings", "`A user keeps at most 100 CSV mappings`");
const NO_MAPPING: Row = row!(404, "no mapping has this name", "`CSV mapping not found`");

const RULES_FIELD: (&str, Shape) = ("rules", Shape::Rows { schema: "ImportRule", frame: false });

pub static LIST_RULES: Endpoint = Endpoint::read(
    "/import_rules",
    Ep::ListImportRules,
    "Failed to list import rules",
    "The caller's import rules, in the order they are tried",
    &[],
    &[RULES_FIELD],
    &[NO_TREE],
);

pub static ADD_RULE: Endpoint = Endpoint::write(
    "/add_import_rule",
    Ep::AddImportRule,
    "Failed to add import rule",
    "Add an import rule: lines it matches go to its envelope",
    &[&ENVELOPE_REQ, &FIELD, &MATCH, &VALUE, &MIN_AMOUNT, &MAX_AMOUNT, &APPLIES_TO, &POSITION],
    &[("rule", Shape::Object { schema: "ImportRule" }), RULES_FIELD],
    &[NO_TREE, BAD_FIELD, BAD_MATCH, BAD_APPLIES, NO_CONDITION, MIN_OVER_MAX, TOO_MANY_RULES, NO_ENVELOPE],
);

pub static UPDATE_RULE: Endpoint = Endpoint::write(
    "/update_import_rule",
    Ep::UpdateImportRule,
    "Failed to update import rule",
    "Change an import rule: the parameters sent replace the rule's, the others stay",
    &[&ID, &ENVELOPE, &FIELD, &MATCH, &VALUE, &MIN_AMOUNT, &MAX_AMOUNT, &APPLIES_TO, &POSITION, &CLEAR],
    &[("rule", Shape::Object { schema: "ImportRule" }), RULES_FIELD],
    &[
        NO_TREE,
        BAD_FIELD,
        BAD_MATCH,
        BAD_APPLIES,
        BAD_CLEAR,
        NO_RULE,
        NO_CONDITION,
        MIN_OVER_MAX,
        NO_ENVELOPE,
    ],
);

pub static REORDER_RULES: Endpoint = Endpoint::write(
    "/reorder_import_rules",
    Ep::ReorderImportRules,
    "Failed to reorder import rules",
    "Put the import rules in a new order",
    &[&IDS],
    &[RULES_FIELD],
    &[NO_TREE, BAD_ORDER],
);

pub static DELETE_RULE: Endpoint = Endpoint::write(
    "/delete_import_rule",
    Ep::DeleteImportRule,
    "Failed to delete import rule",
    "Delete an import rule",
    &[&ID],
    &[("deleted", Shape::Int), RULES_FIELD],
    &[NO_TREE, NO_RULE],
);

const MAPPINGS_FIELD: (&str, Shape) = ("mappings", Shape::Rows { schema: "CsvMapping", frame: false });

pub static LIST_MAPPINGS: Endpoint = Endpoint::read(
    "/csv_mappings",
    Ep::ListCsvMappings,
    "Failed to list CSV mappings",
    "The caller's saved CSV mappings, by name",
    &[],
    &[MAPPINGS_FIELD],
    &[NO_TREE],
);

pub static SAVE_MAPPING: Endpoint = Endpoint::write(
    "/save_csv_mapping",
    Ep::SaveCsvMapping,
    "Failed to save CSV mapping",
    "Save a CSV mapping under a name (replacing one of that name), for /import?mapping_name=",
    &[&NAME, &MAPPING],
    &[("name", Shape::Str), ("mapping", Shape::Object { schema: "CsvMappingBody" })],
    &[NO_TREE, BAD_MAPPING, TOO_MANY_MAPPINGS],
);

pub static DELETE_MAPPING: Endpoint = Endpoint::write(
    "/delete_csv_mapping",
    Ep::DeleteCsvMapping,
    "Failed to delete CSV mapping",
    "Delete a saved CSV mapping",
    &[&NAME],
    &[("deleted", Shape::Str)],
    &[NO_TREE, NO_MAPPING],
);

/// The user's rules (none yet: an empty list).
pub fn rules_of(docs: &Docs) -> Rules {
    match docs.get(RULES_KEY).map(|d| &**d) {
        Some(Doc::Rules(r)) => r.clone(),
        _ => Rules::default(),
    }
}

/// The saved mapping `name`, as its JSON text.
pub fn saved_mapping<'a>(docs: &'a Docs, name: &str) -> Option<&'a str> {
    match docs.get(mapping_key(name).as_str()).map(|d| &**d) {
        Some(Doc::CsvMapping(m)) => Some(m.as_str()),
        _ => None,
    }
}

/// Parses a CSV mapping's JSON text.
pub fn parse_mapping(text: &str) -> Result<Mapping, ApiError> {
    serde_json::from_str::<Mapping>(text).map_err(|e| ApiError::bad(format!("Invalid mapping: {e}")))
}

fn rule_obj(r: &Rule, tree: &Tree) -> Obj {
    let text = r.text.as_ref();
    let money = |o: Obj, k: &str, v: Option<i64>| match v {
        Some(c) => o.money(k, c.into()),
        None => o.null(k),
    };
    let o = Obj::new()
        .int("id", r.id.into())
        .opt_str("field", text.map(|t| t.field.name()))
        .opt_str("match", text.map(|t| t.op.name()))
        .opt_str("value", text.map(|t| t.value.as_str()));
    let o = money(o, "min_amount", r.min_cents);
    money(o, "max_amount", r.max_cents)
        .str("applies_to", r.applies.name())
        .str("envelope", &fmt_uuid(r.envelope))
        .opt_str("envelope_name", tree.get(r.envelope).map(|a| a.name.as_str()))
}

fn rules_json(rules: &Rules, tree: &Tree) -> String {
    array(rules.list.iter().map(|r| rule_obj(r, tree).finish()))
}

pub async fn list_rules(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let st = snapshot(app, rq).await?;
    Ok(Obj::new().raw("rules", &rules_json(&rules_of(&st.tree.docs), &st.tree)))
}

/// A named value of one of a closed set, else `bad`.
fn one_of<T>(rq: &Rq, p: &Param, parse: fn(&str) -> Option<T>, bad: &Row) -> Result<Option<T>, ApiError> {
    match rq.params.text_of(p)? {
        Some(v) => parse(&v).map(Some).ok_or_else(|| bad.err()),
        None => Ok(None),
    }
}

/// The parameters of a rule, as sent (all optional here; `add` requires the envelope).
struct Terms {
    envelope: Option<String>,
    field: Option<Field>,
    op: Option<Match>,
    value: Option<String>,
    min: Option<i64>,
    max: Option<i64>,
    applies: Option<Applies>,
    position: Option<usize>,
}

fn terms(rq: &Rq, ep: &Endpoint, envelope: &Param) -> Result<Terms, ApiError> {
    let p = &rq.params;
    let envelope = p.text_of(envelope)?.map(|s| s.into_owned());
    p.check_lengths(ep.params)?;
    Ok(Terms {
        envelope,
        field: one_of(rq, &FIELD, Field::parse, &BAD_FIELD)?,
        op: one_of(rq, &MATCH, Match::parse, &BAD_MATCH)?,
        value: p.text_of(&VALUE)?.map(|s| s.into_owned()),
        min: p.num_of(&MIN_AMOUNT)?,
        max: p.num_of(&MAX_AMOUNT)?,
        applies: one_of(rq, &APPLIES_TO, Applies::parse, &BAD_APPLIES)?,
        position: p.num_of(&POSITION)?.map(|n| n as usize),
    })
}

/// `t` applied to `r`; checks the rule that results.
fn apply_terms(mut r: Rule, t: &Terms, tree: &Tree) -> Result<Rule, ApiError> {
    if let Some(v) = &t.value {
        let old = r.text.as_ref();
        r.text = Some(TextTest {
            field: t.field.or(old.map(|o| o.field)).unwrap_or(Field::Any),
            op: t.op.or(old.map(|o| o.op)).unwrap_or(Match::Contains),
            value: Text::from(v.as_str()),
        });
    } else if let Some(old) = r.text.as_mut() {
        old.field = t.field.unwrap_or(old.field);
        old.op = t.op.unwrap_or(old.op);
    }
    r.min_cents = t.min.or(r.min_cents);
    r.max_cents = t.max.or(r.max_cents);
    r.applies = t.applies.unwrap_or(r.applies);
    if let Some(e) = &t.envelope {
        r.envelope = tree.by_uuid_str(e).ok_or_else(|| NO_ENVELOPE.err())?.uuid;
    }
    check_rule(&r, tree)?;
    Ok(r)
}

fn check_rule(r: &Rule, tree: &Tree) -> Result<(), ApiError> {
    if r.text.as_ref().is_none_or(|t| t.value.trim().is_empty())
        && r.min_cents.is_none()
        && r.max_cents.is_none()
    {
        return Err(NO_CONDITION.err());
    }
    if let (Some(lo), Some(hi)) = (r.min_cents, r.max_cents) {
        if lo > hi {
            return Err(MIN_OVER_MAX.err());
        }
    }
    if tree.get(r.envelope).is_none() {
        return Err(NO_ENVELOPE.err());
    }
    Ok(())
}

/// Stores `rules` and answers with `rule` (if any) and the whole list.
fn store_rules(ctx: &mut Ctx, rules: Rules, rule: Option<&Rule>) -> Obj {
    let list = rules_json(&rules, ctx.tree);
    let o = match rule {
        Some(r) => Obj::new().obj("rule", rule_obj(r, ctx.tree)),
        None => Obj::new(),
    };
    ctx.set_doc(Text::Static(RULES_KEY), Some(Doc::Rules(rules)));
    o.raw("rules", &list)
}

pub async fn add_rule(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let t = terms(rq, &ADD_RULE, &ENVELOPE_REQ)?;
    mutate(app, rq, |ctx, _| {
        let mut rules = rules_of(&ctx.tree.docs);
        if rules.list.len() >= MAX_RULES {
            return Err(TOO_MANY_RULES.err());
        }
        let blank = Rule {
            id: rules.next_id.max(1),
            text: None,
            min_cents: None,
            max_cents: None,
            applies: Applies::Withdrawals,
            envelope: 0,
        };
        let rule = apply_terms(blank, &t, ctx.tree)?;
        rules.next_id = rule.id + 1;
        let at = t.position.map_or(rules.list.len(), |p| (p - 1).min(rules.list.len()));
        rules.list.insert(at, rule.clone());
        Ok(store_rules(ctx, rules, Some(&rule)))
    })
    .await
}

pub async fn update_rule(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let id = rq.params.req_num_of(&ID)? as u64;
    let t = terms(rq, &UPDATE_RULE, &ENVELOPE)?;
    let clear: Vec<String> = match rq.params.text_of(&CLEAR)? {
        Some(c) => c.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        None => Vec::new(),
    };
    if clear.iter().any(|c| !matches!(c.as_str(), "value" | "min_amount" | "max_amount")) {
        return Err(BAD_CLEAR.err());
    }
    mutate(app, rq, |ctx, _| {
        let mut rules = rules_of(&ctx.tree.docs);
        let at = rules.position(id).ok_or_else(|| NO_RULE.err())?;
        let mut old = rules.list.remove(at);
        for c in &clear {
            match c.as_str() {
                "value" => old.text = None,
                "min_amount" => old.min_cents = None,
                _ => old.max_cents = None,
            }
        }
        let rule = apply_terms(old, &t, ctx.tree)?;
        let to = t.position.map_or(at, |p| p - 1).min(rules.list.len());
        rules.list.insert(to, rule.clone());
        Ok(store_rules(ctx, rules, Some(&rule)))
    })
    .await
}

pub async fn reorder_rules(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let ids = rq.params.req_text_of(&IDS)?;
    rq.params.check_lengths(REORDER_RULES.params)?;
    let ids: Vec<u64> = ids
        .split(',')
        .map(|s| s.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| BAD_ORDER.err())?;
    mutate(app, rq, |ctx, _| {
        let mut rules = rules_of(&ctx.tree.docs);
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        let mut have: Vec<u64> = rules.list.iter().map(|r| r.id).collect();
        have.sort_unstable();
        if sorted != have {
            return Err(BAD_ORDER.err());
        }
        let mut by_id: std::collections::HashMap<u64, Rule> =
            rules.list.drain(..).map(|r| (r.id, r)).collect();
        rules.list = ids.iter().filter_map(|i| by_id.remove(i)).collect();
        Ok(store_rules(ctx, rules, None))
    })
    .await
}

pub async fn delete_rule(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let id = rq.params.req_num_of(&ID)? as u64;
    mutate(app, rq, |ctx, _| {
        let mut rules = rules_of(&ctx.tree.docs);
        let at = rules.position(id).ok_or_else(|| NO_RULE.err())?;
        rules.list.remove(at);
        Ok(store_rules(ctx, rules, None).int("deleted", id.into()))
    })
    .await
}

pub async fn list_mappings(app: &App, rq: &Rq) -> Result<Obj, ApiError> {
    let st = snapshot(app, rq).await?;
    let rows = st.tree.docs.iter().filter_map(|(k, d)| match (mapping_name(k), &**d) {
        (Some(name), Doc::CsvMapping(m)) => Some(Obj::new().str("name", name).raw("mapping", m).finish()),
        _ => None,
    });
    Ok(Obj::new().raw("mappings", &array(rows.collect::<Vec<_>>())))
}

pub async fn save_mapping(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let p = &rq.params;
    let name = p.req_text_of(&NAME)?;
    let text = p.req_text_of(&MAPPING)?;
    p.check_lengths(SAVE_MAPPING.params)?;
    parse_mapping(&text)?;
    // Kept as compact JSON: what the client sent, re-serialised, so the answer and the list
    // carry it as an object.
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| ApiError::bad(format!("Invalid mapping: {e}")))?;
    let compact = value.to_string();
    mutate(app, rq, |ctx, _| {
        let key = mapping_key(&name);
        let count = ctx.tree.docs.keys().filter(|k| mapping_name(k).is_some()).count();
        if !ctx.tree.docs.contains_key(key.as_str()) && count >= MAX_MAPPINGS {
            return Err(TOO_MANY_MAPPINGS.err());
        }
        ctx.set_doc(key, Some(Doc::CsvMapping(Text::from(compact.as_str()))));
        Ok(Obj::new().str("name", &name).raw("mapping", &compact))
    })
    .await
}

pub async fn delete_mapping(app: &App, rq: &Rq) -> Result<Answer, ApiError> {
    let name = rq.params.req_text_of(&NAME)?;
    rq.params.check_lengths(DELETE_MAPPING.params)?;
    mutate(app, rq, |ctx, _| {
        let key = mapping_key(&name);
        if !ctx.tree.docs.contains_key(key.as_str()) {
            return Err(NO_MAPPING.err());
        }
        ctx.set_doc(key, None);
        Ok(Obj::new().str("deleted", &name))
    })
    .await
}
