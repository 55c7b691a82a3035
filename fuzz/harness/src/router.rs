//! The router on arbitrary methods and paths: never panics, and what it finds is consistent —
//! a found route's template, with its captured parameters put back, spells the path exactly.

use mtplx_lite::api::router::{Lookup, Router};
use mtplx_lite::api::state::ROUTES;

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (method, path) = text.split_once(' ').unwrap_or(("GET", &text));
    let router = ROUTES
        .iter()
        .chain([("GET", "/v1/chats/{chat_id}/messages/{message_id}", ROUTES[0].2)].iter())
        .fold(Router::new(), |r, &(m, t, route)| r.add(m, t, route));
    match router.lookup(method, path) {
        Lookup::Found { template, params, .. } => {
            let rebuilt: Vec<String> = template
                .split('/')
                .map(|seg| match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    Some(name) => params.get(name).expect("every parameter is captured").to_string(),
                    None => seg.to_string(),
                })
                .collect();
            assert_eq!(rebuilt.join("/"), path);
        }
        Lookup::MethodNotAllowed { allow, .. } => {
            assert!(!allow.is_empty());
            assert!(!allow.split(", ").any(|m| m == method), "{method} is allowed yet refused");
        }
        Lookup::NotFound => {}
    }
}
