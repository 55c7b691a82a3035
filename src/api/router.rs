//! Routes as (method, path template) pairs with `{param}` segments.
//!
//! The template, never the raw URL, is what metrics label a request with, so that ids in paths
//! (`/v1/chats/{chat_id}/messages`) do not become series of their own.

/// Most `{param}` segments one template may have; ours have at most a few.
pub const MAX_PARAMS: usize = 4;

/// Captured `{param}` values of a matched path, in template order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Params<'p> {
    pairs: Vec<(&'static str, &'p str)>,
}

impl<'p> Params<'p> {
    pub fn get(&self, name: &str) -> Option<&'p str> {
        self.pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

/// The outcome of looking a request up.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'p, R> {
    Found {
        route: R,
        template: &'static str,
        params: Params<'p>,
    },
    /// The path matches a template, but not with this method; `allow` lists the methods that do.
    MethodNotAllowed {
        template: &'static str,
        allow: String,
    },
    NotFound,
}

pub struct Router<R> {
    routes: Vec<(&'static str, &'static str, R)>,
}

impl<R: Copy> Router<R> {
    pub fn new() -> Self {
        Router { routes: Vec::new() }
    }

    /// Adds `method template`; panics on a malformed template, which is a programming error
    /// caught by the first test that builds the router.
    pub fn add(mut self, method: &'static str, template: &'static str, route: R) -> Self {
        assert!(template.starts_with('/'), "route template must start with '/': {template}");
        assert!(template.matches('{').count() <= MAX_PARAMS, "too many params in {template}");
        self.routes.push((method, template, route));
        self
    }

    pub fn lookup<'p>(&self, method: &str, path: &'p str) -> Lookup<'p, R> {
        let mut allow: Vec<&str> = Vec::new();
        let mut matched_template = None;
        for &(m, template, route) in &self.routes {
            let Some(params) = match_template(template, path) else {
                continue;
            };
            // HEAD is answered by the GET handler; the server drops the body.
            if m == method || (method == "HEAD" && m == "GET") {
                return Lookup::Found { route, template, params };
            }
            matched_template.get_or_insert(template);
            if !allow.contains(&m) {
                allow.push(m);
            }
        }
        match matched_template {
            Some(template) => {
                if allow.contains(&"GET") && !allow.contains(&"HEAD") {
                    allow.push("HEAD");
                }
                Lookup::MethodNotAllowed { template, allow: allow.join(", ") }
            }
            None => Lookup::NotFound,
        }
    }

    /// Every template, for documentation and for sizing metric label sets.
    pub fn templates(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.routes.iter().map(|r| r.1)
    }
}

impl<R: Copy> Default for Router<R> {
    fn default() -> Self {
        Self::new()
    }
}

fn match_template<'p>(template: &'static str, path: &'p str) -> Option<Params<'p>> {
    let mut params = Params::default();
    let mut t = template.split('/');
    let mut p = path.split('/');
    loop {
        match (t.next(), p.next()) {
            (None, None) => return Some(params),
            (Some(ts), Some(ps)) => {
                if let Some(name) = ts.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    if ps.is_empty() {
                        return None;
                    }
                    params.pairs.push((name, ps));
                } else if ts != ps {
                    return None;
                }
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router() -> Router<u8> {
        Router::new()
            .add("GET", "/health", 1)
            .add("POST", "/v1/chat/completions", 2)
            .add("GET", "/v1/chats/{chat_id}/messages", 3)
            .add("POST", "/v1/chats/{chat_id}/messages", 4)
    }

    #[test]
    fn finds_static_and_templated_routes() {
        let r = router();
        assert!(matches!(r.lookup("GET", "/health"), Lookup::Found { route: 1, .. }));
        match r.lookup("POST", "/v1/chats/abc/messages") {
            Lookup::Found { route, template, params } => {
                assert_eq!(route, 4);
                assert_eq!(template, "/v1/chats/{chat_id}/messages");
                assert_eq!(params.get("chat_id"), Some("abc"));
                assert_eq!(params.get("other"), None);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn wrong_method_lists_allowed_methods() {
        assert_eq!(
            router().lookup("DELETE", "/v1/chats/x/messages"),
            Lookup::MethodNotAllowed { template: "/v1/chats/{chat_id}/messages", allow: "GET, POST, HEAD".into() }
        );
        assert_eq!(
            router().lookup("GET", "/v1/chat/completions"),
            Lookup::MethodNotAllowed { template: "/v1/chat/completions", allow: "POST".into() }
        );
    }

    #[test]
    fn head_is_served_by_get() {
        assert!(matches!(router().lookup("HEAD", "/health"), Lookup::Found { route: 1, .. }));
    }

    #[test]
    fn near_misses_are_not_found() {
        let r = router();
        for path in ["/", "", "/health/", "/healthz", "/v1/chats//messages", "/v1/chats/a/messages/x", "/v1"] {
            assert_eq!(r.lookup("GET", path), Lookup::NotFound, "{path}");
        }
    }
}
