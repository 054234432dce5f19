//! What a cached user costs in memory, estimated for the cache's budget (`--cache-mb`,
//! docs/storage.md, "The user cache"): the bytes its state asks the allocator for, from the
//! sizes of its structures and the lengths of what they hold, not measured. A load walks the
//! whole state once (it has just decoded all of it); a write re-counts only what it changed.
//!
//! `scripts/bench/memory_bench.sh` compares the estimate with resident memory.

use std::sync::Arc;

use crate::domain::docs::Doc;
use crate::domain::engine::Change;
use crate::domain::tree::{Account, AccountId, Text, Tree};

use super::idem_keys::IdemTable;
use super::users::UserState;
use super::{IdemRecord, UserRecord};

/// An allocation's header as counted here (an `Arc`'s two counts; mimalloc itself keeps no
/// header, and rounds to size classes 12.5 % apart at most).
const ARC: usize = 16;

/// Heap bytes of a text: only a shared one has any.
pub(crate) fn text(t: &Text) -> usize {
    match t {
        Text::Shared(s) => ARC + s.len(),
        _ => 0,
    }
}

/// One account: its `Arc`, its place in the tree's map, its children's ids, its texts and its
/// per-day history.
pub fn account(a: &Account) -> usize {
    ARC + size_of::<Account>()
        + size_of::<(AccountId, Arc<Account>)>() * 8 / 7
        + 1
        + a.children.capacity() * size_of::<AccountId>()
        + text(&a.name)
        + a.grand.as_ref().map_or(0, |g| text(&g.account_type))
        + a.days.heap_bytes()
        + a.track.heap_bytes()
}

/// One setting: its `Arc`, a place in the settings' B-tree, and about its encoded size (the
/// decoded form holds the same texts and numbers, in wider fields).
pub fn doc(key: &Text, d: &Doc) -> usize {
    let mut n = Count(0);
    let _ = bincode::serde::encode_into_std_write(d, &mut n, bincode::config::standard());
    ARC + size_of::<Doc>() + 2 * size_of::<(Text, Arc<Doc>)>() + text(key) + 2 * n.0
}

/// Counts the bytes written into it.
struct Count(usize);

impl std::io::Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn idem_record(r: &IdemRecord) -> usize {
    (size_of::<(String, IdemRecord)>() + 1) * 8 / 7 + 2 * r.key.len() + r.fingerprint.len() + r.body.len()
}

/// The kept idempotency keys (none: nothing, the table is not allocated).
pub fn idem(t: &IdemTable) -> usize {
    t.0.as_ref().map_or(0, |t| {
        ARC + size_of::<std::collections::HashMap<String, IdemRecord>>()
            + t.values().map(idem_record).sum::<usize>()
    })
}

fn user(u: &UserRecord) -> usize {
    text(&u.user_id) + u.password_hash.as_ref().map_or(0, text) + text(&u.role)
}

/// A whole state, walked once.
pub fn state(s: &UserState) -> usize {
    ARC + size_of::<UserState>()
        + user(&s.user)
        + s.tree.accounts.values().map(|a| account(a)).sum::<usize>()
        + ARC
        + s.tree.docs.iter().map(|(k, d)| doc(k, d)).sum::<usize>()
        + idem(&s.idem)
}

/// `cur`'s estimate after `change`, which made `next` of `cur.tree`: what it changed is
/// counted again, nothing else.
pub fn after(cur: &UserState, change: &Change, next: &Tree) -> usize {
    let mut ids: Vec<AccountId> =
        change.accounts.iter().map(|a| a.uuid).chain(change.removed.iter().map(|r| r.0)).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut keys: Vec<&Text> = change.docs.iter().map(|d| &d.0).collect();
    keys.sort_unstable();
    keys.dedup();
    let old = ids.iter().filter_map(|id| cur.tree.accounts.get(id)).map(|a| account(a)).sum::<usize>()
        + keys
            .iter()
            .filter_map(|k| cur.tree.docs.get_key_value(k.as_str()))
            .map(|(k, d)| doc(k, d))
            .sum::<usize>();
    let new = ids.iter().filter_map(|id| next.accounts.get(id)).map(|a| account(a)).sum::<usize>()
        + keys
            .iter()
            .filter_map(|k| next.docs.get_key_value(k.as_str()))
            .map(|(k, d)| doc(k, d))
            .sum::<usize>();
    (cur.bytes + new).saturating_sub(old)
}
