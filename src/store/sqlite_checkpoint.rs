//! The SQLite file's checkpoints, on a thread of their own.
//!
//! In WAL mode a commit appends to the log, and by default the commit that takes the log past
//! 1,000 pages also copies the log back into the database file and syncs it. That commit took
//! 4-12 ms instead of about 0.2: one write in a few hundred, so about one chat turn in a hundred
//! waited that long for its answer. Here a second connection copies the log back every
//! [`CHECKPOINT_EVERY`] without blocking the writer (a passive checkpoint), and the writer
//! checkpoints itself only if the log still outgrows [`WRITER_CHECKPOINT_PAGES`].

use super::StoreError;
use rusqlite::Connection;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a write waits for another process's lock on the file before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the log is copied back into the database file.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// Log pages past which a commit checkpoints on the writer's own connection after all: a bound
/// on the log (about 40 MB) should the checkpointer fall behind a long burst of writes.
pub const WRITER_CHECKPOINT_PAGES: u32 = 10_000;

/// Runs passive checkpoints until dropped; the drop waits for the one under way.
pub struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens a second connection to the file at `path` (already in WAL mode) and starts the
    /// thread; `writer` is the store's own connection, whose automatic checkpoints are moved to
    /// the bound above.
    pub fn start(path: &Path, writer: &Connection) -> Result<Checkpointer, StoreError> {
        let _pages: i64 =
            writer.query_row(&format!("PRAGMA wal_autocheckpoint={WRITER_CHECKPOINT_PAGES}"), [], |r| r.get(0))?;
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("mtplx-checkpoint".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(CHECKPOINT_EVERY) {
                    // (busy, log pages, pages copied); a busy or failed checkpoint is tried again
                    // at the next tick, and the writer's bound covers a checkpointer that never
                    // gets through.
                    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(0));
                }
            })
            .map_err(|e| StoreError::Backend(format!("cannot start the checkpoint thread: {e}")))?;
        Ok(Checkpointer { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of 3,000 bytes, each about a page: more than SQLite's default 1,000-page log.
    const ROWS: usize = 1_500;

    #[test]
    fn the_writer_leaves_the_log_to_the_checkpointer() {
        let dir = std::env::temp_dir().join(super::super::random_id("mtplx-ckpt-"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.db");
        let file_len = || std::fs::metadata(&path).unwrap().len();
        let writer = Connection::open(&path).unwrap();
        let _mode: String = writer.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).unwrap();
        // Started and stopped at once: the writer keeps only its raised bound.
        drop(Checkpointer::start(&path, &writer).unwrap());
        writer.execute_batch("CREATE TABLE t (v BLOB)").unwrap();
        for _ in 0..ROWS {
            writer.execute("INSERT INTO t VALUES (zeroblob(3000))", []).unwrap();
        }
        assert!(file_len() < 100_000, "the writer copied its log into the file itself: {} bytes", file_len());
        let ckpt = Checkpointer::start(&path, &writer).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while file_len() < (ROWS * 3000) as u64 {
            assert!(std::time::Instant::now() < deadline, "no checkpoint in 60 s: {} bytes", file_len());
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(ckpt);
        let n: i64 = writer.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(n, ROWS as i64);
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
