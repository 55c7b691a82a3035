//! Nothing acknowledged is lost: `kill -9` in the middle of many concurrent chats, on SQLite
//! and on PostgreSQL; and two servers on one PostgreSQL serve the same chats.

mod common;

use common::chats::{call, create, messages, start, turn, TempDir};
use common::sse::Sse;
use mtplx_lite::store::pg_cluster::PgCluster;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Clients talking to the server when it is killed.
const CLIENTS: usize = 12;
/// Turns acknowledged before the kill: enough that many chats are mid-turn at that moment.
const ACKED_BEFORE_KILL: usize = 30;
/// Bound on reaching that many; only a broken server is this slow.
const LOAD_DEADLINE: Duration = Duration::from_secs(120);

/// What the clients were told was stored, per chat: its id, the ids of messages in whole
/// answers, and the questions whose streamed answer had started (a stream's head is sent only
/// once its question is committed; its id comes at the end).
type Acked = Arc<Mutex<Vec<(String, Vec<String>, Vec<String>)>>>;

fn kill_mid_load_loses_nothing(database: &str) {
    let s = start(database, &[]);
    let addr = s.addr;
    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (acked, stop) = (acked.clone(), stop.clone());
            std::thread::spawn(move || {
                // Requests to a killed server fail (panic): the client stops there.
                let _ = std::panic::catch_unwind(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let id = create(addr, &json!({"temperature": 0}));
                        let slot = {
                            let mut a = acked.lock().unwrap();
                            a.push((id.clone(), Vec::new(), Vec::new()));
                            a.len() - 1
                        };
                        for t in 0..3 {
                            let question = format!("Client {i}, turn {t}: say a word.");
                            let r = if i.is_multiple_of(2) {
                                turn(addr, &id, &question, 3)
                            } else {
                                let body = json!({"content": question, "stream": true, "max_tokens": 3});
                                let mut sse = Sse::open(addr, &format!("/v1/chats/{id}/messages"), &body);
                                assert_eq!(sse.status, 200);
                                acked.lock().unwrap()[slot].2.push(question);
                                sse.rest().pop().unwrap()
                            };
                            let ids = [&r["user_message"]["message_id"], &r["assistant_message"]["message_id"]];
                            acked.lock().unwrap()[slot].1.extend(ids.iter().map(|v| v.as_str().unwrap().to_string()));
                        }
                    }
                });
            })
        })
        .collect();
    let deadline = Instant::now() + LOAD_DEADLINE;
    while acked.lock().unwrap().iter().map(|(_, m, _)| m.len() / 2).sum::<usize>() < ACKED_BEFORE_KILL {
        assert!(Instant::now() < deadline, "the server never acknowledged {ACKED_BEFORE_KILL} turns");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut s = s;
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    let s = start(database, &[]);
    let mut turns = 0;
    let mut streamed = 0;
    for (chat_id, ids, questions) in &acked {
        let stored = messages(s.addr, chat_id);
        let ids_stored: Vec<&str> = stored.iter().map(|m| m["message_id"].as_str().unwrap()).collect();
        for id in ids {
            assert!(ids_stored.contains(&id.as_str()), "acknowledged message {id} of {chat_id} was lost: {stored:?}");
        }
        for q in questions {
            assert!(stored.iter().any(|m| m["content"] == q.as_str()), "the question {q:?} was lost: {stored:?}");
        }
        turns += ids.len() / 2;
        streamed += questions.len();
    }
    assert!(streamed > 0, "some answers were streamed");
    assert!(turns >= ACKED_BEFORE_KILL && acked.len() >= CLIENTS, "{turns} turns in {} chats", acked.len());
    // The killed server's chats all open, and go on.
    let total = call(s.addr, "GET", "/v1/chats?page_size=1", None).json()["total"].as_u64().unwrap();
    assert!(total as usize >= acked.len());
    // A chat whose turn was cut by the kill stays busy for its lease (store/mod.rs, `Busy`): one
    // whose last turn was answered goes on at once.
    let answered = acked
        .iter()
        .find(|(chat_id, _, _)| messages(s.addr, chat_id).last().is_some_and(|m| m["role"] == "assistant"))
        .expect("some chat's last turn was answered before the kill");
    turn(s.addr, &answered.0, "Still there?", 2);
}

#[test]
fn kill_9_under_load_loses_nothing_acknowledged_on_sqlite() {
    let dir = TempDir::new("chats-kill");
    kill_mid_load_loses_nothing(&dir.join("chats.db"));
}

#[test]
fn postgres_kill_9_and_two_replicas_serving_one_chat() {
    let pg = PgCluster::start().unwrap_or_else(|e| panic!("{e}"));
    kill_mid_load_loses_nothing(&pg.database("killed").unwrap());

    let url = pg.url();
    let (a, b) = (start(&url, &[]), start(&url, &[]));
    let id = create(a.addr, &json!({"system": "Answer in one word.", "temperature": 0}));
    let first = turn(a.addr, &id, "Name a fruit.", 3);
    let second = turn(b.addr, &id, "Name another.", 3);
    // B generated from the whole conversation A stored.
    let (p1, p2) = (&first["assistant_message"]["prompt_tokens"], &second["assistant_message"]["prompt_tokens"]);
    assert!(p2.as_i64().unwrap() > p1.as_i64().unwrap(), "{p1} {p2}");
    assert_eq!(messages(a.addr, &id), messages(b.addr, &id));
    assert_eq!(messages(a.addr, &id).len(), 4);
    // While A answers, B refuses the chat's next message: the database says it is answering.
    let long = json!({"content": "Tell a long story.", "stream": true, "max_tokens": 40, "temperature": 0.8});
    let mut on_a = Sse::open(a.addr, &format!("/v1/chats/{id}/messages"), &long);
    on_a.next_data().expect("a first chunk");
    let busy = call(b.addr, "POST", &format!("/v1/chats/{id}/messages"), Some(&json!({"content": "hi"})));
    assert_eq!(busy.status, 409, "{}", busy.text());
    on_a.rest();
    assert_eq!(messages(b.addr, &id).len(), 6);
    let listed = call(b.addr, "GET", "/v1/chats", None).json();
    assert_eq!(listed["total"], 1);
}
