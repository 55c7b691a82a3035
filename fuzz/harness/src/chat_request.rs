//! Chat route bodies, arbitrary bytes: `parse_create` and `parse_post` (and a turn's settings
//! laid over stored defaults) never panic; a refusal is a 400 or, for an oversized message or
//! system prompt, a 413, each with a message; an accepted body is inside every bound.

use mtplx_lite::api::chats_request::{parse_create, parse_post, turn_params, MAX_TITLE_BYTES, SAMPLING_FIELDS};
use mtplx_lite::api::error::ApiError;

/// A small limit, so that the fuzzer reaches it.
const MAX_MESSAGE_BYTES: usize = 64;

fn refused(e: &ApiError) {
    assert!(e.status == 400 || e.status == 413, "{e:?}");
    assert!(!e.message.is_empty(), "{e:?}");
    if e.status == 413 {
        assert_eq!(e.code, Some("message_too_large"), "{e:?}");
    }
}

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    match parse_create(data, MAX_MESSAGE_BYTES) {
        Ok(c) => {
            assert!(c.title.as_ref().is_none_or(|t| t.len() <= MAX_TITLE_BYTES));
            assert!(c.system.as_ref().is_none_or(|s| s.len() <= MAX_MESSAGE_BYTES));
            assert!(c.defaults.keys().all(|k| SAMPLING_FIELDS.contains(&k.as_str())));
            // What a chat stores as its defaults is always a valid turn on its own.
            let defaults = serde_json::to_string(&c.defaults).unwrap();
            turn_params(&defaults, &Default::default()).expect("stored defaults stay valid");
        }
        Err(e) => refused(&e),
    }
    match parse_post(data, MAX_MESSAGE_BYTES) {
        Ok(p) => {
            assert!(!p.content.is_empty() && p.content.len() <= MAX_MESSAGE_BYTES);
            turn_params(r#"{"temperature":0.5,"max_tokens":4,"stop":["x"]}"#, &p.overrides)
                .expect("a valid message over valid defaults is a valid turn");
        }
        Err(e) => refused(&e),
    }
}
