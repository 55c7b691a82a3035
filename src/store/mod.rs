//! Persisted chats: the storage trait, its two databases, and the thread that runs them.
//!
//! `Store` is the small synchronous interface both databases implement (`sqlite`,
//! `postgres`); `migrations` holds their versioned schemas; `db` runs one store on a thread of
//! its own, fed over a channel, so that no database call ever blocks an I/O thread; `url`
//! turns `--database` and `--data-dir` into which database to open. Imports only `metrics`.

#![forbid(unsafe_code)]

pub mod db;
pub mod migrations;
pub mod pg_cluster;
pub mod postgres;
pub mod sqlite;
mod sqlite_checkpoint;
pub mod url;

pub use db::Db;

use std::io::Read;

/// Most chats or messages one page holds (`page_size`).
pub const MAX_PAGE_SIZE: u32 = 100;

/// A chat as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chat {
    pub chat_id: String,
    /// Unix seconds.
    pub created_at: i64,
    pub title: Option<String>,
    pub system: Option<String>,
    /// The chat's sampling defaults, a JSON object as the API validated it.
    pub defaults: String,
    pub client_ip: Option<String>,
    pub country: Option<String>,
}

/// One message of a chat as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub message_id: String,
    pub chat_id: String,
    /// `user` or `assistant`.
    pub role: String,
    pub content: String,
    /// Unix seconds.
    pub created_at: i64,
    /// How an assistant answer ended: `stop`, `length`, `interrupted` or `error`.
    pub finish_reason: Option<String>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    /// The id of the metrics record of the turn the message belongs to.
    pub request_id: Option<String>,
}

/// A page: 1-based `page` of `size` entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    pub page: u32,
    pub size: u32,
}

impl Page {
    pub fn offset(self) -> i64 {
        (self.page.max(1) as i64 - 1) * self.size as i64
    }
}

/// A user message was stored: the chat and its whole conversation, the new message last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    pub chat: Chat,
    pub messages: Vec<Message>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// No chat has this id.
    NotFound(String),
    /// The chat's last message is a user message stored less than `lease_secs` ago: its answer
    /// is still being generated.
    Busy { chat_id: String, lease_secs: i64 },
    /// The database failed or refused; the text is its message.
    Backend(String),
    /// The store's thread is gone (the server is stopping).
    Closed,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::NotFound(id) => write!(f, "no chat has the id '{id}'"),
            StoreError::Busy { chat_id, lease_secs } => write!(
                f,
                "chat '{chat_id}' is still answering its last message; send the next one when that answer has ended (a turn holds the chat for at most {lease_secs} s)"
            ),
            StoreError::Backend(e) => write!(f, "database error: {e}"),
            StoreError::Closed => write!(f, "the database is closed: the server is stopping"),
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::Backend(e.to_string())
    }
}

impl From<::postgres::Error> for StoreError {
    fn from(e: ::postgres::Error) -> StoreError {
        StoreError::Backend(e.to_string())
    }
}

/// The storage interface both databases implement. Every write runs in one transaction.
pub trait Store: Send {
    fn create_chat(&mut self, chat: &Chat) -> Result<(), StoreError>;
    /// Newest first, and how many chats there are.
    fn list_chats(&mut self, page: Page) -> Result<(Vec<Chat>, u64), StoreError>;
    fn get_chat(&mut self, chat_id: &str) -> Result<Option<Chat>, StoreError>;
    /// Deletes the chat and its messages; false when there was none.
    fn delete_chat(&mut self, chat_id: &str) -> Result<bool, StoreError>;
    /// Stores a user message unless the chat is still answering (its last message a user message
    /// newer than `lease_secs`): `NotFound`, `Busy`, or the whole conversation.
    fn begin_turn(&mut self, user: &Message, lease_secs: i64) -> Result<Turn, StoreError>;
    /// Deletes the user message of a turn refused before its answer began, so that the chat is
    /// as it was before the turn; false when there was no such user message.
    fn withdraw_turn(&mut self, user_message_id: &str) -> Result<bool, StoreError>;
    /// Stores a message as it is (an assistant's answer); `NotFound` if the chat was deleted.
    fn append_message(&mut self, msg: &Message) -> Result<(), StoreError>;
    /// Oldest first, and how many messages the chat has; `NotFound` for an unknown chat.
    fn list_messages(&mut self, chat_id: &str, page: Page) -> Result<(Vec<Message>, u64), StoreError>;
}

/// Random bytes from the kernel, hex-encoded, behind `prefix`: 128 bits nobody can guess.
pub fn random_id(prefix: &str) -> String {
    let mut b = [0u8; 16];
    // /dev/urandom never blocks and never runs dry on Linux; failing to read it means the
    // system is broken beyond serving, and an id must never be guessable.
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("reading /dev/urandom for a random id");
    let mut s = String::with_capacity(prefix.len() + 32);
    s.push_str(prefix);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod contract;
