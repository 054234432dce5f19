//! The HTTP road: server (accept, shutdown), filter (auth, limits), router, params, responses,
//! and the embedded web page's static files (assets).

pub mod assets;
pub mod conn_io;
pub mod filter;
pub mod idem;
pub mod json;
pub mod openapi;
mod openapi_errors;
pub mod ops;
pub mod params;
pub mod response;
pub mod router;
pub mod server;
