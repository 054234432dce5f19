//! The HTTP road: server (accept, shutdown), filter (auth, limits), router, envelopes and
//! answers, idempotency replay, streamed logs' bodies, the OpenAPI document, and the embedded
//! web page's static files (assets). Handlers live in `api`, which knows nothing of this layer.

pub mod assets;
pub mod conn_io;
pub mod filter;
pub mod idem;
pub mod openapi;
pub mod ops;
pub mod response;
pub mod restyle;
pub mod router;
pub mod server;
