//! Whole-log answers whose logs change under them (src/api/logs.rs): a log that comes back
//! shorter than the answer's state says (its account was deleted since the snapshot) runs the
//! request once more, on the state after it; a log that keeps coming back short is a 500. Over
//! real HTTP, on the embedded engine with its log reads cut short on demand.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::proc;
use pfm::clock::ManualClock;
use pfm::domain::engine::TxRecord;
use pfm::domain::tree::{AccountId, Tree};
use pfm::store::users::Users;
use pfm::store::{BoxFuture, Op, Store, StoreError, SyncRow, UserMeta, UserRecord};
use serde_json::json;

/// The embedded engine, with the next `short` log reads missing their last record.
struct ShortLogs {
    inner: Arc<dyn Store>,
    short: AtomicUsize,
}

impl Store for ShortLogs {
    fn load_user<'a>(
        &'a self,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<(UserRecord, Tree)>, StoreError>> {
        self.inner.load_user(user_id)
    }
    fn read_log(
        &self,
        user_no: u64,
        acc: AccountId,
        from: u64,
        to: u64,
    ) -> BoxFuture<'_, Result<Vec<TxRecord>, StoreError>> {
        let cut = self.short.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        let read = self.inner.read_log(user_no, acc, from, to);
        Box::pin(async move {
            let mut recs = read.await?;
            if cut {
                recs.pop();
            }
            Ok(recs)
        })
    }
    fn load_meta(&self, user_no: u64) -> BoxFuture<'_, Result<UserMeta, StoreError>> {
        self.inner.load_meta(user_no)
    }
    fn read_changes(
        &self,
        user_no: u64,
        after: u64,
        upto: u64,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<SyncRow>, StoreError>> {
        self.inner.read_changes(user_no, after, upto, max)
    }
    fn main_txid_exists<'a>(&'a self, user_no: u64, id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.main_txid_exists(user_no, id)
    }
    fn new_user_no(&self) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.inner.new_user_no()
    }
    fn commit(&self, op: Box<Op>, basis: u64) -> BoxFuture<'static, Result<(), StoreError>> {
        self.inner.commit(op, basis)
    }
    fn healthy(&self) -> bool {
        self.inner.healthy()
    }
    fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush()
    }
}

#[test]
fn a_log_cut_short_under_its_answer_runs_the_request_again_then_fails_cleanly() {
    for stream_min_records in [100_000, 2] {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = pfm::config::Config::for_dir(dir.path());
        cfg.jwt_secret = Some(common::SECRET.into());
        cfg.stream_min_records = stream_min_records;
        let app = pfm::app::App::open(cfg, Arc::new(ManualClock::at_secs(common::T0))).unwrap();
        let Ok(mut app) = Arc::try_unwrap(app) else { panic!("a new app has one owner") };
        let store = Arc::new(ShortLogs { inner: app.users.store.clone(), short: AtomicUsize::new(0) });
        app.users = Users::new(store.clone());
        let tok = {
            let mut c = serde_json::Map::new();
            c.insert("user_id".into(), json!("cut"));
            c.insert("role".into(), json!("user"));
            app.jwt.sign(&c).unwrap()
        };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = std::thread::spawn(move || {
            rt.block_on(pfm::http::server::serve(Arc::new(app), listener, async {
                let _ = stopped.await;
            }))
        });
        let send = |method: &str, path: &str, body: &str| {
            proc::send(addr, method, path, Some(&tok), &[], body).unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        let main = send("POST", "/register", r#"{"user_id":"cut","initial_balance":0}"#).ok().s("uuid");
        for amount in ["1", "2", "3"] {
            send("POST", "/deposit", &format!(r#"{{"uuid":"{main}","amount":"{amount}","channel":"c"}}"#))
                .ok();
        }
        let txs = format!("/get_transactions?uuid={main}");
        let whole = send("GET", &txs, "");
        assert_eq!(whole.ok().json["transaction_count"], json!(3));
        let streamed = stream_min_records == 2;
        assert_eq!(whole.header("transfer-encoding") == Some("chunked"), streamed);
        // Cut once: the request runs again and answers the whole log.
        store.short.store(1, Ordering::SeqCst);
        let again = send("GET", &txs, "");
        assert_eq!((again.status, again.text.len()), (200, whole.text.len()), "{}", again.text);
        assert_eq!(again.json["transactions"], whole.json["transactions"]);
        let tree = send("GET", "/get_minimal_tree", "");
        store.short.store(1, Ordering::SeqCst);
        let tree_again = send("GET", "/get_minimal_tree", "");
        assert_eq!(tree_again.ok().json["minimal_tree"], tree.ok().json["minimal_tree"]);
        // Cut every time: an internal error, not a wrong answer.
        store.short.store(100, Ordering::SeqCst);
        send("GET", &txs, "").fails(500, "Transaction retrieval failed: internal error");
        store.short.store(0, Ordering::SeqCst);
        assert_eq!(send("GET", &txs, "").text.len(), whole.text.len());
        let _ = stop.send(());
        server.join().unwrap();
    }
}
