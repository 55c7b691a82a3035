//! OpenAI request bodies, arbitrary bytes: `parse_chat` and `parse_completion` never panic; a
//! refusal is a 400 that names its problem; an accepted request is inside every documented
//! bound, and its messages render through the ChatML fallback template.

use mtplx_lite::api::error::ApiError;
use mtplx_lite::api::openai_request::{
    parse_chat, parse_completion, GenParams, MAX_COMPLETION_LOGPROBS, MAX_STOP_BYTES, MAX_STOP_SEQUENCES,
    MAX_TOP_LOGPROBS,
};
use mtplx_lite::model::chat_template::CHATML_TEMPLATE;
use mtplx_lite::model::{ChatMessage, ChatTemplate};

fn refused(e: &ApiError) {
    assert_eq!(e.status, 400, "{e:?}");
    assert!(!e.message.is_empty(), "{e:?}");
}

fn in_bounds(p: &GenParams) {
    let s = &p.sampling;
    assert!((0.0..=2.0).contains(&s.temperature), "{p:?}");
    assert!((0.0..=1.0).contains(&s.top_p) && (0.0..=1.0).contains(&s.min_p), "{p:?}");
    assert!((-2.0..=2.0).contains(&s.presence_penalty) && (-2.0..=2.0).contains(&s.frequency_penalty), "{p:?}");
    assert!(p.max_tokens.is_none_or(|n| n >= 1), "{p:?}");
    assert!(p.stop.len() <= MAX_STOP_SEQUENCES, "{p:?}");
    assert!(p.stop.iter().all(|s| !s.is_empty() && s.len() <= MAX_STOP_BYTES), "{p:?}");
}

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    match parse_chat(data) {
        Ok(req) => {
            in_bounds(&req.params);
            assert!(req.params.logprobs.is_none_or(|n| n <= MAX_TOP_LOGPROBS));
            assert!(!req.messages.is_empty());
            let template = ChatTemplate::new(CHATML_TEMPLATE, "", "").expect("ChatML compiles");
            let messages: Vec<ChatMessage> =
                req.messages.iter().map(|m| ChatMessage::new(m.role.clone(), m.content.clone())).collect();
            // The template may refuse (a role it does not know), but must not panic.
            let _ = template.render(&messages, true);
        }
        Err(e) => refused(&e),
    }
    match parse_completion(data) {
        Ok(req) => {
            in_bounds(&req.params);
            assert!(req.params.logprobs.is_none_or(|n| n <= MAX_COMPLETION_LOGPROBS));
        }
        Err(e) => refused(&e),
    }
}
