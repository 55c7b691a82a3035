//! The versioned schema: one list of steps per database, the same versions in both. A database
//! records the versions it has run in `schema_version`; opening it runs the steps it lacks, each
//! in the transaction that records it, so a crash mid-migration leaves the previous version.

/// Step `n` (1-based) of the SQLite schema.
pub const SQLITE: &[&str] = &[
    // 1: chats and their messages. `seq` orders them (newest chat first, messages oldest first)
    // even within one second.
    "CREATE TABLE chats (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        chat_id TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL,
        title TEXT,
        system TEXT,
        defaults TEXT NOT NULL,
        client_ip TEXT,
        country TEXT
    );
    CREATE TABLE messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        message_id TEXT NOT NULL UNIQUE,
        chat_id TEXT NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        finish_reason TEXT,
        prompt_tokens INTEGER,
        completion_tokens INTEGER,
        request_id TEXT
    );
    CREATE INDEX messages_by_chat ON messages (chat_id, seq);",
];

/// Step `n` (1-based) of the PostgreSQL schema.
pub const POSTGRES: &[&str] = &[
    // 1: as SQLite's step 1.
    "CREATE TABLE chats (
        seq BIGSERIAL PRIMARY KEY,
        chat_id TEXT NOT NULL UNIQUE,
        created_at BIGINT NOT NULL,
        title TEXT,
        system TEXT,
        defaults TEXT NOT NULL,
        client_ip TEXT,
        country TEXT
    );
    CREATE TABLE messages (
        seq BIGSERIAL PRIMARY KEY,
        message_id TEXT NOT NULL UNIQUE,
        chat_id TEXT NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        finish_reason TEXT,
        prompt_tokens BIGINT,
        completion_tokens BIGINT,
        request_id TEXT
    );
    CREATE INDEX messages_by_chat ON messages (chat_id, seq);",
];

/// Creates the version table if it is missing (both databases spell this the same way).
pub const VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY)";

#[cfg(test)]
mod tests {
    #[test]
    fn both_databases_have_the_same_versions() {
        assert_eq!(super::SQLITE.len(), super::POSTGRES.len());
    }
}
