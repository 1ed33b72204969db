//! The check the `request_json` cargo-fuzz target runs (see `fuzz/`).
//!
//! Every handler module that reads a JSON body lists it in a `BODIES` table: the route
//! and a [`BodyCheck`](crate::extract::BodyCheck) that parses and checks bytes exactly
//! as the handler does before it calls the engine; `http::request_bodies` gathers the
//! tables. The target feeds the same bytes to every entry. It lives in the library, not
//! the fuzz crate, so `cargo test` runs it over the committed seed corpus
//! (`tests/fuzz_corpus.rs`) and the target cannot rot between fuzzing runs.

use axum::response::IntoResponse;

/// Request JSON target: `data` as the body of every route that reads one. Parsing never
/// panics, and a refused body is a client error (4xx) — a malformed request must not
/// look like a server fault. Returns the routes that accepted `data`.
pub fn request_json(data: &[u8]) -> Vec<&'static str> {
    let mut accepted = Vec::new();
    for &(route, check) in crate::http::request_bodies() {
        match check(data) {
            Ok(()) => accepted.push(route),
            Err(error) => {
                let status = error.into_response().status();
                assert!(status.is_client_error(), "{route} answered {status} to a body it refused");
            }
        }
    }
    accepted
}

/// Every route [`request_json`] covers.
pub fn request_routes() -> Vec<&'static str> {
    crate::http::request_bodies().map(|&(route, _)| route).collect()
}
