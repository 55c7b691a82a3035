//! Which database to open: `--database URL` (a SQLite path, `sqlite://PATH` or
//! `postgres://...`), else `chats.db` in `--data-dir`, else in the default data directory.

use std::path::{Path, PathBuf};

/// The SQLite file's name inside the data directory.
pub const SQLITE_FILE: &str = "chats.db";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseUrl {
    Sqlite(PathBuf),
    /// A libpq-style URL, passed to the client as given.
    Postgres(String),
}

impl DatabaseUrl {
    /// What to say at start: the SQLite path, or the PostgreSQL host without credentials.
    pub fn describe(&self) -> String {
        match self {
            DatabaseUrl::Sqlite(p) => format!("SQLite at {}", p.display()),
            DatabaseUrl::Postgres(u) => {
                let rest = u.split_once("://").map_or(u.as_str(), |(_, r)| r);
                let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
                format!("PostgreSQL at {}", host.split(['/', '?']).next().unwrap_or(""))
            }
        }
    }
}

/// `$XDG_DATA_HOME/mtplx-lite`, else `~/.local/share/mtplx-lite`.
pub fn default_data_dir() -> Result<PathBuf, String> {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("mtplx-lite"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".local/share/mtplx-lite")),
        None => Err("neither XDG_DATA_HOME nor HOME is set: pass --data-dir or --database".into()),
    }
}

/// The database the flags name.
pub fn resolve(database: Option<&str>, data_dir: Option<&Path>) -> Result<DatabaseUrl, String> {
    let Some(url) = database else {
        let dir = match data_dir {
            Some(d) => d.to_path_buf(),
            None => default_data_dir()?,
        };
        return Ok(DatabaseUrl::Sqlite(dir.join(SQLITE_FILE)));
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(DatabaseUrl::Postgres(url.to_string()));
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err("--database sqlite:// names no file; write sqlite://PATH".into());
        }
        return Ok(DatabaseUrl::Sqlite(PathBuf::from(path)));
    }
    if let Some((scheme, _)) = url.split_once("://") {
        return Err(format!(
            "--database: unknown scheme '{scheme}://'; use a SQLite path, sqlite://PATH or postgres://..."
        ));
    }
    if url.is_empty() {
        return Err("--database is empty".into());
    }
    Ok(DatabaseUrl::Sqlite(PathBuf::from(url)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_the_database() {
        let d = Path::new("/data");
        assert_eq!(resolve(None, Some(d)).unwrap(), DatabaseUrl::Sqlite("/data/chats.db".into()));
        assert_eq!(resolve(Some("x.db"), Some(d)).unwrap(), DatabaseUrl::Sqlite("x.db".into()));
        assert_eq!(resolve(Some("sqlite:///tmp/a.db"), None).unwrap(), DatabaseUrl::Sqlite("/tmp/a.db".into()));
        let pg = "postgres://u:secret@db.local:5432/chats";
        assert_eq!(resolve(Some(pg), None).unwrap(), DatabaseUrl::Postgres(pg.into()));
        assert_eq!(DatabaseUrl::Postgres(pg.into()).describe(), "PostgreSQL at db.local:5432");
        assert!(resolve(Some("mysql://x"), None).unwrap_err().contains("unknown scheme 'mysql://'"));
        assert!(resolve(Some("sqlite://"), None).is_err());
    }
}
