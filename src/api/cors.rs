//! Cross-origin requests (the Fetch standard's CORS protocol) for browser clients on another
//! origin, allowed per origin with `--cors-allow-origin`; off by default.

use crate::http::{Request, Response};

/// Seconds a browser may cache a preflight answer (`Access-Control-Max-Age`).
pub const PREFLIGHT_MAX_AGE_SECS: u32 = 600;
/// Request headers a cross-origin client may send (what the OpenAI clients send).
pub const ALLOWED_HEADERS: &str =
    "Authorization, Content-Type, Accept, Last-Event-ID, OpenAI-Organization, OpenAI-Project";

/// The allowed origins; empty means CORS is off and no CORS header is ever sent.
#[derive(Clone, Debug, Default)]
pub struct Cors {
    origins: Vec<String>,
}

impl Cors {
    pub fn new(origins: Vec<String>) -> Cors {
        Cors { origins: origins.into_iter().map(|o| o.trim_end_matches('/').to_string()).collect() }
    }

    /// The `Access-Control-Allow-Origin` value for this request's `Origin`, if it is allowed.
    fn allow_origin<'r>(&self, req: &'r Request) -> Option<&'r str> {
        let origin = req.header("origin")?;
        self.origins.iter().any(|o| o == "*" || o.eq_ignore_ascii_case(origin)).then_some(origin)
    }

    /// Whether this is a preflight (`OPTIONS` with `Access-Control-Request-Method`) that CORS
    /// answers.
    pub fn is_preflight(&self, req: &Request) -> bool {
        !self.origins.is_empty() && req.method == "OPTIONS" && req.header("access-control-request-method").is_some()
    }

    /// The answer to a preflight for a route that allows `methods`. An origin that is not
    /// allowed gets the same 204 without CORS headers, so the browser refuses the real request.
    pub fn preflight(&self, req: &Request, methods: &str) -> Response {
        let mut r = Response::new(204, "text/plain", Vec::new()).with_header("Vary", "Origin");
        if let Some(origin) = self.allow_origin(req) {
            r = r
                .with_header("Access-Control-Allow-Origin", origin)
                .with_header("Access-Control-Allow-Methods", methods)
                .with_header("Access-Control-Allow-Headers", ALLOWED_HEADERS)
                .with_header("Access-Control-Max-Age", PREFLIGHT_MAX_AGE_SECS.to_string());
        }
        r
    }

    /// Adds the CORS headers that let a browser read `resp`, when the origin is allowed.
    pub fn decorate(&self, req_origin_allowed: Option<String>, resp: &mut Response) {
        if let Some(origin) = req_origin_allowed {
            resp.headers.push(("Access-Control-Allow-Origin".into(), origin));
            resp.headers.push(("Vary".into(), "Origin".into()));
        }
    }

    /// The allowed origin of a request, taken before the request moves into its handler.
    pub fn origin_of(&self, req: &Request) -> Option<String> {
        if self.origins.is_empty() {
            return None;
        }
        self.allow_origin(req).map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: method.into(),
            path: "/v1/chat/completions".into(),
            query: None,
            version: 1,
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
            body: Vec::new(),
            peer: "127.0.0.1:1".parse().unwrap(),
        }
    }

    fn header<'a>(r: &'a Response, name: &str) -> Option<&'a str> {
        r.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    #[test]
    fn preflight_from_an_allowed_origin_lists_methods_and_headers() {
        let c = Cors::new(vec!["https://app.example".into()]);
        let r = req("OPTIONS", &[("Origin", "https://app.example"), ("Access-Control-Request-Method", "POST")]);
        assert!(c.is_preflight(&r));
        let resp = c.preflight(&r, "POST");
        assert_eq!(resp.status, 204);
        assert_eq!(header(&resp, "access-control-allow-origin"), Some("https://app.example"));
        assert_eq!(header(&resp, "access-control-allow-methods"), Some("POST"));
        assert!(header(&resp, "access-control-allow-headers").unwrap().contains("Authorization"));
    }

    #[test]
    fn other_origins_and_cors_off_get_no_cors_headers() {
        let c = Cors::new(vec!["https://app.example".into()]);
        let r = req("OPTIONS", &[("Origin", "https://evil.example"), ("Access-Control-Request-Method", "POST")]);
        assert_eq!(header(&c.preflight(&r, "POST"), "access-control-allow-origin"), None);
        assert_eq!(c.origin_of(&r), None);
        let off = Cors::default();
        assert!(!off.is_preflight(&r));
        assert_eq!(off.origin_of(&req("POST", &[("Origin", "https://app.example")])), None);
        let any = Cors::new(vec!["*".into()]);
        assert_eq!(any.origin_of(&r).as_deref(), Some("https://evil.example"));
    }
}
