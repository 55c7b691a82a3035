//! Routes and handlers: from a parsed request to a response.

pub mod admission;
pub mod error;
pub mod openai_request;
pub mod router;
pub mod stop;
