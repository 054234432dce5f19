//! Tests of the user cache (`super`): eviction, ordering of one user's writes, refused
//! commits.

use super::*;
use crate::store::journal::JournalStore;

#[test]
fn idle_users_are_dropped_from_the_cache_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(JournalStore::open(dir.path()).unwrap());
    let users = Users::with_budget(store, 0);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        for i in 0..500 {
            assert!(users.snapshot(&format!("user{i}")).await.unwrap().is_none());
        }
        // No budget: a user stays cached only until the next lookup in its shard.
        assert!(users.cached() <= SHARDS, "{}", users.cached());
        let held = users.lock("held").await.unwrap();
        for i in 0..500 {
            users.snapshot(&format!("other{i}")).await.unwrap();
        }
        // A slot in use is never dropped: the lock still excludes a second writer.
        let second = tokio::time::timeout(Duration::from_millis(50), users.lock("held")).await;
        assert!(second.is_err());
        drop(held);
    });
}

fn rec(no: u64, root: AccountId) -> UserRecord {
    UserRecord {
        user_id: "u".into(),
        user_no: no,
        password_hash: None,
        role: "user".into(),
        created_at: 0,
        root,
        ledger: crate::domain::tree::Ledger {
            initial_balance_cents: 500,
            deposits_cents: 0,
            withdrawals_cents: 0,
        },
    }
}

/// SPEC 13.2 item 4: writes of one user run one at a time, so a registration that comes
/// while the removal of the user is on its way runs after it. The removal failed, so the
/// user is still there (the registration answers "already exists"), whole.
#[test]
fn a_registration_behind_a_failed_removal_finds_the_user_still_there() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(JournalStore::open(dir.path()).unwrap());
    let store: Arc<dyn Store> = journal.clone();
    let users = Users::new(store);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let g = users.lock("u").await.unwrap();
        g.create(rec(1, 11), Tree::new_user(11, 500)).await.unwrap();
        // The removal's append fails, but only once `again` has taken the lock after it.
        let release = journal.fail_next_append_when_released();
        let held = users.lock("u").await.unwrap();
        let removal = held.delete_user();
        // join! polls in this order first: the removal queues and lets go of the lock, then
        // `again` takes it while the removal is in flight, then the failure is let through.
        let again = async {
            let g = users.lock("u").await.unwrap();
            match g.current.clone() {
                Some(cur) => Ok(cur),
                // No user seen: it registers over the removal in flight.
                None => Err(g.create(rec(2, 22), Tree::new_user(22, 500)).await),
            }
        };
        let let_fail = async { drop(release) };
        let (removed, found, ()) = tokio::join!(removal, again, let_fail);
        assert!(removed.is_err());
        let found = found.expect("the user is still there: no second registration");
        assert_eq!((found.user.user_no, found.tree.root), (1, 11));
        // The first user is whole, in memory and in storage.
        let st = users.snapshot("u").await.unwrap().expect("the user is still there");
        assert_eq!((st.user.user_no, st.tree.root), (1, 11));
        let (stored, tree) = users.store.load_user("u").await.unwrap().unwrap();
        assert_eq!((stored.user_no, tree.root), (1, 11));
    });
}

/// SPEC 13.2 item 10, in every build: a change that breaks money conservation is refused
/// before it is queued, and nothing of it is kept, in memory or in storage; the next write
/// goes on from the state before. Each broken change is built by hand, as an engine bug
/// would make it.
#[test]
fn a_change_that_breaks_the_ledger_is_refused_and_changes_nothing() {
    use crate::domain::engine::{Ctx, Mode, Origin, Posting};
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(JournalStore::open(dir.path()).unwrap());
    let users = Users::new(store);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        users.lock("u").await.unwrap().create(rec(1, 11), Tree::new_user(11, 500)).await.unwrap();
        let before = users.snapshot("u").await.unwrap().unwrap();
        type Breaks = fn(&mut Tree, &mut Change);
        let broken: [(&str, Breaks); 3] = [
            ("not what its ledger counts", |t, c| {
                // Money from nowhere: main holds 100 more, no deposit counted.
                let main = Arc::make_mut(t.accounts.get_mut(&11).unwrap());
                main.balance_cents += 100;
                main.sub_balance_cents += 100;
                c.accounts = vec![t.accounts[&11].clone()];
            }),
            ("not what its ledger counts", |t, c| {
                // A deposit counted that no account received.
                t.ledger.deposits_cents += 100;
                c.ledger = t.ledger.clone();
            }),
            ("is not the tree's", |_, c| {
                // The record would carry a ledger the tree does not.
                c.ledger.withdrawals_cents += 1;
            }),
        ];
        for (why, breaks) in broken {
            let g = users.lock("u").await.unwrap();
            let mut tree = g.current.clone().unwrap().tree.clone();
            let mut change = Change { ledger: tree.ledger.clone(), ..Change::default() };
            breaks(&mut tree, &mut change);
            let err = g.commit(change, tree).await.expect_err("a change that breaks the ledger");
            assert!(matches!(&err, StoreError::Invariant(m) if m.contains(why)), "{why}: {err}");
        }
        let kept = users.snapshot("u").await.unwrap().unwrap();
        assert_eq!(
            (kept.tree.ledger.clone(), kept.knowledge),
            (before.tree.ledger.clone(), before.knowledge)
        );
        assert_eq!(kept.tree.get(11).unwrap().sub_balance_cents, 500);
        let (stored, tree) = users.store.load_user("u").await.unwrap().unwrap();
        assert_eq!((stored.ledger, tree.get(11).unwrap().balance_cents), (before.user.ledger.clone(), 500));
        // A sound write right after goes through.
        let g = users.lock("u").await.unwrap();
        let mut tree = g.current.clone().unwrap().tree.clone();
        let mut ctx = Ctx::new(&mut tree, 0);
        let terms = Posting {
            amount_cents: 50,
            by: &Origin::User,
            channel: &"c".into(),
            txid: None,
            date_secs: 0,
            note: None,
        };
        ctx.deposit(11, terms, Mode::External).unwrap();
        let change = ctx.finish();
        g.commit(change, tree).await.unwrap();
        let (stored, tree) = users.store.load_user("u").await.unwrap().unwrap();
        assert_eq!((stored.ledger.deposits_cents, tree.get(11).unwrap().balance_cents), (50, 550));
    });
}

/// A failed registration leaves no user behind, so the next one registers: nothing of the
/// failed one (nor of the removal before it) is held against it.
#[test]
fn a_registration_after_a_failed_one_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(JournalStore::open(dir.path()).unwrap());
    let store: Arc<dyn Store> = journal.clone();
    let users = Users::new(store);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let g = users.lock("u").await.unwrap();
        g.create(rec(1, 11), Tree::new_user(11, 500)).await.unwrap();
        users.lock("u").await.unwrap().delete_user().await.unwrap();
        journal.fail_next_append();
        let g = users.lock("u").await.unwrap();
        assert!(g.current.is_none());
        assert!(g.create(rec(2, 22), Tree::new_user(22, 500)).await.is_err());
        let g = users.lock("u").await.unwrap();
        assert!(g.current.is_none());
        g.create(rec(3, 33), Tree::new_user(33, 500)).await.expect("a registration after a failed one");
        let st = users.snapshot("u").await.unwrap().expect("registered");
        assert_eq!((st.user.user_no, st.tree.root), (3, 33));
        let (stored, tree) = users.store.load_user("u").await.unwrap().unwrap();
        assert_eq!((stored.user_no, tree.root), (3, 33));
    });
}
