//! The settings of the HTTP layer and their defaults. The binary's `cli` module fills an
//! [`HttpConfig`] from the command line; nothing here knows about flags.

use std::time::Duration;

/// Default cap on a request body (`--max-body-bytes`); larger ones get 413 unread.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Default cap on simultaneously open connections (`--max-connections`); more get 503.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default grace period for in-flight responses on SIGINT/SIGTERM (`--shutdown-grace`).
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Time allowed for a request head to arrive once it has begun (slowloris guard); then 408.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// An idle keep-alive connection is closed after this long without a new request.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Time allowed for a whole request body to arrive; then 408.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed for one write to be taken by the client before the connection is dropped.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Every setting of the HTTP layer.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Executor threads for all connections (`--io-threads`); at least 1.
    pub io_threads: usize,
    /// Connections open at once beyond which new ones get 503 (`--max-connections`).
    pub max_connections: usize,
    /// Largest request body accepted; larger ones get 413 unread (`--max-body-bytes`).
    pub max_body_bytes: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub write_timeout: Duration,
    /// How long in-flight responses may continue after shutdown starts (`--shutdown-grace`).
    pub shutdown_grace: Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            io_threads: 1,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}
