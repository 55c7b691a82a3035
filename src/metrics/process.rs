//! `process_*` series, read from `/proc/self` at render time (Linux; absent elsewhere).

use std::io::Read;
use std::time::{SystemTime, UNIX_EPOCH};

/// Clock ticks per second of `/proc/self/stat` times. Linux fixes USER_HZ at 100 on every
/// architecture it exports to user space (the Prometheus procfs library assumes the same).
const USER_HZ: f64 = 100.0;
/// Bytes read from one `/proc` file; `stat` and `status` are well under this.
const PROC_READ_BYTES: usize = 4096;

/// One reading of the process series.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub start_time_seconds: f64,
    pub resident_memory_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<u64>,
}

fn read_small(path: &str, buf: &mut [u8; PROC_READ_BYTES]) -> Option<usize> {
    let mut f = std::fs::File::open(path).ok()?;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(_) => return None,
        }
    }
    Some(n)
}

/// utime + stime from `/proc/self/stat` (fields 14 and 15, counted after the `(comm)` field,
/// which may itself contain spaces and parentheses, hence the search for the last `)`).
fn cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // After `)` come field 3 (state) onwards; utime is field 14.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// Process start, seconds since the epoch: boot time (`btime` of `/proc/stat`) plus field 22
/// of `/proc/self/stat` (start time in ticks after boot).
pub fn start_time() -> Option<f64> {
    let mut buf = [0u8; PROC_READ_BYTES];
    let n = read_small("/proc/self/stat", &mut buf)?;
    let stat = std::str::from_utf8(&buf[..n]).ok()?;
    let ticks: u64 = stat[stat.rfind(')')? + 1..]
        .split_ascii_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    // /proc/stat is larger than one small buffer; btime sits near its end.
    let all = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: u64 = all
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(btime as f64 + ticks as f64 / USER_HZ)
}

/// `VmRSS:  1234 kB` from `/proc/self/status`.
fn rss_bytes(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line["VmRSS:".len()..]
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

impl ProcessStats {
    /// Read the current values; `start_time_seconds` comes from the caller (taken at start-up).
    pub fn read(start_time_seconds: f64) -> ProcessStats {
        let mut buf = [0u8; PROC_READ_BYTES];
        let cpu = read_small("/proc/self/stat", &mut buf)
            .and_then(|n| std::str::from_utf8(&buf[..n]).ok().and_then(cpu_seconds));
        let rss = read_small("/proc/self/status", &mut buf)
            .and_then(|n| std::str::from_utf8(&buf[..n]).ok().and_then(rss_bytes));
        let fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64);
        ProcessStats {
            start_time_seconds,
            resident_memory_bytes: rss,
            cpu_seconds: cpu,
            open_fds: fds,
        }
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_comm() {
        let stat = "1234 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 0 0";
        assert_eq!(cpu_seconds(stat), Some(3.0));
        assert_eq!(cpu_seconds("garbage"), None);
        assert_eq!(
            rss_bytes("Name:\tx\nVmRSS:\t   2048 kB\n"),
            Some(2048 * 1024)
        );
        assert_eq!(rss_bytes("VmRSS: lots"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        let s = ProcessStats::read(1.0);
        assert!(s.resident_memory_bytes.unwrap() > 0);
        assert!(s.open_fds.unwrap() >= 3);
        assert!(s.cpu_seconds.is_some());
        let start = start_time().unwrap();
        assert!(
            start <= unix_now() + 1.0 && start > unix_now() - 86_400.0 * 365.0,
            "{start}"
        );
    }
}
