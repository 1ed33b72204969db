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
//! * [`global`] — the `/event` body: follows every busy session of the directory and
//!   merges their mapped frames with the directory's session changes and a heartbeat.
//! * [`marks`] — where a session's stream stood before an OpenCode prompt, so a
//!   connection that starts following it replays the run from its start.
//! * [`directory`] — which project a request means (`x-opencode-directory`).
//!
//! The routes themselves are in `http/opencode.rs`.

pub mod directory;
pub mod global;
pub mod ids;
pub mod mapper;
pub mod marks;
pub mod records;
pub mod wire;

#[cfg(test)]
mod tests;
