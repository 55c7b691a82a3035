//! Routes and handlers: from a parsed request to a response.
#![forbid(unsafe_code)]

pub mod admission;
pub mod app;
pub mod generation;
pub mod health;
pub mod metrics_routes;
pub mod openai;
pub mod error;
pub mod openai_request;
pub mod router;
pub mod stop;
