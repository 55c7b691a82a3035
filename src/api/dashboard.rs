//! The dashboard and chat page: static files embedded in the binary (`assets/dashboard/`),
//! served at `/`, `/dashboard` and `/dashboard/{asset}` with an `ETag` (a matching
//! `If-None-Match` gets a 304), revalidated on every load, under a Content-Security-Policy that
//! allows nothing but this origin's own files (no inline script, no eval, no other host).

use super::error::ApiError;
use crate::http::{Request, Response};

/// Every script, style sheet and connection must come from this origin; no inline code, no
/// `eval`, no frames, no forms, no plugins. What a request produced (prompts, answers, ids) is
/// inserted as text by the page, and the policy stops whatever slipped through anyway.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The files are not named by content, so a browser must ask again each load; with the ETag that
/// costs a 304 and no body.
const CACHE_CONTROL: &str = "no-cache";

/// One embedded file.
pub struct Asset {
    /// The name under `/dashboard/`.
    pub name: &'static str,
    pub content_type: &'static str,
    pub bytes: &'static [u8],
    /// FNV-1a of the bytes, computed at compile time: the ETag changes with the file.
    hash: u64,
}

const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

macro_rules! asset {
    ($name:literal, $ty:expr) => {
        Asset {
            name: $name,
            content_type: $ty,
            bytes: include_bytes!(concat!("../../assets/dashboard/", $name)),
            hash: fnv1a(include_bytes!(concat!("../../assets/dashboard/", $name))),
        }
    };
}

/// What every file of the page together may weigh (issue: the whole page at most 200 KB).
pub const MAX_PAGE_BYTES: usize = 200 * 1024;

const JS: &str = "text/javascript; charset=utf-8";

/// The page first, then what it loads.
pub static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("auth.js", JS),
    asset!("charts.js", JS),
    asset!("chat.js", JS),
    asset!("live.js", JS),
    asset!("state.js", JS),
    asset!("stats.js", JS),
    asset!("table.js", JS),
    asset!("favicon.svg", "image/svg+xml"),
];

impl Asset {
    pub fn etag(&self) -> String {
        format!("\"{:016x}\"", self.hash)
    }
}

/// `GET /` and `GET /dashboard`: the page; `GET /favicon.ico`, which browsers ask for whatever
/// the page names: its icon.
pub fn page(req: &Request) -> Response {
    match req.path.as_str() {
        "/favicon.ico" => serve(req, ASSETS.iter().find(|a| a.name == "favicon.svg").unwrap_or(&ASSETS[0])),
        _ => serve(req, &ASSETS[0]),
    }
}

/// `GET /dashboard/{asset}`: a file the page loads.
pub fn asset(req: &Request, name: &str) -> Result<Response, ApiError> {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => Ok(serve(req, a)),
        None => Err(ApiError::new(404, "invalid_request_error", format!("the dashboard has no file '{}'", name))
            .code("not_found")),
    }
}

fn serve(req: &Request, a: &Asset) -> Response {
    let etag = a.etag();
    let fresh = req.header("if-none-match").is_some_and(|v| {
        v.split(',').map(str::trim).any(|t| t == "*" || t == etag || t.strip_prefix("W/") == Some(etag.as_str()))
    });
    // A copy per full answer: the page is fetched once per visit, and revalidated with a 304 after.
    let resp = Response::new(if fresh { 304 } else { 200 }, a.content_type, if fresh { &[][..] } else { a.bytes });
    resp.with_header("ETag", etag)
        .with_header("Cache-Control", CACHE_CONTROL)
        .with_header("Content-Security-Policy", CSP)
        .with_header("X-Content-Type-Options", "nosniff")
        .with_header("Referrer-Policy", "no-referrer")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path_headers: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            path: "/".into(),
            query: None,
            version: 1,
            headers: path_headers.iter().map(|(n, v)| (n.to_string(), v.as_bytes().to_vec())).collect(),
            body: Vec::new(),
            peer: "127.0.0.1:1".parse().unwrap(),
        }
    }

    fn header<'r>(r: &'r Response, name: &str) -> Option<&'r str> {
        r.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    #[test]
    fn page_has_etag_csp_and_revalidates_to_304() {
        let r = page(&get(&[]));
        assert_eq!(r.status, 200);
        assert_eq!(header(&r, "content-type"), Some("text/html; charset=utf-8"));
        assert_eq!(header(&r, "content-security-policy"), Some(CSP));
        let etag = header(&r, "etag").unwrap().to_string();
        assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
        assert_eq!(page(&get(&[("If-None-Match", &etag)])).status, 304);
        assert_eq!(page(&get(&[("If-None-Match", &format!("\"x\", W/{etag}"))])).status, 304);
        assert_eq!(page(&get(&[("If-None-Match", "\"0000\"")])).status, 200);
    }

    #[test]
    fn every_asset_is_served_with_its_type_and_unknown_names_are_404() {
        for a in ASSETS {
            let r = asset(&get(&[]), a.name).unwrap();
            assert_eq!(header(&r, "content-type"), Some(a.content_type), "{}", a.name);
            assert!(!a.bytes.is_empty(), "{} is empty", a.name);
        }
        assert_eq!(asset(&get(&[]), "nope.js").unwrap_err().into_response().status, 404);
    }

    #[test]
    fn the_whole_page_weighs_at_most_max_page_bytes() {
        let total: usize = ASSETS.iter().map(|a| a.bytes.len()).sum();
        assert!(total <= MAX_PAGE_BYTES, "the dashboard weighs {total} bytes, over {MAX_PAGE_BYTES}");
    }

    #[test]
    fn etags_differ_between_files() {
        let mut tags: Vec<String> = ASSETS.iter().map(Asset::etag).collect();
        tags.sort();
        tags.dedup();
        assert_eq!(tags.len(), ASSETS.len());
    }
}
