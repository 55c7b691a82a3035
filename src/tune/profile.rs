//! The tune profile: what `mtplx-lite tune` measured for one model file at one thread count,
//! as a small JSON file (typed: every field below, a `version`, nothing else). The server turns
//! it into the engine's [`SpecPrior`]; `startup.rs` decides what a missing, foreign or broken
//! profile does.

use super::verdict::{acceptance, mean};
use crate::engine::draft::MAX_DRAFT_DEPTH;
use crate::engine::SpecPrior;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// The profile format's version; a file of another version is ignored, not misread.
pub const PROFILE_VERSION: u32 = 1;
/// Most row counts a profile's pass costs may give: the engine's cost model tracks no more.
pub const MAX_PROFILE_ROWS: usize = 64;
/// Largest profile file read, in bytes: a real one is a few kilobytes.
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// A model file (or Hugging Face directory) by name and size: cheap to check at every start,
/// unlike a hash of gigabytes, and it changes when the file is replaced by another build.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileKey {
    pub name: String,
    pub bytes: u64,
}

impl FileKey {
    /// A file's name and size; a directory's name and the total size of the files in it.
    pub fn of(path: &Path) -> std::io::Result<FileKey> {
        let meta = std::fs::metadata(path)?;
        let bytes = if meta.is_dir() {
            let mut total = 0;
            for e in std::fs::read_dir(path)? {
                let m = e?.metadata()?;
                if m.is_file() {
                    total += m.len();
                }
            }
            total
        } else {
            meta.len()
        };
        let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
        Ok(FileKey { name, bytes })
    }
}

impl fmt::Display for FileKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} bytes)", self.name, self.bytes)
    }
}

/// One drafter's run over the prompt set at the deepest depth.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrafterRun {
    /// The engine's name for it: `ngram`, `mtp`.
    pub name: String,
    /// The drafter's own seconds per drafted token (an MTP head's forward; ~0 for n-gram).
    pub draft_secs_per_token: f64,
    pub classes: Vec<ClassRun>,
}

/// One prompt class (chat, code, editing) under one drafter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassRun {
    pub class: String,
    /// Tokens generated over the class's prompts.
    pub tokens: u64,
    /// Drafts verified at each position (every earlier position accepted), index 0 first.
    pub verified_by_depth: Vec<u64>,
    /// Of those, accepted.
    pub accepted_by_depth: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub version: u32,
    pub model: FileKey,
    /// Kernel threads the model ran with (resolved: never 0).
    pub threads: usize,
    /// The MTP head the `mtp` figures were measured with, if one was loaded.
    pub mtp_head: Option<FileKey>,
    /// Most tokens generated per prompt.
    pub max_tokens: usize,
    /// Median seconds of a pass of one sequence feeding `r` tokens, at index `r - 1`.
    pub pass_secs: Vec<f64>,
    /// Median seconds of a pass of `r` sequences feeding one token each, at index `r - 1`.
    pub batch_secs: Vec<f64>,
    pub drafters: Vec<DrafterRun>,
}

/// What was wrong with a profile file, naming it.
#[derive(Debug)]
pub enum ProfileError {
    Read { path: PathBuf, error: std::io::Error },
    TooLarge { path: PathBuf, bytes: u64 },
    Parse { path: PathBuf, error: serde_json::Error },
    Invalid { path: PathBuf, what: String },
    Version { path: PathBuf, found: u32 },
    OtherModel { path: PathBuf, profile: FileKey, serving: FileKey },
    OtherThreads { path: PathBuf, profile: usize, serving: usize },
    Write { path: PathBuf, error: std::io::Error },
}

impl ProfileError {
    /// A sound profile made for another model, thread count or format version: ignored with a
    /// log line, never an error.
    pub fn is_foreign(&self) -> bool {
        matches!(
            self,
            ProfileError::Version { .. } | ProfileError::OtherModel { .. } | ProfileError::OtherThreads { .. }
        )
    }
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::Read { path, error } => write!(f, "tune profile {}: cannot read it: {error}", path.display()),
            ProfileError::TooLarge { path, bytes } => {
                write!(
                    f,
                    "tune profile {}: {bytes} bytes, more than the {MAX_PROFILE_BYTES} a profile may have",
                    path.display()
                )
            }
            ProfileError::Parse { path, error } => {
                write!(f, "tune profile {}: not a tune profile of version {PROFILE_VERSION}: {error}", path.display())
            }
            ProfileError::Invalid { path, what } => write!(f, "tune profile {}: {what}", path.display()),
            ProfileError::Version { path, found } => write!(
                f,
                "tune profile {} is of format version {found}, this build reads version {PROFILE_VERSION}",
                path.display()
            ),
            ProfileError::OtherModel { path, profile, serving } => {
                write!(f, "tune profile {} was measured on {profile}, not on {serving}", path.display())
            }
            ProfileError::OtherThreads { path, profile, serving } => {
                write!(f, "tune profile {} was measured at {profile} threads, not at {serving}", path.display())
            }
            ProfileError::Write { path, error } => {
                write!(f, "cannot write the tune profile {}: {error}", path.display())
            }
        }
    }
}

impl std::error::Error for ProfileError {}

/// Only the version, read first, so that another version's shape is reported as such.
#[derive(Deserialize)]
struct VersionOnly {
    version: u32,
}

impl Profile {
    /// Reads and checks a profile file (its format and values, not whom it is for: [`Profile::check`]).
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let p = || path.to_path_buf();
        let bytes = std::fs::metadata(path).map_err(|error| ProfileError::Read { path: p(), error })?.len();
        if bytes > MAX_PROFILE_BYTES {
            return Err(ProfileError::TooLarge { path: p(), bytes });
        }
        let text = std::fs::read(path).map_err(|error| ProfileError::Read { path: p(), error })?;
        let v: VersionOnly = serde_json::from_slice(&text).map_err(|error| ProfileError::Parse { path: p(), error })?;
        if v.version != PROFILE_VERSION {
            return Err(ProfileError::Version { path: p(), found: v.version });
        }
        let profile: Profile =
            serde_json::from_slice(&text).map_err(|error| ProfileError::Parse { path: p(), error })?;
        profile.validate().map_err(|what| ProfileError::Invalid { path: p(), what })?;
        Ok(profile)
    }

    /// Writes the profile (its directory made if missing), whole or not at all.
    pub fn save(&self, path: &Path) -> Result<(), ProfileError> {
        let err = |error| ProfileError::Write { path: path.to_path_buf(), error };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let text = serde_json::to_vec_pretty(self).map_err(|e| err(std::io::Error::other(e)))?;
        let tmp = path.with_extension(format!("part-{}", std::process::id()));
        std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path)).map_err(err)
    }

    /// Whether this profile was measured for `model` at `threads` threads.
    pub fn check(&self, path: &Path, model: &FileKey, threads: usize) -> Result<(), ProfileError> {
        if &self.model != model {
            return Err(ProfileError::OtherModel {
                path: path.to_path_buf(),
                profile: self.model.clone(),
                serving: model.clone(),
            });
        }
        if self.threads != threads {
            return Err(ProfileError::OtherThreads {
                path: path.to_path_buf(),
                profile: self.threads,
                serving: threads,
            });
        }
        Ok(())
    }

    /// Values a measurement can give, or what is not.
    fn validate(&self) -> Result<(), String> {
        for (field, v) in [("pass_secs", &self.pass_secs), ("batch_secs", &self.batch_secs)] {
            if v.is_empty() || v.len() > MAX_PROFILE_ROWS {
                return Err(format!("{field} has {} entries, want 1 to {MAX_PROFILE_ROWS}", v.len()));
            }
            if let Some(t) = v.iter().find(|t| !(t.is_finite() && **t > 0.0)) {
                return Err(format!("{field} holds {t}, want seconds above 0"));
            }
        }
        if self.threads == 0 {
            return Err("threads is 0, want the thread count the passes ran with".into());
        }
        for d in &self.drafters {
            if !(d.draft_secs_per_token.is_finite() && d.draft_secs_per_token >= 0.0) {
                return Err(format!(
                    "drafter {}: draft_secs_per_token {}, want seconds >= 0",
                    d.name, d.draft_secs_per_token
                ));
            }
            for c in &d.classes {
                let (v, a) = (&c.verified_by_depth, &c.accepted_by_depth);
                if v.len() > MAX_DRAFT_DEPTH || a.len() > v.len() {
                    return Err(format!(
                        "drafter {} class {}: {} verified and {} accepted positions, want at most {MAX_DRAFT_DEPTH}, accepted no more than verified",
                        d.name, c.class, v.len(), a.len()
                    ));
                }
                if let Some(j) = (0..a.len()).find(|&j| a[j] > v[j]) {
                    return Err(format!(
                        "drafter {} class {}: position {} has {} accepted of {} verified",
                        d.name,
                        c.class,
                        j + 1,
                        a[j],
                        v[j]
                    ));
                }
            }
        }
        Ok(())
    }

    /// A drafter's acceptance by position, averaged over the prompt classes.
    pub fn accept_of(&self, d: &DrafterRun) -> super::verdict::Accept {
        let per_class: Vec<_> =
            d.classes.iter().map(|c| acceptance(&c.verified_by_depth, &c.accepted_by_depth)).collect();
        mean(&per_class)
    }

    /// The engine's starting point: the measured pass costs, and each drafter's acceptance
    /// averaged over classes and its time per drafted token. The `mtp` figures count only for the head they were measured with.
    pub fn prior(&self, head: Option<&FileKey>) -> SpecPrior {
        let measured: Vec<&DrafterRun> = self
            .drafters
            .iter()
            .filter(|d| d.name != "mtp" || (head.is_some() && head == self.mtp_head.as_ref()))
            .collect();
        SpecPrior {
            pass_secs: self.pass_secs.clone(),
            accept: measured.iter().map(|d| (d.name.clone(), self.accept_of(d))).collect(),
            draft_secs: measured.iter().map(|d| (d.name.clone(), d.draft_secs_per_token)).collect(),
        }
    }
}
