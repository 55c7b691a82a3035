//! The Hub's HTTP interface, as far as fetching a model needs it: a repository's file list
//! (`/api/models/{repo}/revision/{rev}`), a file's metadata (`HEAD .../resolve/{rev}/{file}`:
//! its commit, ETag and size, and where its bytes are) and its bytes, resumed with `Range`
//! where a transfer was cut.

use super::{HubConfig, HubError, Report};
use crate::model::sha256::{hex, Sha256};
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::Duration;

/// How long to wait for a connection to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one read may stall before the transfer counts as cut (and is resumed).
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Redirects followed for a file's bytes (the Hub sends one, to its CDN).
const MAX_REDIRECTS: u32 = 10;
/// Tries for one file's bytes, each resuming where the last stopped.
pub const MAX_TRIES: u32 = 5;

/// The repository's listing, as `/api/models/{repo}/revision/{rev}` gives it.
#[derive(serde::Deserialize)]
struct RepoInfo {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(serde::Deserialize)]
struct Sibling {
    rfilename: String,
}

/// What `HEAD .../resolve/{rev}/{file}` says of a file.
pub struct FileMeta {
    pub commit: Option<String>,
    /// Quotes and a weak `W/` taken off; an LFS file's is its SHA-256.
    pub etag: String,
    pub size: Option<u64>,
    /// Where the bytes are: the redirect's target, else the resolve address itself.
    pub url: String,
}

pub struct Client<'a> {
    cfg: &'a HubConfig,
    /// Follows no redirect, to read the Hub's headers on its redirect.
    head: ureq::Agent,
    get: ureq::Agent,
}

impl<'a> Client<'a> {
    pub fn new(cfg: &'a HubConfig) -> Client<'a> {
        let agent = |redirects: u32| -> ureq::Agent {
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(redirects)
                .max_redirects_will_error(false)
                .timeout_connect(Some(CONNECT_TIMEOUT))
                .timeout_per_read(Some(READ_TIMEOUT))
                .user_agent(format!("mtplx-lite/{}", env!("CARGO_PKG_VERSION")))
                .build()
                .into()
        };
        Client { cfg, head: agent(0), get: agent(MAX_REDIRECTS) }
    }

    /// The repository's files at `revision`, and the commit it names.
    pub fn list(&self, repo: &str, revision: &str) -> Result<(Vec<String>, Option<String>), HubError> {
        let url = format!("{}/api/models/{repo}/revision/{}", self.cfg.endpoint, encode(revision));
        let resp = self.send(self.get.get(&url), &url)?;
        let resp = check(resp, &url, repo, None)?;
        let text = resp.into_body().read_to_string().map_err(|e| unreachable(&url, e))?;
        let info: RepoInfo = serde_json::from_str(&text)
            .map_err(|e| HubError::BadAnswer { url: url.clone(), detail: format!("not a repository listing: {e}") })?;
        Ok((info.siblings.into_iter().map(|s| s.rfilename).collect(), info.sha))
    }

    /// A file's metadata. Redirects within the Hub (a renamed repository) are followed here;
    /// the first to another place is where the bytes are.
    pub fn meta(&self, repo: &str, revision: &str, file: &str) -> Result<FileMeta, HubError> {
        let mut url = format!("{}/{repo}/resolve/{}/{}", self.cfg.endpoint, encode(revision), encode(file));
        for _ in 0..MAX_REDIRECTS {
            let resp = self.send(self.head.head(&url).header("Accept-Encoding", "identity"), &url)?;
            let h = |k: &str| resp.headers().get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
            let (location, linked_etag, etag, linked_size, length, commit) = (
                h("location"),
                h("x-linked-etag"),
                h("etag"),
                h("x-linked-size"),
                h("content-length"),
                h("x-repo-commit"),
            );
            let status = resp.status().as_u16();
            if (300..400).contains(&status)
                && location.as_deref().is_some_and(|l| l.starts_with('/'))
                && linked_etag.is_none()
            {
                url = format!("{}{}", origin(&self.cfg.endpoint), location.unwrap_or_default());
                continue;
            }
            if !(300..400).contains(&status) {
                check(resp, &url, repo, Some(file))?;
            }
            let etag = linked_etag.or(etag).map(|e| e.trim_start_matches("W/").trim_matches('"').to_string());
            let Some(etag) = etag.filter(|e| !e.is_empty() && !e.contains(['/', '\\', '.'])) else {
                return Err(HubError::BadAnswer {
                    url,
                    detail: "no usable ETag, which names the file in the cache".into(),
                });
            };
            let size = linked_size.or(length).and_then(|s| s.parse().ok());
            let url = match location {
                Some(l) if l.starts_with('/') => format!("{}{l}", origin(&self.cfg.endpoint)),
                Some(l) => l,
                None => url,
            };
            return Ok(FileMeta { commit, etag, size, url });
        }
        Err(HubError::BadAnswer { url, detail: format!("more than {MAX_REDIRECTS} redirects") })
    }

    /// Fetches `meta`'s bytes into `part`, resuming from what it already holds, trying again
    /// where a transfer is cut; checks the size and, for an LFS file, the SHA-256.
    pub fn download(&self, meta: &FileMeta, part: &Path, label: &str, report: &mut dyn Report) -> Result<(), HubError> {
        let io = |e: std::io::Error| HubError::Io { path: part.to_path_buf(), err: e };
        let mut file = std::fs::OpenOptions::new().create(true).append(true).read(true).open(part).map_err(io)?;
        let mut hasher = Sha256::default();
        let mut have = hash_existing(&mut file, &mut hasher).map_err(io)?;
        if meta.size.is_some_and(|s| have > s) {
            // Longer than the file: not a prefix of it. Start over.
            file.set_len(0).map_err(io)?;
            (hasher, have) = (Sha256::default(), 0);
        }
        let mut last_err = String::new();
        for attempt in 1..=MAX_TRIES {
            if meta.size.is_some_and(|s| have >= s) {
                break;
            }
            if attempt > 1 {
                report.line(&format!(
                    "{label}: transfer cut at {have} bytes ({last_err}); resuming, try {attempt} of {MAX_TRIES}"
                ));
                std::thread::sleep(Duration::from_millis(250 * u64::from(attempt - 1)));
                last_err.clear();
            }
            let mut req = self.get.get(&meta.url).header("Accept-Encoding", "identity");
            if have > 0 {
                req = req.header("Range", format!("bytes={have}-"));
            }
            let resp = match self.send(req, &meta.url) {
                Ok(r) => r,
                Err(e) => {
                    last_err = e.to_string();
                    continue;
                }
            };
            match resp.status().as_u16() {
                206 => {}
                200 if have == 0 => {}
                200 => {
                    // The server sent the whole file again: start over.
                    file.set_len(0).map_err(io)?;
                    hasher = Sha256::default();
                    have = 0;
                }
                // Where the bytes are is no repository: its refusal is a plain status (the
                // Hub's own answers were checked by `meta`).
                status => return Err(HubError::Status { url: meta.url.clone(), status }),
            }
            let mut body = resp.into_body().into_reader();
            let mut buf = vec![0u8; 1 << 20];
            let total = meta.size.unwrap_or(0);
            loop {
                match body.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        file.write_all(&buf[..n]).map_err(io)?;
                        hasher.update(&buf[..n]);
                        have += n as u64;
                        report.progress(label, have, total);
                    }
                    Err(e) => {
                        last_err = e.to_string();
                        break;
                    }
                }
            }
            if meta.size.is_none() && last_err.is_empty() {
                break;
            }
        }
        file.sync_all().map_err(io)?;
        if let Some(size) = meta.size.filter(|&s| have != s) {
            return Err(HubError::Interrupted {
                file: label.to_string(),
                have,
                size,
                tries: MAX_TRIES,
                detail: last_err,
            });
        }
        let found = hex(&hasher.finish());
        if super::cache::is_sha256(&meta.etag) && found != meta.etag {
            let _ = std::fs::remove_file(part);
            return Err(HubError::Checksum { file: label.to_string(), expected: meta.etag.clone(), found });
        }
        Ok(())
    }

    fn send(
        &self,
        mut req: ureq::RequestBuilder<ureq::typestate::WithoutBody>,
        url: &str,
    ) -> Result<ureq::http::Response<ureq::Body>, HubError> {
        if let Some(t) = self.cfg.token.as_deref().filter(|_| url.starts_with(&origin(&self.cfg.endpoint))) {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        req.call().map_err(|e| unreachable(url, e))
    }
}

/// Reads what `file` already holds into `hasher`, and gives its length.
fn hash_existing(file: &mut std::fs::File, hasher: &mut Sha256) -> std::io::Result<u64> {
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut have = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(have);
        }
        hasher.update(&buf[..n]);
        have += n as u64;
    }
}

/// The response if it succeeded; else the error its status and the Hub's `X-Error-Code` mean.
fn check(
    resp: ureq::http::Response<ureq::Body>,
    url: &str,
    repo: &str,
    file: Option<&str>,
) -> Result<ureq::http::Response<ureq::Body>, HubError> {
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(resp);
    }
    let code = resp.headers().get("x-error-code").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let repo = repo.to_string();
    Err(match (status, code.as_str()) {
        (_, "GatedRepo") | (401 | 403, "") => HubError::Unauthorized { repo, status },
        (_, "RepoNotFound") | (404, "") if file.is_none() => HubError::RepoNotFound { repo },
        (_, "EntryNotFound") | (404, _) => {
            HubError::NoSuchFile { repo, file: file.unwrap_or("?").to_string(), files: vec![] }
        }
        (_, "RevisionNotFound") => HubError::RepoNotFound { repo },
        (401, _) => HubError::RepoNotFound { repo },
        _ => HubError::Status { url: url.to_string(), status },
    })
}

fn unreachable(url: &str, e: ureq::Error) -> HubError {
    HubError::Unreachable { url: url.to_string(), detail: e.to_string() }
}

/// `scheme://host[:port]` of an address.
fn origin(url: &str) -> String {
    let after = url.find("://").map_or(0, |i| i + 3);
    let end = url[after..].find('/').map_or(url.len(), |i| after + i);
    url[..end].to_string()
}

/// Percent-encodes what is not unreserved in a path (slashes kept).
fn encode(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_path_encoding() {
        assert_eq!(origin("https://huggingface.co/a/b"), "https://huggingface.co");
        assert_eq!(origin("http://127.0.0.1:9/x"), "http://127.0.0.1:9");
        assert_eq!(origin("http://h"), "http://h");
        assert_eq!(encode("sub dir/m+1.gguf"), "sub%20dir/m%2B1.gguf");
    }
}
