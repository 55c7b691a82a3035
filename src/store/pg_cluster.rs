//! A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` into a temporary
//! directory, `pg_ctl start` on a free port with its socket in that directory, stopped and
//! removed on drop. PostgreSQL refuses to run as root, so as root the cluster runs as the
//! `postgres` user that Debian's package creates (`tests/setup.sh` installs it).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian installs the server binaries, one directory per major version.
const DEBIAN_PG_LIB: &str = "/usr/lib/postgresql";

pub struct PgCluster {
    dir: PathBuf,
    bin: PathBuf,
    as_user: Option<&'static str>,
    pub port: u16,
}

fn bin_dir() -> Result<PathBuf, String> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir(DEBIAN_PG_LIB)
        .map_err(|e| format!("{DEBIAN_PG_LIB}: {e}; install PostgreSQL with `bash tests/setup.sh`"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().ok_or_else(|| format!("no initdb under {DEBIAN_PG_LIB}/*/bin; run `bash tests/setup.sh`"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(54329)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.trim_ascii() == b"0").unwrap_or(false)
}

impl PgCluster {
    /// Starts a fresh cluster with a `mtplx` database; fails with what went wrong.
    pub fn start() -> Result<PgCluster, String> {
        let bin = bin_dir()?;
        let as_user = is_root().then_some("postgres");
        let dir = std::env::temp_dir().join(super::random_id("mtplx-pg-"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let c = PgCluster { dir, bin, as_user, port: free_port() };
        if let Some(u) = as_user {
            c.run(Command::new("chown").args([&format!("{u}:"), c.dir.to_str().unwrap_or_default()]))?;
        }
        let data = c.dir.join("data");
        let data = data.to_str().unwrap_or_default();
        c.run(c.pg("initdb").args(["-D", data, "-U", "mtplx", "-A", "trust", "--no-sync", "-E", "UTF8"]))?;
        let opts = format!("-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off", c.port, c.dir.display());
        let log = c.dir.join("log");
        c.run(c.pg("pg_ctl").args(["-D", data, "-l", log.to_str().unwrap_or_default(), "-o", &opts, "-w", "start"]))?;
        c.run(c.pg("createdb").args(["-h", "127.0.0.1", "-p", &c.port.to_string(), "-U", "mtplx", "mtplx"]))?;
        Ok(c)
    }

    fn pg(&self, tool: &str) -> Command {
        let path = self.bin.join(tool);
        match self.as_user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"]).arg(path);
                c
            }
            None => Command::new(path),
        }
    }

    fn run(&self, cmd: &mut Command) -> Result<(), String> {
        let out = cmd.current_dir(&self.dir).output().map_err(|e| format!("{cmd:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{cmd:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// The URL of a fresh database on this cluster (`createdb` of `name`).
    pub fn database(&self, name: &str) -> Result<String, String> {
        self.run(self.pg("createdb").args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "mtplx", name]))?;
        Ok(format!("postgres://mtplx@127.0.0.1:{}/{name}", self.port))
    }

    pub fn url(&self) -> String {
        format!("postgres://mtplx@127.0.0.1:{}/mtplx", self.port)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self.run(self.pg("pg_ctl").args([
            "-D",
            data.to_str().unwrap_or_default(),
            "-m",
            "immediate",
            "-w",
            "stop",
        ]));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
