//! The PostgreSQL store, through the synchronous `postgres` client on the store's own thread.
//! Several servers may share one database: migrations take an advisory lock, and a turn locks
//! its chat's row, so that two replicas never both start an answer for one chat.

use super::{migrations, Chat, Message, Page, Store, StoreError, Turn};
use postgres::{Client, NoTls, Row, Transaction};

/// The advisory lock key that serializes migrations between servers starting at once.
const MIGRATION_LOCK: i64 = 0x6d74_706c_7863;

pub struct PgStore {
    client: Client,
}

const CHAT_COLS: &str = "chat_id, created_at, title, system, defaults, client_ip, country";
const MSG_COLS: &str =
    "message_id, chat_id, role, content, created_at, finish_reason, prompt_tokens, completion_tokens, request_id";

fn chat_row(r: &Row) -> Chat {
    Chat {
        chat_id: r.get(0),
        created_at: r.get(1),
        title: r.get(2),
        system: r.get(3),
        defaults: r.get(4),
        client_ip: r.get(5),
        country: r.get(6),
    }
}

fn msg_row(r: &Row) -> Message {
    Message {
        message_id: r.get(0),
        chat_id: r.get(1),
        role: r.get(2),
        content: r.get(3),
        created_at: r.get(4),
        finish_reason: r.get(5),
        prompt_tokens: r.get(6),
        completion_tokens: r.get(7),
        request_id: r.get(8),
    }
}

impl PgStore {
    /// Connects (without TLS: the database is expected on a local or private network) and
    /// brings the schema up to date.
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        let client = Client::connect(url, NoTls)
            .map_err(|e| StoreError::Backend(format!("cannot connect to PostgreSQL: {e}")))?;
        let mut s = PgStore { client };
        s.migrate()?;
        Ok(s)
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        for (i, step) in migrations::POSTGRES.iter().enumerate() {
            let version = i as i32 + 1;
            let mut tx = self.client.transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
            tx.batch_execute(migrations::VERSION_TABLE)?;
            if tx.query_opt("SELECT version FROM schema_version WHERE version = $1", &[&version])?.is_none() {
                tx.batch_execute(step)?;
                tx.execute("INSERT INTO schema_version (version) VALUES ($1)", &[&version])?;
            }
            tx.commit()?;
        }
        Ok(())
    }

    /// The versions this database has run, in order.
    pub fn versions(&mut self) -> Result<Vec<i64>, StoreError> {
        let rows = self.client.query("SELECT version FROM schema_version ORDER BY version", &[])?;
        Ok(rows.iter().map(|r| r.get::<_, i32>(0) as i64).collect())
    }
}

fn get_chat(tx: &mut Transaction<'_>, chat_id: &str, lock: bool) -> Result<Option<Chat>, StoreError> {
    let q = format!("SELECT {CHAT_COLS} FROM chats WHERE chat_id = $1{}", if lock { " FOR UPDATE" } else { "" });
    Ok(tx.query_opt(&q, &[&chat_id])?.as_ref().map(chat_row))
}

fn insert_message(tx: &mut Transaction<'_>, m: &Message) -> Result<(), StoreError> {
    tx.execute(
        &format!("INSERT INTO messages ({MSG_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"),
        &[
            &m.message_id,
            &m.chat_id,
            &m.role,
            &m.content,
            &m.created_at,
            &m.finish_reason,
            &m.prompt_tokens,
            &m.completion_tokens,
            &m.request_id,
        ],
    )?;
    Ok(())
}

impl Store for PgStore {
    fn create_chat(&mut self, c: &Chat) -> Result<(), StoreError> {
        let mut tx = self.client.transaction()?;
        tx.execute(
            &format!("INSERT INTO chats ({CHAT_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"),
            &[&c.chat_id, &c.created_at, &c.title, &c.system, &c.defaults, &c.client_ip, &c.country],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn list_chats(&mut self, page: Page) -> Result<(Vec<Chat>, u64), StoreError> {
        let mut tx = self.client.build_transaction().read_only(true).start()?;
        let total: i64 = tx.query_one("SELECT COUNT(*) FROM chats", &[])?.get(0);
        let rows = tx.query(
            &format!("SELECT {CHAT_COLS} FROM chats ORDER BY seq DESC LIMIT $1 OFFSET $2"),
            &[&(page.size as i64), &page.offset()],
        )?;
        tx.commit()?;
        Ok((rows.iter().map(chat_row).collect(), total as u64))
    }

    fn get_chat(&mut self, chat_id: &str) -> Result<Option<Chat>, StoreError> {
        let mut tx = self.client.transaction()?;
        let c = get_chat(&mut tx, chat_id, false)?;
        tx.commit()?;
        Ok(c)
    }

    fn delete_chat(&mut self, chat_id: &str) -> Result<bool, StoreError> {
        let mut tx = self.client.transaction()?;
        let n = tx.execute("DELETE FROM chats WHERE chat_id = $1", &[&chat_id])?;
        tx.execute("DELETE FROM messages WHERE chat_id = $1", &[&chat_id])?;
        tx.commit()?;
        Ok(n > 0)
    }

    fn begin_turn(&mut self, user: &Message, lease_secs: i64) -> Result<Turn, StoreError> {
        let mut tx = self.client.transaction()?;
        // The row lock makes turns of one chat take their turn, across servers too.
        let chat = get_chat(&mut tx, &user.chat_id, true)?.ok_or_else(|| StoreError::NotFound(user.chat_id.clone()))?;
        let last = tx.query_opt(
            "SELECT role, created_at FROM messages WHERE chat_id = $1 ORDER BY seq DESC LIMIT 1",
            &[&user.chat_id],
        )?;
        if let Some(r) = last {
            let (role, at): (String, i64) = (r.get(0), r.get(1));
            if role == "user" && user.created_at - at < lease_secs {
                return Err(StoreError::Busy { chat_id: user.chat_id.clone(), lease_secs });
            }
        }
        insert_message(&mut tx, user)?;
        let rows =
            tx.query(&format!("SELECT {MSG_COLS} FROM messages WHERE chat_id = $1 ORDER BY seq"), &[&user.chat_id])?;
        tx.commit()?;
        Ok(Turn { chat, messages: rows.iter().map(msg_row).collect() })
    }

    fn withdraw_turn(&mut self, user_message_id: &str) -> Result<bool, StoreError> {
        let mut tx = self.client.transaction()?;
        let n = tx.execute("DELETE FROM messages WHERE message_id = $1 AND role = 'user'", &[&user_message_id])?;
        tx.commit()?;
        Ok(n > 0)
    }

    fn append_message(&mut self, m: &Message) -> Result<(), StoreError> {
        let mut tx = self.client.transaction()?;
        if get_chat(&mut tx, &m.chat_id, true)?.is_none() {
            return Err(StoreError::NotFound(m.chat_id.clone()));
        }
        insert_message(&mut tx, m)?;
        tx.commit()?;
        Ok(())
    }

    fn list_messages(&mut self, chat_id: &str, page: Page) -> Result<(Vec<Message>, u64), StoreError> {
        let mut tx = self.client.build_transaction().read_only(true).start()?;
        if get_chat(&mut tx, chat_id, false)?.is_none() {
            return Err(StoreError::NotFound(chat_id.to_string()));
        }
        let total: i64 = tx.query_one("SELECT COUNT(*) FROM messages WHERE chat_id = $1", &[&chat_id])?.get(0);
        let rows = tx.query(
            &format!("SELECT {MSG_COLS} FROM messages WHERE chat_id = $1 ORDER BY seq LIMIT $2 OFFSET $3"),
            &[&chat_id, &(page.size as i64), &page.offset()],
        )?;
        tx.commit()?;
        Ok((rows.iter().map(msg_row).collect(), total as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{contract, pg_cluster::PgCluster};
    use super::*;

    #[test]
    fn honours_the_store_contract_on_a_real_server() {
        let cluster = PgCluster::start().unwrap_or_else(|e| panic!("{e}"));
        let url = cluster.url();
        let mut fresh = || -> Box<dyn Store> {
            let mut s = PgStore::connect(&url).unwrap();
            s.client.batch_execute("TRUNCATE chats, messages").unwrap();
            Box::new(s)
        };
        contract::run_all(&mut fresh);
        // Reconnecting runs no migration twice.
        let mut s = PgStore::connect(&url).unwrap();
        assert_eq!(s.versions().unwrap(), (1..=migrations::POSTGRES.len() as i64).collect::<Vec<_>>());
    }
}
