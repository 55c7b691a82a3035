//! The request head parser on arbitrary bytes: never panics, and a head it accepts is accepted
//! the same way on its own and reported incomplete when cut short.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mtplx_lite::http::limits::{MAX_HEADERS, MAX_HEAD_BYTES, MAX_TARGET_BYTES};
use mtplx_lite::http::parse::parse_head;

fuzz_target!(|data: &[u8]| {
    let Ok(Some((head, n))) = parse_head(data) else {
        return;
    };
    assert!(n <= data.len() && n <= MAX_HEAD_BYTES);
    assert!(head.path.len() <= MAX_TARGET_BYTES);
    assert!(head.headers.len() <= MAX_HEADERS);
    assert!(head.version <= 1);
    assert_eq!(parse_head(&data[..n]), Ok(Some((head.clone(), n))));
    if n > 0 {
        assert_eq!(
            parse_head(&data[..n - 1]),
            Ok(None),
            "a cut head must read as incomplete"
        );
    }
});
