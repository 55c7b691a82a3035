//! Routes and handlers: from a parsed request to a response.
//!
//! `app` routes a request, applies admission and calls a handler (`health`,
//! `metrics_handlers`, `openai`, `anthropic`, `dashboard`); `openai_request` and
//! `anthropic_request` validate bodies into one internal request, `prepare` turns them into
//! prompt tokens off the I/O thread, `generation` drives one generation (stop sequences,
//! streaming, the request's deadline; `idle_timer` times its keep-alives), `record` turns its end into a metrics record, and `wire` (`anthropic_wire` for the Messages API) spells every answer.
//! `chats` serves the persisted conversations (`chats_request` validates their bodies,
//! `client_geo` says where a client is) on the `store` layer.
//! `state` holds what the files share, and imports none of them.

#![forbid(unsafe_code)]

pub mod admission;
pub mod anthropic;
pub mod anthropic_request;
pub mod anthropic_tools;
pub mod anthropic_wire;
pub mod app;
pub mod chats;
pub mod chats_request;
pub mod client_geo;
pub mod cors;
pub mod dashboard;
pub mod error;
pub mod generation;
pub mod health;
pub mod idle_timer;
pub mod metrics_handlers;
pub mod openai;
pub mod openai_agent_fields;
pub mod openai_request;
pub mod prepare;
pub mod prompt_cache;
pub mod record;
pub mod refused_fields;
pub mod request_fields;
pub mod router;
pub mod state;
pub mod stop;
pub mod stream;
pub mod tool_calls;
pub mod tools;
pub mod wire;
