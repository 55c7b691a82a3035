//! Errors in the OpenAI shape: `{"error": {"message", "type", "param", "code"}}`.

use super::wire::{ErrorBody, ErrorDetail};
use crate::http::Response;

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
        ApiError { param: Some(param.into()), code: Some("invalid_value"), ..ApiError::new(400, "invalid_request_error", message) }
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

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.message)
    }
}
