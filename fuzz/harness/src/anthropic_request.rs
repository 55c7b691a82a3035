//! Anthropic Messages bodies, arbitrary bytes: `parse_messages` and `parse_count_tokens` never
//! panic; a refusal is a 400 that names its problem; an accepted request is inside every
//! documented bound (Anthropic's temperature range, a conversation that starts with the user,
//! no empty turn), and its messages render through the ChatML fallback template.

use mtplx_lite::api::anthropic_request::{parse_count_tokens, parse_messages, MessagesRequest, MAX_STOP_SEQUENCES};
use mtplx_lite::api::error::ApiError;
use mtplx_lite::api::openai_request::MAX_STOP_BYTES;
use mtplx_lite::model::chat_template::CHATML_TEMPLATE;
use mtplx_lite::model::{ChatMessage, ChatTemplate};

fn refused(e: &ApiError) {
    assert_eq!(e.status, 400, "{e:?}");
    assert!(!e.message.is_empty() && e.param.is_some(), "{e:?}");
}

fn conversation(r: &MessagesRequest) {
    let turns: Vec<&str> = r.messages.iter().map(|m| m.role.as_str()).filter(|r| *r != "system").collect();
    assert_eq!(turns.first(), Some(&"user"), "{r:?}");
    assert!(turns.windows(2).all(|w| w[0] != w[1]), "turns of one role are merged: {r:?}");
    assert!(r.messages.iter().all(|m| m.role == "system" || !m.content.is_empty()), "{r:?}");
    assert!(r.prefill.as_ref().is_none_or(|p| !p.is_empty()), "{r:?}");
    let template = ChatTemplate::new(CHATML_TEMPLATE, "", "").expect("ChatML compiles");
    let messages: Vec<ChatMessage> =
        r.messages.iter().map(|m| ChatMessage::new(m.role.clone(), m.content.clone())).collect();
    let _ = template.render(&messages, true);
}

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    match parse_messages(data) {
        Ok(r) => {
            conversation(&r);
            let (p, s) = (&r.params, &r.params.sampling);
            assert!((0.0..=1.0).contains(&s.temperature) && (0.0..=1.0).contains(&s.top_p), "{p:?}");
            assert!(p.max_tokens.is_some_and(|n| n >= 1), "{p:?}");
            assert!(p.stop.len() <= MAX_STOP_SEQUENCES, "{p:?}");
            assert!(p.stop.iter().all(|s| !s.is_empty() && s.len() <= MAX_STOP_BYTES), "{p:?}");
        }
        Err(e) => refused(&e),
    }
    match parse_count_tokens(data) {
        Ok(r) => conversation(&r),
        Err(e) => refused(&e),
    }
}
