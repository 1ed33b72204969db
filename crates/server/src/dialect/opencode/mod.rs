//! The OpenCode-compatible dialect (seed 004): OpenCode's HTTP API and its global
//! `GET /event` stream, mapped from Spool's records and native frames, so existing
//! OpenCode clients (`@opencode-ai/sdk`, root and `/v2`) drive Spool unchanged.
//!
//! * [`wire`] — OpenCode's JSON shapes (the union of both SDK generations).
//! * [`ids`] — message and part ids derived from `(session, index)`, so the stream and
//!   the history name a message the same way without storing a second id.
//! * [`records`] — stored records → OpenCode: sessions, history, permissions. Pure.
//! * [`mapper`] — native frames → OpenCode events, one mapper per session per
//!   connection. Pure: it holds only what the next frame's mapping needs (which parts
//!   are open, how much of their text went out) and is tested with golden frames.
//! * [`requests`] — the request bodies and query parameters, each with its check.
//!
//! The transport is `routes/`: the routes, the `/event` stream that follows the
//! directory's sessions (`routes/global.rs`), the prompt marks a new follower replays
//! from (`routes/marks.rs`) and which project a request means (`routes/directory.rs`).

pub mod ids;
pub mod live_ask;
pub mod mapper;
pub mod records;
pub mod requests;
pub(crate) mod routes;
pub mod wire;

#[cfg(test)]
mod tests;
