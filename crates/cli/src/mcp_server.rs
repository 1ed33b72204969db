//! `spool mcp`: a running Spool server offered to another agent as an MCP server over
//! stdio, so it can delegate work to a Spool session. Three tools:
//!
//! - `prompt {text, session?}` sends a prompt (to `session`, or a new session in the
//!   project directory) and waits for its run: the answer once it ends, or, when the
//!   run waits for a person (an approval, a question), what it waits for. A person
//!   answers in Spool (the web UI, `spool chat`); Spool's rules and approvals apply as
//!   to any other client.
//! - `wait {session, run}` waits again for a run `prompt` left waiting.
//! - `pending_approvals {session}` lists what a session's runs wait for.
//!
//! The protocol is rmcp's server side (the official SDK, pinned as for the client in
//! crates/mcp): framing, `initialize` and its version negotiation, `ping`, and each
//! request handled on a task of its own, so a long `wait` blocks nothing. What is
//! here is Spool's part: the three tools, declared by hand with their JSON schemas,
//! and what they answer. A call to a tool this server lacks is a JSON-RPC error
//! (invalid params), as the protocol has it; a tool that fails answers `isError`
//! with the reason, for the calling agent to read. Logs go to stderr, as for every
//! command.

use anyhow::Context;
use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, ServerInitializeError};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use spool_client::protocol::api::PromptAnswer;
use spool_client::protocol::frame::SessionState;
use spool_client::protocol::{RunId, RunStatus, SessionId};
use spool_client::{Client, Event, StreamOptions, finished};
use std::borrow::Cow;
use std::path::PathBuf;

/// The newest protocol version this server speaks: the versions up to it are the ones
/// a client's `initialize` gets as asked; one asking for another gets this one. (The
/// next revision drops `initialize` for per-request metadata; rmcp speaks it, but
/// this server has not been tried with it.)
const NEWEST: ProtocolVersion = ProtocolVersion::V_2025_11_25;

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// The Spool server's base URL.
    #[arg(long, env = "SPOOL_SERVER", default_value = "http://127.0.0.1:4747", value_name = "URL")]
    server: String,
    /// A token from `spool token create` (not needed while auth is off).
    #[arg(long, env = "SPOOL_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The project directory `prompt` starts new sessions in (default: here).
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
}

/// Serves MCP on stdin and stdout until stdin ends.
pub async fn serve(args: McpArgs) -> anyhow::Result<()> {
    let mut client = Client::new(&args.server).with_context(|| format!("--server {}", args.server))?;
    if let Some(token) = &args.token {
        client = client.with_token(token.clone());
    }
    let dir = args.project.clone().unwrap_or_else(|| PathBuf::from("."));
    let project = std::fs::canonicalize(&dir).unwrap_or(dir);
    let project = project.to_str().context("the project path is not UTF-8")?.to_owned();
    let running = match (Spool { client, project }).serve(rmcp::transport::stdio()).await {
        Ok(running) => running,
        // Stdin ended before the client initialized: nothing to serve.
        Err(ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(e) => return Err(e).context("the MCP client's initialize"),
    };
    running.waiting().await.context("serving MCP")?;
    Ok(())
}

fn text(text: impl Into<String>) -> Vec<ContentBlock> {
    vec![ContentBlock::text(text)]
}

fn tools() -> Vec<Tool> {
    let session = json!({"type": "string", "description": "A session id (ses_…)."});
    let schema = |value: Value| match value {
        Value::Object(schema) => schema,
        _ => unreachable!("a schema is an object"),
    };
    vec![
        Tool::new(
            "prompt",
            "Sends a prompt to a Spool session (a new one in the project when `session` is absent) and waits for \
             its run: the answer once it ends, or what it waits for when a person must approve or answer \
             something first.",
            schema(json!({
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The prompt."}, "session": session},
                "required": ["text"],
            })),
        ),
        Tool::new(
            "wait",
            "Waits again for a run `prompt` left waiting for a person: its answer once it ends, or what it waits \
             for next.",
            schema(json!({
                "type": "object",
                "properties": {"session": session, "run": {"type": "string", "description": "A run id (run_…)."}},
                "required": ["session", "run"],
            })),
        ),
        Tool::new(
            "pending_approvals",
            "What a session's runs wait for: the approvals and questions pending in it.",
            schema(json!({"type": "object", "properties": {"session": session}, "required": ["session"]})),
        )
        .with_annotations(ToolAnnotations::new().read_only(true)),
    ]
}

struct Spool {
    client: Client,
    project: String,
}

impl ServerHandler for Spool {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_protocol_version(NEWEST)
            .with_server_info(Implementation::new("spool", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Delegate work to a Spool session: `prompt` sends a prompt and waits for the answer. Spool's \
                 approvals apply: when a run waits for a person, `prompt` says so, and `wait` waits again once \
                 they answered in Spool.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = match request.name.as_ref() {
            "prompt" => self.prompt(&args).await,
            "wait" => self.wait(&args).await,
            "pending_approvals" => self.pending_approvals(&args).await,
            tool => {
                let message = format!("unknown tool {tool}: this server has prompt, wait and pending_approvals");
                return Err(ErrorData::invalid_params(message, None));
            }
        };
        Ok(result.unwrap_or_else(|e| CallToolResult::error(text(format!("{e:#}")))).into())
    }
}

/// A string argument.
fn arg(args: &Value, name: &str) -> Option<String> {
    args[name].as_str().map(str::to_owned)
}

fn session_arg(args: &Value) -> anyhow::Result<SessionId> {
    arg(args, "session").context("`session` is missing")?.parse().context("`session` is not a session id")
}

impl Spool {
    async fn prompt(&self, args: &Value) -> anyhow::Result<CallToolResult> {
        let text = arg(args, "text").filter(|t| !t.trim().is_empty()).context("`text` is missing")?;
        let session = match arg(args, "session") {
            Some(_) => session_arg(args)?,
            None => self.new_session().await?,
        };
        let mut stream = self.client.follow(&session, StreamOptions::default()).await?;
        let run = match self.client.say(&session, &text).await? {
            PromptAnswer::Started(started) => started.run_id,
            PromptAnswer::Queued(queued) => anyhow::bail!(
                "session {session} is busy: the prompt was queued at position {} and runs after the current run",
                queued.position
            ),
        };
        until_settled(&mut stream, &session, &run).await
    }

    async fn wait(&self, args: &Value) -> anyhow::Result<CallToolResult> {
        let session = session_arg(args)?;
        let run: RunId = arg(args, "run").context("`run` is missing")?.parse().context("`run` is not a run id")?;
        let mut stream = self.client.follow(&session, StreamOptions::default()).await?;
        until_settled(&mut stream, &session, &run).await
    }

    async fn pending_approvals(&self, args: &Value) -> anyhow::Result<CallToolResult> {
        let detail = self.client.session(&session_arg(args)?).await?;
        let pending: Vec<Value> = detail.state.pending_approvals.iter().map(approval).collect();
        let mut result = CallToolResult::success(text(serde_json::to_string_pretty(&pending)?));
        result.structured_content = Some(json!({"approvals": pending}));
        Ok(result)
    }

    async fn new_session(&self) -> anyhow::Result<SessionId> {
        let projects = self.client.projects().await.context("cannot list projects")?;
        let project = match projects.into_iter().find(|p| p.path == self.project) {
            Some(project) => project,
            None => self.client.create_project(&self.project, None).await.context("cannot register the project")?,
        };
        Ok(self.client.create_session(&project.id, None).await.context("cannot start a session")?.id)
    }
}

/// An approval as the caller sees it.
fn approval(a: &spool_client::protocol::approval::Approval) -> Value {
    json!({"id": a.id, "run": a.run_id, "tool": a.tool, "kind": a.kind, "payload": a.payload})
}

/// Follows the session until `run` ends or waits for a person.
async fn until_settled(
    stream: &mut spool_client::SessionStream,
    session: &SessionId,
    run: &RunId,
) -> anyhow::Result<CallToolResult> {
    while let Some(update) = stream.next().await {
        if let Event::Failed { error } = &update.event {
            anyhow::bail!("the session's stream ended: {error}");
        }
        if let Some(done) = finished(&update.state, run) {
            let status = done.status.as_str();
            let failed = done.status != RunStatus::Completed;
            let text = match failed {
                true => format!("The run ended {status}.\n{}", done.text),
                false => done.text.clone(),
            };
            let mut result = match failed {
                true => CallToolResult::error(self::text(text)),
                false => CallToolResult::success(self::text(text)),
            };
            result.structured_content =
                Some(json!({"session": session, "run": run, "status": status, "answer": done.text}));
            return Ok(result);
        }
        if let Some(waiting) = waiting(&update.state, run) {
            let structured = json!({"session": session, "run": run, "status": "waiting", "approvals": waiting});
            let text = format!(
                "Run {run} in session {session} waits for a person to answer in Spool: {}. Call `wait` with the \
                 session and run to go on waiting.",
                serde_json::to_string(&waiting)?
            );
            let mut result = CallToolResult::success(self::text(text));
            result.structured_content = Some(structured);
            return Ok(result);
        }
    }
    anyhow::bail!("the session's stream ended before run {run} did")
}

/// What `run` waits for, if anything.
fn waiting(state: &SessionState, run: &RunId) -> Option<Vec<Value>> {
    let pending: Vec<Value> = state.pending_approvals.iter().filter(|a| &a.run_id == run).map(approval).collect();
    (!pending.is_empty()).then_some(pending)
}
