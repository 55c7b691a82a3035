//! Routes and handlers: from a parsed request to a response.

pub mod admission;
pub mod router;
