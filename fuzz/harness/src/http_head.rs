//! The request head parser on arbitrary bytes: never panics; a head it accepts is within the
//! bounds, has exactly one Host if it is HTTP/1.1 and never two Host or two Authorization
//! headers (RFC 9112 §3.2), and is accepted the same way on its own and reported incomplete
//! when cut short.

use mtplx_lite::http::limits::{MAX_HEADERS, MAX_HEAD_BYTES, MAX_TARGET_BYTES};
use mtplx_lite::http::parse::parse_head;

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let Ok(Some((head, n))) = parse_head(data) else {
        return;
    };
    assert!(n <= data.len() && n <= MAX_HEAD_BYTES);
    assert!(head.path.len() <= MAX_TARGET_BYTES);
    assert!(head.headers.len() <= MAX_HEADERS);
    assert!(head.version <= 1);
    let count = |name: &str| head.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).count();
    assert!(count("host") <= 1, "two Host headers accepted");
    assert!(count("authorization") <= 1, "two Authorization headers accepted");
    if head.version == 1 {
        assert_eq!(count("host"), 1, "HTTP/1.1 without Host accepted");
    }
    assert_eq!(parse_head(&data[..n]), Ok(Some((head.clone(), n))));
    if n > 0 {
        assert_eq!(parse_head(&data[..n - 1]), Ok(None), "a cut head must read as incomplete");
    }
}
