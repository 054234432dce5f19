//! When a user next needs the service without being asked: a scheduled occurrence to post, a
//! webhook delivery to send or a Bill's notice to make. Every write that could move it writes
//! it (`Change::wake`), into the index each node's waker reads (docs/webhooks.md).

use super::dates::day_of;
use super::docs::Doc;
use super::schedule::KEY_PREFIX as SCHEDULES;
use super::tree::Tree;

/// The earliest of them, in seconds; `None` when nothing will be due by itself.
pub fn next(tree: &Tree, now_secs: i64) -> Option<i64> {
    let today = day_of(now_secs);
    let schedules = super::docs::with_prefix(&tree.docs, SCHEDULES)
        .filter_map(|(_, d)| match &**d {
            Doc::Schedule(s) => s.wake_day(today),
            _ => None,
        })
        .min()
        .map(|d| d * 86_400);
    [schedules, super::events::wake_secs(tree, now_secs)].into_iter().flatten().min()
}

/// Whether a setting under `key` can move [`next`].
pub fn moves(key: &str) -> bool {
    key.starts_with(SCHEDULES)
        || key.starts_with(super::events::HOOK_PREFIX)
        || key.starts_with(super::events::OUT_PREFIX)
}
