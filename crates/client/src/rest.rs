//! [`Client`]: the REST calls a chat needs — projects, sessions, prompts, stop,
//! approvals, snapshots — typed with the server's own wire types
//! (`spool_protocol::api`), and the door to a session's stream ([`Client::follow`]).
//!
//! A `Client` is a cheap `Clone` handle (reqwest pools connections inside). Answers are
//! read with a size limit, so a misbehaving server cannot grow this process without bound.

use crate::error::Error;
use futures::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use spool_protocol::api::{
    Aborted, CreateProject, CreateSession, DecideBody, Decided, ErrorBody, MessagePage, PromptAnswer, PromptBody,
    SessionDetail, SessionInfo,
};
use spool_protocol::{ApprovalId, Decision, Project, ProjectId, Session, SessionId};

/// The largest JSON answer read (a session's detail carries a snapshot of a long
/// session; this is the SSE decoder's limit for one frame too).
pub const MAX_ANSWER_BYTES: usize = spool_protocol::sse::Decoder::DEFAULT_MAX_EVENT;

/// What a steer became (`POST /api/sessions/:id/steer`).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Steered {
    pub message_id: String,
    pub request_id: String,
    /// The run that reads it; `None` when no run was going (it is then a queued prompt).
    pub run_id: Option<spool_protocol::RunId>,
}

/// A connection to one Spool server, optionally with a bearer token.
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client of the server at `base` (`http://127.0.0.1:4747`, `https://spool.example`).
    pub fn new(base: &str) -> Result<Client, Error> {
        let base = base.trim().trim_end_matches('/');
        let parsed = reqwest::Url::parse(base).map_err(|e| Error::BadUrl(format!("{base}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(Error::BadUrl(format!("{base}: expected http://HOST[:PORT] or https://…")));
        }
        // No overall timeout: a session stream stays open for hours. Connecting is
        // bounded; a silent stream is the stream's watchdog's business.
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(Error::Transport)?;
        Ok(Client { http, base: base.to_owned(), token: None })
    }

    /// Sends `Authorization: Bearer TOKEN` with every request (`spool token create`).
    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        self.token = Some(token.into());
        self
    }

    /// The server's base URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub(crate) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn call<T: DeserializeOwned>(&self, request: reqwest::RequestBuilder) -> Result<T, Error> {
        let response = request.send().await?;
        let status = response.status();
        let bytes = read_limited(response).await?;
        if !status.is_success() {
            return Err(api_error(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(|e| Error::Unexpected { status, detail: e.to_string() })
    }

    async fn call_empty(&self, request: reqwest::RequestBuilder) -> Result<(), Error> {
        let response = request.send().await?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        Err(api_error(status, &read_limited(response).await?))
    }

    async fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, Error> {
        self.call(self.request(reqwest::Method::POST, path).json(body)).await
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        self.call(self.request(reqwest::Method::GET, path)).await
    }

    /// The caller's projects.
    pub async fn projects(&self) -> Result<Vec<Project>, Error> {
        self.get("/api/projects").await
    }

    /// Registers a directory on the server's machine as a project.
    pub async fn create_project(&self, path: &str, name: Option<&str>) -> Result<Project, Error> {
        let body = CreateProject { path: path.to_owned(), name: name.map(str::to_owned) };
        self.post("/api/projects", &body).await
    }

    /// Starts a session in a project.
    pub async fn create_session(&self, project: &ProjectId, title: Option<&str>) -> Result<Session, Error> {
        let body = CreateSession { project_id: project.to_string(), title: title.map(str::to_owned) };
        self.post("/api/sessions", &body).await
    }

    /// A project's sessions (archived ones with `archived`), newest activity first.
    pub async fn sessions(&self, project: &ProjectId, archived: bool) -> Result<Vec<SessionInfo>, Error> {
        self.get(&format!("/api/projects/{project}/sessions?archived={archived}")).await
    }

    /// The session with its state as a snapshot carries it, and that state's cursor.
    pub async fn session(&self, id: &SessionId) -> Result<SessionDetail, Error> {
        self.get(&format!("/api/sessions/{id}")).await
    }

    /// Deletes a session with its messages and runs (aborting an active run).
    pub async fn delete_session(&self, id: &SessionId) -> Result<(), Error> {
        self.call_empty(self.request(reqwest::Method::DELETE, &format!("/api/sessions/{id}"))).await
    }

    /// A page of committed history, oldest first: up to `limit` messages below `before`.
    pub async fn messages(
        &self,
        id: &SessionId,
        before: Option<u64>,
        limit: Option<u32>,
    ) -> Result<MessagePage, Error> {
        let mut query = Vec::new();
        if let Some(before) = before {
            query.push(format!("before={before}"));
        }
        if let Some(limit) = limit {
            query.push(format!("limit={limit}"));
        }
        self.get(&format!("/api/sessions/{id}/messages?{}", query.join("&"))).await
    }

    /// Sends a prompt: the run it started (the same run again for a `requestId` seen
    /// before), or its place in the queue with `queue: true` while a run is going.
    pub async fn prompt(&self, id: &SessionId, prompt: &PromptBody) -> Result<PromptAnswer, Error> {
        self.post(&format!("/api/sessions/{id}/prompt"), prompt).await
    }

    /// Sends `text` as a prompt with a fresh request id and the server's defaults.
    pub async fn say(&self, id: &SessionId, text: &str) -> Result<PromptAnswer, Error> {
        let request_id = format!("cli-{}", spool_protocol::RunId::new().as_str().trim_start_matches("run_"));
        self.prompt(id, &PromptBody { text: text.to_owned(), request_id: Some(request_id), ..PromptBody::default() })
            .await
    }

    /// Says `text` to the session's running run: it reads it at its next step (after
    /// the current model call or tool batch). With no run going it is an ordinary
    /// prompt, queued (`runId` null).
    pub async fn steer(&self, id: &SessionId, text: &str, request_id: &str) -> Result<Steered, Error> {
        self.post(&format!("/api/sessions/{id}/steer"), &serde_json::json!({"text": text, "requestId": request_id}))
            .await
    }

    /// Stops the session's active run; answers once it is settled as `cancelled`
    /// (`aborted: false` when nothing was running).
    pub async fn stop(&self, id: &SessionId) -> Result<Aborted, Error> {
        self.call(self.request(reqwest::Method::POST, &format!("/api/sessions/{id}/abort"))).await
    }

    /// Decides a pending approval. A repeated `idempotency_key` gets the first answer.
    pub async fn decide(
        &self,
        session: &SessionId,
        approval: &ApprovalId,
        body: &DecideBody,
    ) -> Result<Decided, Error> {
        self.post(&format!("/api/sessions/{session}/approvals/{approval}"), body).await
    }

    /// Runs the call this once.
    pub async fn approve_once(&self, session: &SessionId, approval: &ApprovalId) -> Result<Decided, Error> {
        self.decide(session, approval, &decision(Decision::Once, None)).await
    }

    /// Runs the call and allows calls like it on this session from now on: for a
    /// command, this exact command; for another tool, the tool.
    pub async fn approve_always(&self, session: &SessionId, approval: &ApprovalId) -> Result<Decided, Error> {
        self.decide(session, approval, &decision(Decision::Always, None)).await
    }

    /// Runs the command and allows, from now on, the commands one of the approval's
    /// offered options covers (`payload.alwaysOptions`): `patterns` are that option's.
    pub async fn approve_always_with(
        &self,
        session: &SessionId,
        approval: &ApprovalId,
        patterns: Vec<String>,
    ) -> Result<Decided, Error> {
        let body = DecideBody { patterns: Some(patterns), ..decision(Decision::Always, None) };
        self.decide(session, approval, &body).await
    }

    /// Does not run the call. With a message the model is told why and the run goes
    /// on; without one the run is cancelled.
    pub async fn reject(
        &self,
        session: &SessionId,
        approval: &ApprovalId,
        message: Option<&str>,
    ) -> Result<Decided, Error> {
        self.decide(session, approval, &decision(Decision::Reject, message)).await
    }
}

fn decision(decision: Decision, message: Option<&str>) -> DecideBody {
    DecideBody { decision, message: message.map(str::to_owned), idempotency_key: None, pattern: None, patterns: None }
}

/// The error a non-2xx answer stands for.
pub(crate) fn api_error(status: reqwest::StatusCode, bytes: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => Error::Api { status, code: body.error.code.into_owned(), message: body.error.message.into_owned() },
        Err(_) => Error::Unexpected { status, detail: String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into() },
    }
}

/// The whole body, refused past [`MAX_ANSWER_BYTES`].
pub(crate) async fn read_limited(response: reqwest::Response) -> Result<Vec<u8>, Error> {
    let status = response.status();
    let too_big = || Error::Unexpected { status, detail: format!("the answer is over {MAX_ANSWER_BYTES} bytes") };
    if response.content_length().is_some_and(|n| n > MAX_ANSWER_BYTES as u64) {
        return Err(too_big());
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_big());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
