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
//! The protocol part is small, so it is written here rather than taken from rmcp's
//! server side: newline-delimited JSON-RPC on stdin and stdout, `initialize`, `ping`,
//! `tools/list` and `tools/call` (each call on a task of its own, so a long wait blocks
//! nothing). Logs go to stderr, as for every command.

use anyhow::Context;
use futures::StreamExt;
use serde_json::{Value, json};
use spool_client::protocol::api::PromptAnswer;
use spool_client::protocol::frame::SessionState;
use spool_client::protocol::{RunId, RunStatus, SessionId};
use spool_client::{Client, Event, StreamOptions, finished};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The protocol versions this server speaks, newest first; a client asking for another
/// gets the newest.
const VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

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
    let spool = Arc::new(Spool { client, project });

    let (out, mut replies) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(message) = replies.recv().await {
            let mut line = message.to_string();
            line.push('\n');
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await.context("reading stdin")? {
        if line.trim().is_empty() {
            continue;
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            let _ = out.send(error(Value::Null, -32700, "parse error"));
            continue;
        };
        let (id, method) = (message.get("id").cloned(), message["method"].as_str().unwrap_or_default().to_owned());
        let Some(id) = id.filter(|_| !method.is_empty()) else { continue }; // notifications, answers
        let reply = match method.as_str() {
            "initialize" => {
                let asked = message["params"]["protocolVersion"].as_str().unwrap_or_default();
                let version = VERSIONS.iter().find(|v| **v == asked).unwrap_or(&VERSIONS[0]);
                result(id, initialized(version))
            }
            "ping" => result(id, json!({})),
            "tools/list" => result(id, json!({"tools": tools()})),
            "tools/call" => {
                let (spool, out) = (spool.clone(), out.clone());
                let params = message["params"].clone();
                tokio::spawn(async move {
                    let name = params["name"].as_str().unwrap_or_default();
                    let reply = match spool.call(name, &params["arguments"]).await {
                        Ok(output) => result(id, output),
                        Err(e) => result(id, tool_error(&format!("{e:#}"))),
                    };
                    let _ = out.send(reply);
                });
                continue;
            }
            _ => error(id, -32601, &format!("method not found: {method}")),
        };
        let _ = out.send(reply);
    }
    drop(out);
    let _ = writer.await;
    Ok(())
}

fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

fn initialized(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "spool", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Delegate work to a Spool session: `prompt` sends a prompt and waits for the answer. \
                         Spool's approvals apply: when a run waits for a person, `prompt` says so, and `wait` \
                         waits again once they answered in Spool.",
    })
}

fn tools() -> Value {
    let session = json!({"type": "string", "description": "A session id (ses_…)."});
    json!([
        {
            "name": "prompt",
            "description": "Sends a prompt to a Spool session (a new one in the project when `session` is absent) \
                            and waits for its run: the answer once it ends, or what it waits for when a person \
                            must approve or answer something first.",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The prompt."}, "session": session},
                "required": ["text"],
            },
        },
        {
            "name": "wait",
            "description": "Waits again for a run `prompt` left waiting for a person: its answer once it ends, or \
                            what it waits for next.",
            "inputSchema": {
                "type": "object",
                "properties": {"session": session, "run": {"type": "string", "description": "A run id (run_…)."}},
                "required": ["session", "run"],
            },
        },
        {
            "name": "pending_approvals",
            "description": "What a session's runs wait for: the approvals and questions pending in it.",
            "inputSchema": {"type": "object", "properties": {"session": session}, "required": ["session"]},
            "annotations": {"readOnlyHint": true},
        },
    ])
}

struct Spool {
    client: Client,
    project: String,
}

impl Spool {
    async fn call(&self, tool: &str, args: &Value) -> anyhow::Result<Value> {
        let arg = |name: &str| args[name].as_str().map(str::to_owned);
        let session = || -> anyhow::Result<SessionId> {
            arg("session").context("`session` is missing")?.parse().context("`session` is not a session id")
        };
        match tool {
            "prompt" => {
                let text = arg("text").filter(|t| !t.trim().is_empty()).context("`text` is missing")?;
                let session = match arg("session") {
                    Some(_) => session()?,
                    None => self.new_session().await?,
                };
                let mut stream = self.client.follow(&session, StreamOptions::default()).await?;
                let run = match self.client.say(&session, &text).await? {
                    PromptAnswer::Started(started) => started.run_id,
                    PromptAnswer::Queued(queued) => anyhow::bail!(
                        "session {session} is busy: the prompt was queued at position {} and runs after the \
                         current run",
                        queued.position
                    ),
                };
                until_settled(&mut stream, &session, &run).await
            }
            "wait" => {
                let session = session()?;
                let run: RunId = arg("run").context("`run` is missing")?.parse().context("`run` is not a run id")?;
                let mut stream = self.client.follow(&session, StreamOptions::default()).await?;
                until_settled(&mut stream, &session, &run).await
            }
            "pending_approvals" => {
                let detail = self.client.session(&session()?).await?;
                let pending: Vec<Value> = detail.state.pending_approvals.iter().map(approval).collect();
                let text = serde_json::to_string_pretty(&pending)?;
                Ok(json!({"content": [{"type": "text", "text": text}], "structuredContent": {"approvals": pending}}))
            }
            _ => anyhow::bail!("unknown tool {tool}: this server has prompt, wait and pending_approvals"),
        }
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
) -> anyhow::Result<Value> {
    while let Some(update) = stream.next().await {
        if let Event::Failed { error } = &update.event {
            anyhow::bail!("the session's stream ended: {error}");
        }
        if let Some(done) = finished(&update.state, run) {
            let status = serde_json::to_value(done.status)?;
            let failed = done.status != RunStatus::Completed;
            let text = match failed {
                true => format!("The run ended {}.\n{}", status.as_str().unwrap_or_default(), done.text),
                false => done.text.clone(),
            };
            let structured = json!({"session": session, "run": run, "status": status, "answer": done.text});
            return Ok(json!({"content": [{"type": "text", "text": text}], "structuredContent": structured,
                             "isError": failed}));
        }
        if let Some(waiting) = waiting(&update.state, run) {
            let structured = json!({"session": session, "run": run, "status": "waiting", "approvals": waiting});
            let text = format!(
                "Run {run} in session {session} waits for a person to answer in Spool: {}. Call `wait` with the \
                 session and run to go on waiting.",
                serde_json::to_string(&waiting)?
            );
            return Ok(json!({"content": [{"type": "text", "text": text}], "structuredContent": structured}));
        }
    }
    anyhow::bail!("the session's stream ended before run {run} did")
}

/// What `run` waits for, if anything.
fn waiting(state: &SessionState, run: &RunId) -> Option<Vec<Value>> {
    let pending: Vec<Value> = state.pending_approvals.iter().filter(|a| &a.run_id == run).map(approval).collect();
    (!pending.is_empty()).then_some(pending)
}
