//! `Db`: one store on a thread of its own. The async side sends a closure over a channel and
//! awaits its answer; the thread runs the closures in order, so SQLite has exactly one writer
//! and no database call ever blocks an I/O thread.

use super::url::DatabaseUrl;
use super::{postgres::PgStore, sqlite::SqliteStore, Store, StoreError};
use crate::metrics::Metrics;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

type Work = Box<dyn FnOnce(&mut dyn Store) + Send>;

enum Job {
    Run(Work),
    /// Ends the thread once every job sent before it has run.
    Stop,
}

/// The handle the API holds. The queue is unbounded: each job belongs to a request in flight,
/// which the server's connection cap bounds.
pub struct Db {
    tx: async_channel::Sender<Job>,
    thread: Mutex<Option<JoinHandle<()>>>,
    metrics: Option<Arc<Metrics>>,
    /// `sqlite` or `postgres`, for messages.
    pub kind: &'static str,
}

impl Db {
    /// Opens the database on the calling thread (so that a bad URL or file is said at start),
    /// then hands it to the store's thread. `metrics` receives the write latency.
    pub fn open(url: &DatabaseUrl, metrics: Option<Arc<Metrics>>) -> Result<Db, StoreError> {
        let (store, kind): (Box<dyn Store>, _) = match url {
            DatabaseUrl::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| StoreError::Backend(format!("cannot create {}: {e}", dir.display())))?;
                }
                (Box::new(SqliteStore::open(path)?), "sqlite")
            }
            DatabaseUrl::Postgres(url) => (Box::new(PgStore::connect(url)?), "postgres"),
        };
        Ok(Db::with_store(store, kind, metrics))
    }

    pub fn with_store(mut store: Box<dyn Store>, kind: &'static str, metrics: Option<Arc<Metrics>>) -> Db {
        let (tx, rx) = async_channel::unbounded::<Job>();
        let thread = std::thread::Builder::new()
            .name("mtplx-store".into())
            .spawn(move || {
                while let Ok(Job::Run(work)) = rx.recv_blocking() {
                    work(&mut *store);
                }
            })
            .expect("spawning the store thread");
        Db { tx, thread: Mutex::new(Some(thread)), metrics, kind }
    }

    fn wrap<T: Send + 'static>(
        &self,
        write: bool,
        f: impl FnOnce(&mut dyn Store) -> Result<T, StoreError> + Send + 'static,
        reply: Option<async_channel::Sender<Result<T, StoreError>>>,
    ) -> Result<(), StoreError> {
        let metrics = if write { self.metrics.clone() } else { None };
        let work: Work = Box::new(move |s| {
            let t0 = Instant::now();
            let r = f(s);
            if let Some(m) = metrics {
                m.record_db_write(t0.elapsed());
            }
            if let Some(reply) = reply {
                let _ = reply.try_send(r);
            }
        });
        self.tx.try_send(Job::Run(work)).map_err(|_| StoreError::Closed)
    }

    /// Runs `f` on the store's thread and returns its answer. Once sent, `f` runs even if the
    /// caller stops waiting: a write is never half-done because a client left.
    pub async fn call<T: Send + 'static>(
        &self,
        write: bool,
        f: impl FnOnce(&mut dyn Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (tx, rx) = async_channel::bounded(1);
        self.wrap(write, f, Some(tx))?;
        rx.recv().await.map_err(|_| StoreError::Closed)?
    }

    /// Queues a write nobody waits for (from a `Drop`, where nothing can be awaited); its
    /// failure is reported on stderr.
    pub fn write_detached(
        &self,
        what: String,
        f: impl FnOnce(&mut dyn Store) -> Result<(), StoreError> + Send + 'static,
    ) {
        let f = move |s: &mut dyn Store| {
            if let Err(e) = f(s) {
                eprintln!("mtplx-lite: {what}: {e}");
            }
            Ok(())
        };
        if let Err(e) = self.wrap(true, f, None) {
            eprintln!("mtplx-lite: a write was dropped: {e}");
        }
    }

    /// Runs every job queued so far, then ends the store's thread (at shutdown: the last
    /// answers are written before the process exits).
    pub fn close(&self) {
        let _ = self.tx.try_send(Job::Stop);
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{contract, sqlite::SqliteStore, Page};
    use super::*;

    #[test]
    fn calls_run_on_the_store_thread_in_order_and_close_drains() {
        let db = Db::with_store(Box::new(SqliteStore::in_memory().unwrap()), "sqlite", None);
        smol::block_on(async {
            db.call(true, |s| s.create_chat(&contract::chat("c1"))).await.unwrap();
            let name = db.call(false, |_| Ok(std::thread::current().name().map(str::to_string))).await.unwrap();
            assert_eq!(name.as_deref(), Some("mtplx-store"));
        });
        for i in 0..20 {
            db.write_detached("test".into(), move |s| s.append_message(&contract::answer("c1", &format!("m{i}"), 1)));
        }
        let (tx, rx) = async_channel::bounded(1);
        db.wrap(false, |s| s.list_messages("c1", Page { page: 1, size: 100 }), Some(tx)).unwrap();
        db.close();
        assert_eq!(rx.try_recv().unwrap().unwrap().1, 20, "every queued write ran before close returned");
        let after = smol::block_on(db.call(false, |s| s.get_chat("c1")));
        assert_eq!(after, Err(StoreError::Closed));
    }
}
