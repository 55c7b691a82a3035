//! Errors in the OpenAI shape: `{"error": {"message", "type", "param", "code"}}`.

use super::wire::{ErrorBody, ErrorDetail};
use crate::http::{HttpError, Response};

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `rate_limit_error`, `server_error`, ...
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Extra response headers (`Allow`, `Retry-After`, `WWW-Authenticate`).
    pub headers: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), kind, param: None, code: None, headers: Vec::new() }
    }

    /// A 400 about one request field.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.into()),
            code: Some("invalid_value"),
            ..ApiError::new(400, "invalid_request_error", message)
        }
    }

    pub fn code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> ApiError {
        self.headers.push((name, value.into()));
        self
    }

    /// The `error` object, also sent inside the last chunk of a stream that failed.
    pub fn detail(&self) -> ErrorDetail<'_> {
        ErrorDetail { message: &self.message, kind: self.kind, param: self.param.as_deref(), code: self.code }
    }

    pub fn into_response(self) -> Response {
        let mut r = Response::json(self.status, &ErrorBody { error: self.detail() });
        for (n, v) in self.headers {
            r.headers.push((n.to_string(), v));
        }
        r
    }
}

/// A request the HTTP server refused itself (a limit, a malformed head, a timeout), in the same
/// shape as every other error: the server's status, reason and code.
impl From<&HttpError> for ApiError {
    fn from(e: &HttpError) -> ApiError {
        let kind = if e.status() >= 500 { "server_error" } else { "invalid_request_error" };
        ApiError::new(e.status(), kind, e.to_string()).code(e.code())
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_refusals_take_the_openai_shape() {
        let e = ApiError::from(&HttpError::BodyTooLarge { len: 10, limit: 5 });
        let resp = e.clone().into_response();
        let crate::http::Body::Full(bytes) = &resp.body else { panic!("an error is a full body") };
        let v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        assert_eq!(resp.status, 413);
        assert_eq!((e.status, v["error"]["code"].as_str()), (413, Some("body_too_large")));
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["param"].is_null());
        assert!(v["error"]["message"].as_str().unwrap().contains("limit of 5 bytes"), "{v}");
        let e = ApiError::from(&HttpError::TooManyConnections { limit: 3 });
        assert_eq!((e.status, e.kind, e.code), (503, "server_error", Some("too_many_connections")));
    }
}
