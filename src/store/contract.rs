//! What every `Store` must do, as tests both databases run.

use super::{Chat, Message, Page, Store, StoreError};

pub fn chat(id: &str) -> Chat {
    Chat {
        chat_id: id.into(),
        created_at: 1_700_000_000,
        title: Some("t".into()),
        system: Some("be brief".into()),
        defaults: "{\"temperature\":0.5}".into(),
        client_ip: Some("203.0.113.7".into()),
        country: Some("DE".into()),
    }
}

pub fn user(chat_id: &str, id: &str, at: i64) -> Message {
    Message {
        message_id: id.into(),
        chat_id: chat_id.into(),
        role: "user".into(),
        content: format!("question {id}"),
        created_at: at,
        finish_reason: None,
        prompt_tokens: None,
        completion_tokens: None,
        request_id: Some(format!("req-{id}")),
    }
}

pub fn answer(chat_id: &str, id: &str, at: i64) -> Message {
    Message {
        role: "assistant".into(),
        content: format!("answer {id}"),
        finish_reason: Some("stop".into()),
        prompt_tokens: Some(12),
        completion_tokens: Some(3),
        ..user(chat_id, id, at)
    }
}

/// Runs every contract test, each on a fresh store from `fresh`.
pub fn run_all(fresh: &mut dyn FnMut() -> Box<dyn Store>) {
    chats_round_trip(&mut *fresh());
    turns_alternate_and_lease_expires(&mut *fresh());
    pages_are_ordered_and_counted(&mut *fresh());
    unknown_chats_are_not_found(&mut *fresh());
}

fn chats_round_trip(s: &mut dyn Store) {
    let c = chat("c1");
    s.create_chat(&c).unwrap();
    assert_eq!(s.get_chat("c1").unwrap(), Some(c));
    let turn = s.begin_turn(&user("c1", "m1", 100), 60).unwrap();
    assert_eq!(turn.chat.chat_id, "c1");
    s.append_message(&answer("c1", "m2", 101)).unwrap();
    let (msgs, total) = s.list_messages("c1", Page { page: 1, size: 10 }).unwrap();
    assert_eq!(total, 2);
    assert_eq!(msgs[1], answer("c1", "m2", 101));
    assert!(s.delete_chat("c1").unwrap());
    assert!(!s.delete_chat("c1").unwrap());
    assert_eq!(s.get_chat("c1").unwrap(), None);
    // The messages went with the chat: a chat created again under the id starts empty.
    s.create_chat(&chat("c1")).unwrap();
    assert_eq!(s.list_messages("c1", Page { page: 1, size: 10 }).unwrap().1, 0);
}

fn turns_alternate_and_lease_expires(s: &mut dyn Store) {
    s.create_chat(&chat("c1")).unwrap();
    let t = s.begin_turn(&user("c1", "m1", 100), 60).unwrap();
    assert_eq!(t.messages.len(), 1);
    // Unanswered and within the lease: busy, and nothing stored.
    assert_eq!(
        s.begin_turn(&user("c1", "m2", 159), 60),
        Err(StoreError::Busy { chat_id: "c1".into(), lease_secs: 60 })
    );
    s.append_message(&answer("c1", "m3", 120)).unwrap();
    let t = s.begin_turn(&user("c1", "m4", 130), 60).unwrap();
    let ids: Vec<_> = t.messages.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids, ["m1", "m3", "m4"]);
    // A turn whose answer never came (a crash) holds the chat only for the lease.
    let t = s.begin_turn(&user("c1", "m5", 190), 60).unwrap();
    assert_eq!(t.messages.len(), 4);
    // A turn refused before its answer began leaves the chat as it was, and free at once.
    assert!(s.withdraw_turn("m5").unwrap());
    assert!(!s.withdraw_turn("m5").unwrap(), "withdrawn once");
    assert!(!s.withdraw_turn("m3").unwrap(), "an answer is never withdrawn");
    let t = s.begin_turn(&user("c1", "m6", 191), 60).unwrap();
    let ids: Vec<_> = t.messages.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids, ["m1", "m3", "m4", "m6"]);
}

fn pages_are_ordered_and_counted(s: &mut dyn Store) {
    for i in 0..7 {
        s.create_chat(&chat(&format!("c{i}"))).unwrap();
    }
    let (p1, total) = s.list_chats(Page { page: 1, size: 3 }).unwrap();
    let (p3, _) = s.list_chats(Page { page: 3, size: 3 }).unwrap();
    let (p4, _) = s.list_chats(Page { page: 4, size: 3 }).unwrap();
    assert_eq!(total, 7);
    let ids = |v: &[Chat]| v.iter().map(|c| c.chat_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&p1), ["c6", "c5", "c4"], "newest first");
    assert_eq!(ids(&p3), ["c0"]);
    assert!(p4.is_empty());
    for i in 0..5 {
        s.append_message(&answer("c2", &format!("m{i}"), 100)).unwrap();
    }
    let (m, total) = s.list_messages("c2", Page { page: 2, size: 2 }).unwrap();
    assert_eq!(total, 5);
    assert_eq!(m.iter().map(|m| m.message_id.as_str()).collect::<Vec<_>>(), ["m2", "m3"], "oldest first");
}

fn unknown_chats_are_not_found(s: &mut dyn Store) {
    let nf = Err(StoreError::NotFound("nope".into()));
    assert_eq!(s.begin_turn(&user("nope", "m1", 1), 60).map(|_| ()), nf);
    assert_eq!(s.append_message(&answer("nope", "m1", 1)), nf);
    assert_eq!(s.list_messages("nope", Page { page: 1, size: 1 }).map(|_| ()), nf);
    assert_eq!(s.get_chat("nope").unwrap(), None);
}
