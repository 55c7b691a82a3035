//! The `Date` response header (RFC 9110 §6.6.1) in IMF-fixdate form, formatted at most once a
//! second per I/O thread rather than once per response.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// Length of an IMF-fixdate: `Sun, 06 Nov 1994 08:49:37 GMT`.
pub const IMF_FIXDATE_LEN: usize = 29;

struct Cached {
    second: u64,
    text: [u8; IMF_FIXDATE_LEN],
}

thread_local! {
    // Per thread, so that no lock is taken on the response path.
    static CACHE: RefCell<Cached> = const { RefCell::new(Cached { second: u64::MAX, text: [0; IMF_FIXDATE_LEN] }) };
}

/// Appends the current date as an IMF-fixdate to `out`.
pub fn append_now(out: &mut Vec<u8>) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.second != now {
            c.text = format_imf_fixdate(now);
            c.second = now;
        }
        out.extend_from_slice(&c.text);
    });
}

/// Formats seconds since the Unix epoch as an IMF-fixdate.
pub fn format_imf_fixdate(unix_secs: u64) -> [u8; IMF_FIXDATE_LEN] {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    const MONTHS: [&[u8; 3]; 12] =
        [b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec"];
    let days = unix_secs / 86_400;
    let secs = unix_secs % 86_400;
    let (year, month, day) = civil_from_days(days as i64);
    let mut t = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    t[..3].copy_from_slice(DAYS[(days % 7) as usize]);
    put2(&mut t[5..7], day as u64);
    t[8..11].copy_from_slice(MONTHS[month as usize - 1]);
    put2(&mut t[12..14], (year / 100) as u64 % 100);
    put2(&mut t[14..16], (year % 100) as u64);
    put2(&mut t[17..19], secs / 3600);
    put2(&mut t[20..22], secs / 60 % 60);
    put2(&mut t[23..25], secs % 60);
    t
}

fn put2(dst: &mut [u8], v: u64) {
    dst[0] = b'0' + (v / 10 % 10) as u8;
    dst[1] = b'0' + (v % 10) as u8;
}

/// Days since 1970-01-01 to (year, month 1..=12, day 1..=31); Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(s: u64) -> String {
        String::from_utf8(format_imf_fixdate(s).to_vec()).unwrap()
    }

    #[test]
    fn known_dates() {
        assert_eq!(fmt(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        // RFC 9110's own example.
        assert_eq!(fmt(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(fmt(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(fmt(1_700_000_000), "Tue, 14 Nov 2023 22:13:20 GMT");
        assert_eq!(fmt(4_102_444_799), "Thu, 31 Dec 2099 23:59:59 GMT");
    }

    #[test]
    fn append_now_is_well_formed() {
        let mut out = Vec::new();
        append_now(&mut out);
        append_now(&mut out);
        assert_eq!(out.len(), 2 * IMF_FIXDATE_LEN);
        assert!(out.ends_with(b" GMT"));
        assert_eq!(out[3], b',');
    }
}
