//! Model implementations: [`ScriptedModel`], an offline, deterministic model for
//! development, tests and benchmarks, so the whole server can be exercised without
//! network access or credentials; and the real providers, each a thin adapter from its
//! provider's stream to `ModelEvent`s:
//!
//! - [`OpenAiModel`]: OpenAI-compatible Chat Completions (OpenAI, Ollama, vLLM,
//!   llama.cpp, LM Studio, OpenRouter, …);
//! - [`AnthropicModel`]: Anthropic's Messages API.
//!
//! [`from_spec`] builds any of them from a `PROVIDER:MODEL` string and the environment.
//! What the providers share — retries with backoff before any output, error codes, the
//! API key kept out of every error text, reading server-sent events — lives in
//! `transport` and `failure`, so the two adapters hold only their wire formats.
//!
//! # The scripted model
//!
//! The scripted model (name `scripted`) answers the **last message** of the
//! conversation. When it is a user message, its text (trimmed) picks a directive:
//!
//! | Prompt | Answer |
//! |---|---|
//! | `echo: TEXT` | TEXT streamed back word by word; whitespace inside TEXT is kept, so the deltas join to exactly TEXT. |
//! | `stream: N` | N text deltas `w1`, ` w2`, …, ` wN` (N from 0 to 1000000), i.e. the text `w1 w2 … wN`. |
//! | `tool: NAME {json args}` | A call of tool NAME with the given arguments (`{}` when none are given), streamed in a few fragments; the message stops with `toolUse`. The arguments are sent as written, even if they are not valid JSON, and NAME need not be a tool the run offers: that is how the engine's handling of bad calls is exercised. |
//! | anything else | `You said: "PROMPT"`, streamed word by word (PROMPT cut to 200 characters). |
//!
//! When the last message is a tool result (the model is called again after a tool
//! call), it answers with a one-line summary: `Tool NAME returned N lines: FIRST_LINE`,
//! or `Tool NAME failed: FIRST_LINE` when the result is an error (the first line cut to
//! 120 characters).
//!
//! Every answer ends with a usage report — input: the characters of all message text
//! in the request divided by 4, rounded up; output: the number of deltas — and then
//! the stop reason. Tool call ids are `call_1`, `call_2`, … counted over the tool calls
//! already in the conversation, so they are unique within it and the same on a replay.
//!
//! `--scripted-delay-ms` sets a pause between consecutive deltas, to make streaming
//! visible in a browser or to test slow clients; zero (the default) streams as fast as
//! the consumer reads.

mod anthropic;
mod conversation;
mod failure;
mod files;
mod openai;
mod script;
mod scripted;
mod spec;
mod transport;

pub use anthropic::{AnthropicConfig, AnthropicModel};
pub use openai::{OpenAiConfig, OpenAiModel};
pub use scripted::ScriptedModel;
pub use spec::{OLLAMA_DEFAULT_BASE_URL, OPENAI_DEFAULT_BASE_URL, PROVIDERS, from_spec};
pub use transport::{BuildError, RetryPolicy};
