//! The chunked body decoder on arbitrary bytes: never panics, respects the body bound, and
//! gives the same result however the input is split across reads.

use mtplx_lite::http::parse::ChunkedDecoder;

const MAX_BODY: usize = 4096;

fn decode(parts: &[&[u8]]) -> Result<(Vec<u8>, bool, usize), mtplx_lite::http::HttpError> {
    let mut d = ChunkedDecoder::new(MAX_BODY);
    let mut out = Vec::new();
    let mut pending = Vec::new();
    let mut consumed = 0;
    for part in parts {
        pending.extend_from_slice(part);
        let n = d.decode(&pending, &mut out)?;
        assert!(n <= pending.len());
        assert!(out.len() <= MAX_BODY);
        consumed += n;
        pending.drain(..n);
        if d.is_done() {
            break;
        }
    }
    Ok((out, d.is_done(), consumed))
}

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let whole = decode(&[input]);
    let at = (split as usize * input.len()) / 255;
    let halves = decode(&[&input[..at], &input[at..]]);
    match (&whole, &halves) {
        (Ok(w), Ok(h)) => {
            assert_eq!(w.0, h.0);
            assert_eq!(w.1, h.1);
            if w.1 {
                assert_eq!(w.2, h.2, "the end of the body is found at the same byte");
            }
        }
        // A split can only delay an error, not invent one or change it.
        (Err(a), Err(b)) => assert_eq!(a, b),
        (Ok(w), Err(_)) | (Err(_), Ok(w)) => assert!(!w.1, "whole {whole:?} vs split {halves:?}"),
    }
}
