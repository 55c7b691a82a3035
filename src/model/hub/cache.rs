//! The Hugging Face cache, laid out as `huggingface_hub` lays it out, so that a file another tool
//! downloaded is found here and a file fetched here is found by other tools:
//! `hub/models--owner--repo/` holds `blobs/<etag>` (the bytes, named by the Hub's ETag: the
//! SHA-256 for LFS files), `snapshots/<commit>/<path>` (a relative link to the blob) and
//! `refs/<revision>` (the commit a branch or tag pointed to when last fetched). A download in
//! progress is `blobs/<etag>.incomplete`, which the next try resumes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The `hub` folder: `HF_HUB_CACHE`, else `HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`,
/// else `~/.cache/huggingface/hub`, in `huggingface_hub`'s order. An empty value counts as unset.
pub fn hub_dir(var: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = set("HF_HUB_CACHE") {
        return Some(d);
    }
    Some(hf_home(var)?.join("hub"))
}

/// `HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`: where
/// `huggingface-cli login` keeps its `token` too.
pub fn hf_home(var: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("HF_HOME")
        .or_else(|| set("XDG_CACHE_HOME").map(|x| x.join("huggingface")))
        .or_else(|| set("HOME").map(|h| h.join(".cache").join("huggingface")))
}

/// One repository's folder in the cache.
pub struct RepoDir {
    dir: PathBuf,
}

impl RepoDir {
    pub fn new(hub: &Path, repo: &str) -> RepoDir {
        RepoDir { dir: hub.join(format!("models--{}", repo.replace('/', "--"))) }
    }

    pub fn blob(&self, etag: &str) -> PathBuf {
        self.dir.join("blobs").join(etag)
    }

    pub fn incomplete(&self, etag: &str) -> PathBuf {
        self.dir.join("blobs").join(format!("{etag}.incomplete"))
    }

    pub fn snapshot(&self, commit: &str, file: &str) -> PathBuf {
        self.dir.join("snapshots").join(commit).join(file)
    }

    /// The commit `revision` names: itself if it is one, else what `refs/` last recorded.
    pub fn commit_of(&self, revision: &str) -> Option<String> {
        if is_commit(revision) {
            return Some(revision.to_string());
        }
        let c = std::fs::read_to_string(self.dir.join("refs").join(revision)).ok()?;
        Some(c.trim().to_string()).filter(|c| is_commit(c))
    }

    pub fn write_ref(&self, revision: &str, commit: &str) -> std::io::Result<()> {
        if revision == commit {
            return Ok(());
        }
        let path = self.dir.join("refs").join(revision);
        std::fs::create_dir_all(path.parent().unwrap_or(&self.dir))?;
        std::fs::write(path, commit)
    }

    /// Links `snapshots/<commit>/<file>` to its blob, relatively as `huggingface_hub` does, and
    /// gives the link's path.
    pub fn link(&self, commit: &str, file: &str, etag: &str) -> std::io::Result<PathBuf> {
        let at = self.snapshot(commit, file);
        std::fs::create_dir_all(at.parent().unwrap_or(&self.dir))?;
        let up = "../".repeat(2 + file.matches('/').count());
        let target = PathBuf::from(format!("{up}blobs/{etag}"));
        if std::fs::read_link(&at).is_ok_and(|t| t == target) {
            return Ok(at);
        }
        let _ = std::fs::remove_file(&at);
        #[cfg(unix)]
        std::os::unix::fs::symlink(&target, &at)?;
        #[cfg(not(unix))]
        std::fs::copy(self.blob(etag), &at).map(|_| ())?;
        Ok(at)
    }

    /// Every file of a cached snapshot, as paths inside the repository.
    pub fn snapshot_files(&self, commit: &str) -> Vec<String> {
        let root = self.dir.join("snapshots").join(commit);
        let mut out = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.exists() {
                    // `exists` follows the link: a snapshot entry whose blob is gone is no file.
                    if let Ok(rel) = p.strip_prefix(&root) {
                        out.push(rel.to_string_lossy().replace('\\', "/"));
                    }
                }
            }
        }
        out.sort();
        out
    }
}

/// A full commit id: 40 lower-case hex digits.
pub fn is_commit(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// An ETag that is a SHA-256 (an LFS file's), which the download is checked against.
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hub_folder_follows_huggingface_hubs_order() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
        };
        assert_eq!(hub_dir(&env(&[("HF_HUB_CACHE", "/c"), ("HF_HOME", "/h")])), Some("/c".into()));
        assert_eq!(hub_dir(&env(&[("HF_HUB_CACHE", ""), ("HF_HOME", "/h")])), Some("/h/hub".into()));
        assert_eq!(hub_dir(&env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/home/u")])), Some("/x/huggingface/hub".into()));
        assert_eq!(hub_dir(&env(&[("HOME", "/home/u")])), Some("/home/u/.cache/huggingface/hub".into()));
        assert_eq!(hub_dir(&env(&[])), None);
    }

    #[test]
    fn snapshots_link_to_blobs_and_refs_name_commits() {
        let tmp = std::env::temp_dir().join(format!("mtplx-hubcache-{}", std::process::id()));
        let r = RepoDir::new(&tmp, "own/repo");
        let commit = "0123456789abcdef0123456789abcdef01234567";
        std::fs::create_dir_all(r.blob("e").parent().unwrap()).unwrap();
        std::fs::write(r.blob("e"), b"bytes").unwrap();
        let at = r.link(commit, "sub/m.gguf", "e").unwrap();
        assert_eq!(std::fs::read(&at).unwrap(), b"bytes");
        assert!(at.starts_with(tmp.join("models--own--repo/snapshots").join(commit)));
        assert_eq!(r.snapshot_files(commit), ["sub/m.gguf"]);
        assert_eq!(r.commit_of("main"), None);
        r.write_ref("main", commit).unwrap();
        assert_eq!(r.commit_of("main").as_deref(), Some(commit));
        assert_eq!(r.commit_of(commit).as_deref(), Some(commit));
        std::fs::remove_file(r.blob("e")).unwrap();
        assert!(r.snapshot_files(commit).is_empty(), "a dangling link is no file");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
