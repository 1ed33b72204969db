//! Wire dialects: pure mappings from the engine's native frames to the events another
//! kind of client expects. A dialect module does no I/O and holds no shared state; what
//! it needs to remember between frames of one connection (a run's sequence number, the
//! status an `agent_end` announced) is a small value the connection owns and passes in.
//! The transports that feed them live in `http/`.

pub mod run_stream;
pub mod ws_hub;
