//! `process_*` series, read from `/proc/self` at render time (Linux; absent elsewhere).
//!
//! CPU time and resident memory come from one read of `/proc/self/stat` (about 12 us;
//! `/proc/self/status` costs twice that); counting `/proc/self/fd` costs about 0.7 us per open
//! descriptor (90 us with 135 open, several hundred with the 1,000-connection limit). So a
//! reading is reused for up to [`PROCESS_MAX_AGE`]: a scrape every 15 s never sees it stale, and
//! a client polling `/metrics` in a loop does not pay for the reads each time.

use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Clock ticks per second of `/proc/self/stat` times. Linux fixes USER_HZ at 100 on every
/// architecture it exports to user space (the Prometheus procfs library assumes the same).
const USER_HZ: f64 = 100.0;
/// Bytes read from one `/proc` file; `stat` is well under this.
const PROC_READ_BYTES: usize = 4096;
/// How long a reading of the process series is reused before `/proc/self` is read again.
pub const PROCESS_MAX_AGE: Duration = Duration::from_secs(1);
/// `AT_PAGESZ` in the ELF auxiliary vector (`/proc/self/auxv`).
const AT_PAGESZ: u64 = 6;
/// Page size assumed when the auxiliary vector cannot be read.
const DEFAULT_PAGE_BYTES: u64 = 4096;

/// The last reading of this process, shared by every scrape.
static SAMPLER: Sampler = Sampler::new();

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

/// Field `n` of `/proc/self/stat`, numbered as in proc(5) (1 is the pid). Field 2, `(comm)`, may
/// itself contain spaces and parentheses, hence counting from the last `)`; `n` must be over 2.
fn stat_field(stat: &str, n: usize) -> Option<&str> {
    stat[stat.rfind(')')? + 1..].split_ascii_whitespace().nth(n.checked_sub(3)?)
}

/// utime + stime (fields 14 and 15 of `/proc/self/stat`).
fn cpu_seconds(stat: &str) -> Option<f64> {
    let utime: u64 = stat_field(stat, 14)?.parse().ok()?;
    let stime: u64 = stat_field(stat, 15)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// Process start, seconds since the epoch: boot time (`btime` of `/proc/stat`) plus field 22
/// of `/proc/self/stat` (start time in ticks after boot).
pub fn start_time() -> Option<f64> {
    let mut buf = [0u8; PROC_READ_BYTES];
    let n = read_small("/proc/self/stat", &mut buf)?;
    let stat = std::str::from_utf8(&buf[..n]).ok()?;
    let ticks: u64 = stat_field(stat, 22)?.parse().ok()?;
    // /proc/stat is larger than one small buffer; btime sits near its end.
    let all = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: u64 = all.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
    Some(btime as f64 + ticks as f64 / USER_HZ)
}

/// Resident pages, field 24 of `/proc/self/stat`.
fn rss_pages(stat: &str) -> Option<u64> {
    stat_field(stat, 24)?.parse().ok()
}

/// The page size, from the kernel's auxiliary vector: (key, value) pairs of native words.
fn page_bytes() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
        auxv.chunks_exact(2 * std::mem::size_of::<usize>())
            .map(|pair| {
                let (k, v) = pair.split_at(std::mem::size_of::<usize>());
                let word = |b: &[u8]| usize::from_ne_bytes(b.try_into().unwrap_or_default()) as u64;
                (word(k), word(v))
            })
            .find(|&(k, _)| k == AT_PAGESZ)
            .map_or(DEFAULT_PAGE_BYTES, |(_, v)| v)
    })
}

/// A reading, taken again only when the last one is older than [`PROCESS_MAX_AGE`].
struct Sampler {
    /// The last reading and when it was taken.
    last: Mutex<Option<(Instant, ProcessStats)>>,
}

impl Sampler {
    const fn new() -> Sampler {
        Sampler { last: Mutex::new(None) }
    }

    fn get(&self, now: Instant, read: impl FnOnce() -> ProcessStats) -> ProcessStats {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match *last {
            Some((at, s)) if now.saturating_duration_since(at) < PROCESS_MAX_AGE => s,
            _ => {
                let s = read();
                *last = Some((now, s));
                s
            }
        }
    }
}

impl ProcessStats {
    /// Read the current values; `start_time_seconds` comes from the caller (taken at start-up).
    pub fn read(start_time_seconds: f64) -> ProcessStats {
        let mut buf = [0u8; PROC_READ_BYTES];
        let stat = read_small("/proc/self/stat", &mut buf);
        let stat = stat.and_then(|n| std::str::from_utf8(&buf[..n]).ok());
        ProcessStats {
            start_time_seconds,
            resident_memory_bytes: stat.and_then(rss_pages).map(|p| p * page_bytes()),
            cpu_seconds: stat.and_then(cpu_seconds),
            open_fds: std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64),
        }
    }

    /// [`ProcessStats::read`], reused for up to [`PROCESS_MAX_AGE`].
    pub fn sampled(start_time_seconds: f64) -> ProcessStats {
        SAMPLER.get(Instant::now(), || ProcessStats::read(start_time_seconds))
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_comm() {
        let stat = "1234 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 0 777 0";
        assert_eq!(cpu_seconds(stat), Some(3.0));
        assert_eq!(rss_pages(stat), Some(777));
        assert_eq!(cpu_seconds("garbage"), None);
        assert_eq!(rss_pages("1 (x) S 1 2"), None);
    }

    #[test]
    fn a_reading_is_reused_until_it_is_too_old() {
        let sampler = Sampler::new();
        let reads = std::cell::Cell::new(0u64);
        let read = || {
            reads.set(reads.get() + 1);
            ProcessStats { open_fds: Some(reads.get()), ..ProcessStats::default() }
        };
        let t0 = Instant::now();
        assert_eq!(sampler.get(t0, read).open_fds, Some(1));
        assert_eq!(sampler.get(t0 + PROCESS_MAX_AGE / 2, read).open_fds, Some(1), "read again too soon");
        assert_eq!(sampler.get(t0 + PROCESS_MAX_AGE, read).open_fds, Some(2), "not read again");
        assert_eq!(reads.get(), 2);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        let s = ProcessStats::read(1.0);
        // The same figure as the kernel's own `VmRSS` line, give or take pages touched between
        // the two reads.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .unwrap()
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap();
        let rss = s.resident_memory_bytes.unwrap();
        assert!(rss.abs_diff(kib * 1024) < 4 << 20, "stat says {rss} bytes, status {kib} KiB");
        assert_eq!(page_bytes() % 4096, 0);
        assert!(s.open_fds.unwrap() >= 3);
        assert!(s.cpu_seconds.is_some());
        let start = start_time().unwrap();
        assert!(start <= unix_now() + 1.0 && start > unix_now() - 86_400.0 * 365.0, "{start}");
    }
}
