//! The SQLite store: one file in WAL mode, written in immediate transactions.
//!
//! WAL with `synchronous=NORMAL` keeps every committed transaction across a crash of the
//! process (`kill -9`); only a power loss may take back the last commits. Immediate
//! transactions take the write lock at `BEGIN`, so that two processes sharing a file queue
//! behind `busy_timeout` instead of failing on a lock upgrade.

use super::sqlite_checkpoint::{Checkpointer, BUSY_TIMEOUT};
use super::{migrations, Chat, Message, Page, Store, StoreError, Turn};
use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};
use std::path::Path;

pub struct SqliteStore {
    conn: Connection,
    /// Dropped after `conn`: a file's checkpoints (`None` in memory).
    _checkpointer: Option<Checkpointer>,
}

const CHAT_COLS: &str = "chat_id, created_at, title, system, defaults, client_ip, country";
const MSG_COLS: &str =
    "message_id, chat_id, role, content, created_at, finish_reason, prompt_tokens, completion_tokens, request_id";

fn chat_row(r: &Row<'_>) -> rusqlite::Result<Chat> {
    Ok(Chat {
        chat_id: r.get(0)?,
        created_at: r.get(1)?,
        title: r.get(2)?,
        system: r.get(3)?,
        defaults: r.get(4)?,
        client_ip: r.get(5)?,
        country: r.get(6)?,
    })
}

fn msg_row(r: &Row<'_>) -> rusqlite::Result<Message> {
    Ok(Message {
        message_id: r.get(0)?,
        chat_id: r.get(1)?,
        role: r.get(2)?,
        content: r.get(3)?,
        created_at: r.get(4)?,
        finish_reason: r.get(5)?,
        prompt_tokens: r.get(6)?,
        completion_tokens: r.get(7)?,
        request_id: r.get(8)?,
    })
}

impl SqliteStore {
    /// Opens (creating it if needed) the database file and brings its schema up to date.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let conn = Connection::open(path)
            .map_err(|e| StoreError::Backend(format!("cannot open SQLite database {}: {e}", path.display())))?;
        let mut s = Self::setup(conn)?;
        s._checkpointer = Some(Checkpointer::start(path, &s.conn)?);
        Ok(s)
    }

    /// A private database in memory, for tests.
    pub fn in_memory() -> Result<SqliteStore, StoreError> {
        Self::setup(Connection::open_in_memory()?)
    }

    fn setup(conn: Connection) -> Result<SqliteStore, StoreError> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // `journal_mode` answers with the mode in force; a memory database stays `memory`.
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        conn.execute_batch("PRAGMA synchronous=NORMAL")?;
        let mut s = SqliteStore { conn, _checkpointer: None };
        s.migrate()?;
        Ok(s)
    }

    /// Runs the schema steps this database lacks, each in its own transaction with its version.
    fn migrate(&mut self) -> Result<(), StoreError> {
        for (i, step) in migrations::SQLITE.iter().enumerate() {
            let version = i as i64 + 1;
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute_batch(migrations::VERSION_TABLE)?;
            let done: Option<i64> = tx
                .query_row("SELECT version FROM schema_version WHERE version = ?1", [version], |r| r.get(0))
                .optional()?;
            if done.is_none() {
                tx.execute_batch(step)?;
                tx.execute("INSERT INTO schema_version (version) VALUES (?1)", [version])?;
            }
            tx.commit()?;
        }
        Ok(())
    }

    /// The versions this database has run, in order.
    pub fn versions(&self) -> Result<Vec<i64>, StoreError> {
        let mut st = self.conn.prepare("SELECT version FROM schema_version ORDER BY version")?;
        let v = st.query_map([], |r| r.get(0))?.collect::<Result<Vec<i64>, _>>()?;
        Ok(v)
    }
}

fn insert_message(tx: &rusqlite::Transaction<'_>, m: &Message) -> Result<(), StoreError> {
    tx.prepare_cached(&format!("INSERT INTO messages ({MSG_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"))?
        .execute(params![
            m.message_id,
            m.chat_id,
            m.role,
            m.content,
            m.created_at,
            m.finish_reason,
            m.prompt_tokens,
            m.completion_tokens,
            m.request_id
        ])?;
    Ok(())
}

fn get_chat(conn: &Connection, chat_id: &str) -> Result<Option<Chat>, StoreError> {
    let mut st = conn.prepare_cached(&format!("SELECT {CHAT_COLS} FROM chats WHERE chat_id = ?1"))?;
    Ok(st.query_row([chat_id], chat_row).optional()?)
}

impl Store for SqliteStore {
    fn create_chat(&mut self, c: &Chat) -> Result<(), StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            &format!("INSERT INTO chats ({CHAT_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
            params![c.chat_id, c.created_at, c.title, c.system, c.defaults, c.client_ip, c.country],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn list_chats(&mut self, page: Page) -> Result<(Vec<Chat>, u64), StoreError> {
        let tx = self.conn.transaction()?;
        let total: i64 = tx.query_row("SELECT COUNT(*) FROM chats", [], |r| r.get(0))?;
        let chats = {
            let mut st = tx.prepare(&format!("SELECT {CHAT_COLS} FROM chats ORDER BY seq DESC LIMIT ?1 OFFSET ?2"))?;
            let rows = st.query_map(params![page.size as i64, page.offset()], chat_row)?;
            rows.collect::<Result<Vec<_>, _>>()?
        };
        tx.commit()?;
        Ok((chats, total as u64))
    }

    fn get_chat(&mut self, chat_id: &str) -> Result<Option<Chat>, StoreError> {
        get_chat(&self.conn, chat_id)
    }

    fn delete_chat(&mut self, chat_id: &str) -> Result<bool, StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx.execute("DELETE FROM chats WHERE chat_id = ?1", [chat_id])?;
        tx.execute("DELETE FROM messages WHERE chat_id = ?1", [chat_id])?;
        tx.commit()?;
        Ok(n > 0)
    }

    fn begin_turn(&mut self, user: &Message, lease_secs: i64) -> Result<Turn, StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let chat = get_chat(&tx, &user.chat_id)?.ok_or_else(|| StoreError::NotFound(user.chat_id.clone()))?;
        let last: Option<(String, i64)> = tx
            .prepare_cached("SELECT role, created_at FROM messages WHERE chat_id = ?1 ORDER BY seq DESC LIMIT 1")?
            .query_row([&user.chat_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        if let Some((role, at)) = last {
            if role == "user" && user.created_at - at < lease_secs {
                return Err(StoreError::Busy { chat_id: user.chat_id.clone(), lease_secs });
            }
        }
        insert_message(&tx, user)?;
        let messages = {
            let mut st =
                tx.prepare_cached(&format!("SELECT {MSG_COLS} FROM messages WHERE chat_id = ?1 ORDER BY seq"))?;
            let rows = st.query_map([&user.chat_id], msg_row)?;
            rows.collect::<Result<Vec<_>, _>>()?
        };
        tx.commit()?;
        Ok(Turn { chat, messages })
    }

    fn withdraw_turn(&mut self, user_message_id: &str) -> Result<bool, StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx.execute("DELETE FROM messages WHERE message_id = ?1 AND role = 'user'", [user_message_id])?;
        tx.commit()?;
        Ok(n > 0)
    }

    fn append_message(&mut self, m: &Message) -> Result<(), StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if get_chat(&tx, &m.chat_id)?.is_none() {
            return Err(StoreError::NotFound(m.chat_id.clone()));
        }
        insert_message(&tx, m)?;
        tx.commit()?;
        Ok(())
    }

    fn list_messages(&mut self, chat_id: &str, page: Page) -> Result<(Vec<Message>, u64), StoreError> {
        let tx = self.conn.transaction()?;
        if get_chat(&tx, chat_id)?.is_none() {
            return Err(StoreError::NotFound(chat_id.to_string()));
        }
        let total: i64 = tx.query_row("SELECT COUNT(*) FROM messages WHERE chat_id = ?1", [chat_id], |r| r.get(0))?;
        let msgs = {
            let mut st = tx.prepare(&format!(
                "SELECT {MSG_COLS} FROM messages WHERE chat_id = ?1 ORDER BY seq LIMIT ?2 OFFSET ?3"
            ))?;
            let rows = st.query_map(params![chat_id, page.size as i64, page.offset()], msg_row)?;
            rows.collect::<Result<Vec<_>, _>>()?
        };
        tx.commit()?;
        Ok((msgs, total as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::super::contract;
    use super::*;

    #[test]
    fn honours_the_store_contract() {
        contract::run_all(&mut || Box::new(SqliteStore::in_memory().unwrap()));
    }

    #[test]
    fn migrations_are_idempotent_and_reopening_keeps_data() {
        let dir = std::env::temp_dir().join(format!("mtplx-sqlite-{}", super::super::random_id("")));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("chats.db");
        let chat = contract::chat("c1");
        {
            let mut s = SqliteStore::open(&path).unwrap();
            s.create_chat(&chat).unwrap();
            s.begin_turn(&contract::user("c1", "m1", 100), 60).unwrap();
        }
        for _ in 0..2 {
            let mut s = SqliteStore::open(&path).unwrap();
            assert_eq!(s.versions().unwrap(), (1..=migrations::SQLITE.len() as i64).collect::<Vec<_>>());
            assert_eq!(s.get_chat("c1").unwrap(), Some(chat.clone()));
            let (msgs, total) = s.list_messages("c1", Page { page: 1, size: 10 }).unwrap();
            assert_eq!((total, msgs[0].message_id.as_str()), (1, "m1"));
        }
        let mode: String =
            SqliteStore::open(&path).unwrap().conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_leaves_nothing_behind() {
        let mut s = SqliteStore::in_memory().unwrap();
        s.create_chat(&contract::chat("c1")).unwrap();
        s.begin_turn(&contract::user("c1", "m1", 100), 60).unwrap();
        // A duplicate message id fails inside the turn's transaction, after the checks.
        let dup = contract::user("c1", "m1", 1000);
        assert!(matches!(s.begin_turn(&dup, 60), Err(StoreError::Backend(_))));
        assert_eq!(s.list_messages("c1", Page { page: 1, size: 10 }).unwrap().1, 1);
        // A chat id taken already fails whole.
        assert!(s.create_chat(&contract::chat("c1")).is_err());
        assert_eq!(s.list_chats(Page { page: 1, size: 10 }).unwrap().1, 1);
    }
}
