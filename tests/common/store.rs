//! A store that passes everything to another, with hooks for tests that need storage to
//! misbehave in one way (acknowledgements held back, logs read short).

use std::sync::Arc;

use pfm::domain::engine::TxRecord;
use pfm::domain::tree::{AccountId, Tree};
use pfm::store::{BoxFuture, Op, Store, StoreError, SyncRow, UserMeta, UserRecord, WriteTxn};

type ReadLogHook = dyn Fn(&mut Vec<TxRecord>) + Send + Sync;
type CommitHook = dyn Fn(BoxFuture<'static, Result<u64, StoreError>>) -> BoxFuture<'static, Result<u64, StoreError>>
    + Send
    + Sync;

pub struct Hooked {
    pub inner: Arc<dyn Store>,
    /// Sees the records of every log read before they are returned.
    pub read_log: Box<ReadLogHook>,
    /// Wraps the durability wait of every commit.
    pub commit: Box<CommitHook>,
}

impl Hooked {
    /// `inner` with no hook doing anything.
    pub fn new(inner: Arc<dyn Store>) -> Hooked {
        Hooked { inner, read_log: Box::new(|_| {}), commit: Box::new(|f| f) }
    }
}

impl Store for Hooked {
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
        let read = self.inner.read_log(user_no, acc, from, to);
        Box::pin(async move {
            let mut recs = read.await?;
            (self.read_log)(&mut recs);
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
    fn wake_users(&self, upto_secs: i64, max: usize) -> BoxFuture<'_, Result<Vec<String>, StoreError>> {
        self.inner.wake_users(upto_secs, max)
    }
    fn commit(
        &self,
        op: Box<Op>,
        basis: u64,
        held: Option<Box<dyn WriteTxn>>,
    ) -> BoxFuture<'static, Result<u64, StoreError>> {
        (self.commit)(self.inner.commit(op, basis, held))
    }
    fn healthy(&self) -> bool {
        self.inner.healthy()
    }
    fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush()
    }
}

/// A server on 127.0.0.1:0, on a runtime and a fresh data directory of its own, whose store is
/// the embedded one with the hooks `hook` sets; stopped when dropped.
pub struct HookedServer {
    pub addr: std::net::SocketAddr,
    /// A token of the user the server was started for.
    pub token: String,
    /// The server's app (its test hooks).
    pub app: Arc<pfm::app::App>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl HookedServer {
    pub fn start(
        user_id: &str,
        cfg: impl FnOnce(&mut pfm::config::Config),
        hook: impl FnOnce(&mut Hooked),
    ) -> HookedServer {
        let dir = tempfile::tempdir().unwrap();
        let mut c = pfm::config::Config::for_dir(dir.path());
        c.jwt_secret = Some(super::SECRET.into());
        cfg(&mut c);
        let clock = Arc::new(pfm::clock::ManualClock::at_secs(super::T0));
        let app = pfm::app::App::open(c, clock).unwrap();
        let Ok(mut app) = Arc::try_unwrap(app) else { panic!("a new app has one owner") };
        let mut store = Hooked::new(app.users.store.clone());
        hook(&mut store);
        app.users = pfm::store::users::Users::new(Arc::new(store));
        let mut claims = serde_json::Map::new();
        claims.insert("user_id".into(), user_id.into());
        claims.insert("role".into(), "user".into());
        let token = app.jwt.sign(&claims).unwrap();
        let app = Arc::new(app);
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = app.clone();
        let thread = std::thread::spawn(move || {
            rt.block_on(pfm::http::server::serve(served, listener, async {
                let _ = stopped.await;
            }))
        });
        HookedServer { addr, token, app, stop: Some(stop), thread: Some(thread), _dir: dir }
    }
}

impl Drop for HookedServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
