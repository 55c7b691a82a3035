//! What the server does with a tune profile at start. Missing: nothing (the built-in guesses,
//! as before `tune` existed). Measured for another model, thread count or format version: a log
//! line, and ignored. Unreadable or broken: the server stops with the error when the profile
//! was named with `--tune-profile` (the user asked for that file), and warns and goes on without
//! it when it is the default one in the cache directory (a stale cache file must not keep a
//! server from starting).

use super::profile::{FileKey, Profile, ProfileError};
use crate::engine::SpecPrior;
use std::path::{Path, PathBuf};

/// Where `tune` saves, and the server looks, by default: one file per model and thread count in
/// the cache directory the demo model lives in. `None` when there is no cache directory.
pub fn default_path(model: &FileKey, threads: usize) -> Option<PathBuf> {
    let dir = crate::model::fetch::cache_dir().ok()?;
    Some(dir.join("tune").join(format!("{}.{threads}t.json", model.name)))
}

/// The prior `--depth auto` starts from, and a line to log about it (`None`: nothing to say).
pub fn prior_for(
    given: Option<&Path>,
    default: Option<&Path>,
    model: &FileKey,
    threads: usize,
    head: Option<&FileKey>,
) -> Result<(SpecPrior, Option<String>), ProfileError> {
    let path = match (given, default) {
        (Some(p), _) => p,
        (None, Some(p)) if p.exists() => p,
        _ => return Ok((SpecPrior::default(), None)),
    };
    let ignored = "ignored: --depth auto starts from its built-in guesses (`mtplx-lite tune` measures this model)";
    match Profile::load(path).and_then(|p| p.check(path, model, threads).map(|_| p)) {
        Ok(p) => Ok((p.prior(head), Some(used(path, &p, head)))),
        Err(e) if e.is_foreign() => Ok((SpecPrior::default(), Some(format!("{e}; {ignored}")))),
        Err(e) if given.is_some() => Err(e),
        Err(e) => Ok((SpecPrior::default(), Some(format!("warning: {e}; {ignored}")))),
    }
}

/// The log line of a profile in use: what the engine starts from.
fn used(path: &Path, p: &Profile, head: Option<&FileKey>) -> String {
    let mut s = format!(
        "--depth auto starts from the tune profile {} (pass costs of 1 to {} rows",
        path.display(),
        p.pass_secs.len()
    );
    for d in &p.drafters {
        if d.name == "mtp" && head != p.mtp_head.as_ref() {
            let measured = p.mtp_head.as_ref().map_or("no head".to_string(), |h| h.to_string());
            s.push_str(&format!("; mtp acceptance ignored: measured with {measured}, not the head loaded now"));
            continue;
        }
        let a = p.accept_of(d);
        let first: Vec<String> = a.iter().take(3).map(|x| x.map_or("-".into(), |x| format!("{x:.2}"))).collect();
        s.push_str(&format!("; {} acceptance by position {} ...", d.name, first.join(" ")));
    }
    s.push(')');
    s
}
