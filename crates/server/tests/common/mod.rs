//! Shared helpers for tests that drive a real Spool server on a real port.
//!
//! [`TestServer::start`] (or [`TestServer::start_with`]) builds the real parts — a
//! SQLite file store in a temp directory, the scripted model, the read-only tools, the
//! engine — binds `127.0.0.1:0` and serves with `spool_server::serve_state`, exactly
//! like the binary. Requests go through `reqwest`; session streams are read with
//! [`SseStream`], the test toolkit's one SSE reader (`spool_test_support::sse`).
//!
//! Every wait is bounded: a helper that does not get what it waits for panics with
//! what it saw instead of hanging the test run.

// Each test file uses its own subset of these helpers.
#![allow(dead_code)]

use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{Engine, EngineConfig, Model, ModelError, ModelRequest, ModelStream, Models};
use spool_model::ScriptedModel;
use spool_server::{AppState, ServerConfig};
use spool_store::SqliteStore;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[allow(unused_imports)] // Each test file uses its own part.
pub use spool_test_support::sse::{ReceivedFrame, SseStream};

/// Longest any helper waits for something it expects.
pub const WAIT: Duration = Duration::from_secs(15);

/// How a [`TestServer`] is built.
#[derive(Clone, Debug)]
pub struct TestOptions {
    /// SSE heartbeat interval (the server default is 15 s).
    pub heartbeat: Duration,
    /// Pause between the scripted model's deltas.
    pub model_delay: Duration,
    pub engine: EngineConfig,
    pub max_body_bytes: usize,
    /// Models to serve instead of the scripted model alone.
    pub models: Option<ModelsOverride>,
    /// Tools to offer instead of the workspace tools.
    pub tools: Option<ToolsOverride>,
    /// Host names served besides loopback while auth is off (`--allowed-host`).
    pub allowed_hosts: Vec<String>,
    /// How long a connection may be silent before its request headers (and idle).
    pub header_timeout: Duration,
    /// Most open connections (`--max-connections`).
    pub max_connections: usize,
    /// Whether the test's temp directory (holding `data/` and the project directories)
    /// is a project root for every user, added to `engine.workspace_roots`: with
    /// tokens, projects can only be registered under a root.
    pub temp_dir_is_root: bool,
    /// Serve HTTPS with this certificate; the test client trusts it.
    pub tls: Option<TestCert>,
    /// `[push]` (Web Push): tests with a local push service allow insecure endpoints.
    pub push: spool_reach::push::PushConfig,
    /// The outbox's webhooks and retry schedule (`[[webhook]]`, `[webhooks]`).
    pub outbox: spool_server::OutboxConfig,
}

/// A self-signed certificate for `localhost` and `127.0.0.1`, loaded the way the
/// binary loads `--tls-cert`/`--tls-key` (from PEM files).
#[derive(Clone, Debug)]
pub struct TestCert {
    pub config: spool_server::TlsConfig,
    /// The certificate, PEM, for a client to trust.
    pub pem: String,
}

impl TestCert {
    pub fn new() -> TestCert {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .expect("make a certificate");
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, made.cert.pem()).expect("write the certificate");
        std::fs::write(&key, made.signing_key.serialize_pem()).expect("write the key");
        let config = spool_server::TlsConfig::from_pem_files(&cert, &key).expect("a usable certificate");
        TestCert { config, pem: made.cert.pem() }
    }
}

/// A [`Models`] registry for [`TestOptions`] (which must be `Debug`).
#[derive(Clone)]
pub struct ModelsOverride(pub Models);

impl std::fmt::Debug for ModelsOverride {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModelsOverride")
    }
}

/// A [`spool_engine::ToolRegistry`] for [`TestOptions`] (which must be `Debug`).
#[derive(Clone)]
pub struct ToolsOverride(pub spool_engine::ToolRegistry);

impl std::fmt::Debug for ToolsOverride {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolsOverride")
    }
}

impl Default for TestOptions {
    fn default() -> Self {
        let server = ServerConfig::default();
        Self {
            heartbeat: server.heartbeat,
            model_delay: Duration::ZERO,
            engine: EngineConfig::default(),
            max_body_bytes: server.max_body_bytes,
            models: None,
            tools: None,
            allowed_hosts: server.allowed_hosts,
            header_timeout: server.header_timeout,
            max_connections: server.max_connections,
            temp_dir_is_root: true,
            tls: None,
            push: server.push,
            outbox: server.outbox,
        }
    }
}

/// A running server plus the directory it works in:
///
/// ```text
/// <dir>/data/spool.db     the store (kept across `restart`)
/// <dir>/project/          a project directory with README.md and src/main.rs
/// ```
pub struct TestServer {
    /// `http://127.0.0.1:PORT` (`https://` with `TestOptions::tls`), no trailing slash.
    pub base: String,
    pub addr: SocketAddr,
    pub engine: Engine,
    /// The same store the engine uses, for asserting on rows.
    pub store: Arc<SqliteStore>,
    pub client: reqwest::Client,
    pub options: TestOptions,
    dir: TempDir,
    /// The id of `project_dir()` once `default_project` registered it.
    default_project: tokio::sync::OnceCell<String>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(TestOptions::default()).await
    }

    pub async fn start_with(options: TestOptions) -> TestServer {
        let dir = tempfile::tempdir().expect("create temp dir");
        let project = dir.path().join("project");
        std::fs::create_dir_all(project.join("src")).expect("create project dir");
        std::fs::write(project.join("README.md"), "# Test project\n\nUsed by the server tests.\n").expect("write file");
        std::fs::write(project.join("src/main.rs"), "fn main() {\n    println!(\"hi\");\n}\n").expect("write file");
        Self::launch(dir, options).await
    }

    async fn launch(dir: TempDir, options: TestOptions) -> TestServer {
        let store = Arc::new(SqliteStore::open(&dir.path().join("data/spool.db")).await.expect("open store"));
        let model = Arc::new(ScriptedModel::new(options.model_delay));
        let models = options.models.clone().map_or_else(|| Models::new(model), |m| m.0);
        // Like the binary: the data directory is never a project or a tool path.
        let mut engine_config = options.engine.clone();
        engine_config.data_dir = Some(dir.path().join("data"));
        if options.temp_dir_is_root {
            engine_config.workspace_roots.global.push(dir.path().to_path_buf());
        }
        let tools = options.tools.clone().map_or_else(spool_tools::workspace_tools, |t| t.0);
        let engine = Engine::start(store.clone(), models, tools, engine_config).await.expect("start engine");
        let config = ServerConfig {
            heartbeat: options.heartbeat,
            max_body_bytes: options.max_body_bytes,
            allowed_hosts: options.allowed_hosts.clone(),
            header_timeout: options.header_timeout,
            max_connections: options.max_connections,
            tls: options.tls.as_ref().map(|t| t.config.clone()),
            push: options.push.clone(),
            outbox: options.outbox.clone(),
            ..ServerConfig::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("bound address");
        let shutdown = CancellationToken::new();
        let state = AppState::new(engine.clone(), config);
        let task = tokio::spawn(spool_server::serve_state(listener, state, shutdown.clone()));
        let mut client = reqwest::Client::builder().no_proxy();
        if let Some(tls) = &options.tls {
            let cert = reqwest::Certificate::from_pem(tls.pem.as_bytes()).expect("a PEM certificate");
            client = client.add_root_certificate(cert).https_only(true);
        }
        let client = client.build().expect("build client");
        let scheme = if options.tls.is_some() { "https" } else { "http" };
        TestServer {
            base: format!("{scheme}://{addr}"),
            addr,
            engine,
            store,
            client,
            options,
            dir,
            default_project: tokio::sync::OnceCell::new(),
            shutdown,
            task: Some(task),
        }
    }

    /// Graceful shutdown; returns once the server stopped serving.
    pub async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            let result = tokio::time::timeout(WAIT, task).await.expect("server stops in time").expect("server task");
            result.expect("serve returns Ok");
        }
    }

    /// Stops this server and starts a new one (new engine, new port) on the same data
    /// directory and project directory, as a process restart would.
    pub async fn restart(mut self) -> TestServer {
        self.stop().await;
        self.store.close().await;
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("create temp dir"));
        let mut next = Self::launch(dir, self.options.clone()).await;
        if let Some(id) = self.default_project.get() {
            next.default_project = tokio::sync::OnceCell::new_with(Some(id.clone()));
        }
        next
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// The temp directory holding `data/` and `project/`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A directory with a couple of files, not registered until `default_project`.
    pub fn project_dir(&self) -> PathBuf {
        self.dir.path().join("project")
    }

    /// Creates (once) and returns a fresh empty directory `<dir>/<name>`.
    pub fn new_dir(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).expect("create dir");
        path
    }

    // ---- plain HTTP -------------------------------------------------------------------

    /// Sends a request and returns its status and JSON body (`Null` when empty).
    pub async fn send(&self, request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let res = request.send().await.expect("request reaches the server");
        let status = res.status();
        let bytes = res.bytes().await.expect("read body");
        if bytes.is_empty() {
            return (status, Value::Null);
        }
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{status}: body is not JSON ({e}): {:?}", String::from_utf8_lossy(&bytes)));
        (status, body)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.client.get(self.url(path))).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.client.post(self.url(path)).json(&body)).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(self.client.patch(self.url(path)).json(&body)).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.send(self.client.delete(self.url(path))).await
    }

    // ---- domain -----------------------------------------------------------------------

    /// Registers `path` as a project and returns it; panics unless 201.
    pub async fn create_project(&self, path: &Path) -> Value {
        let (status, body) = self.post("/api/projects", json!({ "path": path })).await;
        assert_eq!(status, StatusCode::CREATED, "create project: {body}");
        body
    }

    /// The id of `project_dir()` as a project, registering it on first use.
    pub async fn default_project(&self) -> String {
        self.default_project
            .get_or_init(|| async { id_of(&self.create_project(&self.project_dir()).await) })
            .await
            .clone()
    }

    /// Creates a session in `project_id` and returns it; panics unless 201.
    pub async fn create_session(&self, project_id: &str, title: Option<&str>) -> Value {
        let (status, body) = self.post("/api/sessions", json!({ "projectId": project_id, "title": title })).await;
        assert_eq!(status, StatusCode::CREATED, "create session: {body}");
        body
    }

    /// A new untitled session in the default project; returns its id.
    pub async fn new_session(&self) -> String {
        let project = self.default_project().await;
        id_of(&self.create_session(&project, None).await)
    }

    /// `POST /api/sessions/:id/prompt`.
    pub async fn prompt(&self, session: &str, text: &str, request_id: Option<&str>) -> (StatusCode, Value) {
        let mut body = json!({ "text": text });
        if let Some(r) = request_id {
            body["requestId"] = json!(r);
        }
        self.post(&format!("/api/sessions/{session}/prompt"), body).await
    }

    /// Sends a prompt, asserts 202, returns the run id.
    pub async fn start_run(&self, session: &str, text: &str) -> String {
        let (status, body) = self.prompt(session, text, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "prompt: {body}");
        body["runId"].as_str().expect("runId").to_owned()
    }

    /// Starts a run for `prompt` whose tool call needs approval and waits until it is
    /// parked there, its one pending approval in the session's state; returns the run's
    /// id and that approval.
    pub async fn park(&self, session: &str, prompt: &str) -> (String, Value) {
        let run_id = self.start_run(session, prompt).await;
        let run = self.wait_run_until(&run_id, |r| r["status"] != "running").await;
        assert_eq!(run["status"], "interrupted", "{run}");
        // The run is stored as parked a moment before the session's state shows its
        // approval (store first, then the frame): wait for the state too.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (_, detail) = self.get(&format!("/api/sessions/{session}")).await;
            let pending = detail["state"]["pendingApprovals"].as_array().expect("pendingApprovals").clone();
            if !pending.is_empty() {
                assert_eq!(pending.len(), 1, "{detail}");
                return (run_id, pending[0].clone());
            }
            assert!(tokio::time::Instant::now() < deadline, "the parked run's approval never showed: {detail}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls `GET /api/runs/:id` until `done(run)` holds; returns that run.
    pub async fn wait_run_until(&self, run_id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (status, run) = self.get(&format!("/api/runs/{run_id}")).await;
            assert_eq!(status, StatusCode::OK, "get run: {run}");
            if done(&run) {
                return run;
            }
            assert!(tokio::time::Instant::now() < deadline, "run {run_id} did not get there in {WAIT:?}: {run}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the run is settled (completed, failed or cancelled) and returns it.
    pub async fn wait_run(&self, run_id: &str) -> Value {
        self.wait_run_until(run_id, |run| matches!(run["status"].as_str(), Some("completed" | "failed" | "cancelled")))
            .await
    }

    /// Sends a prompt and waits for its run to settle; returns the run.
    pub async fn run_prompt(&self, session: &str, text: &str) -> Value {
        let run_id = self.start_run(session, text).await;
        self.wait_run(&run_id).await
    }

    /// `GET /api/sessions/:id/messages{query}`; panics unless 200.
    pub async fn messages(&self, session: &str, query: &str) -> Value {
        let (status, page) = self.get(&format!("/api/sessions/{session}/messages{query}")).await;
        assert_eq!(status, StatusCode::OK, "messages: {page}");
        page
    }

    /// The session's tool results, in order: (tool, text, is_error).
    pub async fn tool_results(&self, session: &str) -> Vec<(String, String, bool)> {
        let page = self.messages(session, "").await;
        page["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .filter(|m| m["role"] == "toolResult")
            .map(|m| {
                let text = m["content"][0]["text"].as_str().expect("text").to_owned();
                (m["toolName"].as_str().expect("toolName").to_owned(), text, m["isError"] == true)
            })
            .collect()
    }

    // ---- streams ----------------------------------------------------------------------

    /// Sends `GET /api/sessions/:id/events` and returns the response unread (headers
    /// arrived, body not consumed), e.g. to play a client that stops reading.
    pub async fn events_response(&self, session: &str, open: &Open) -> reqwest::Response {
        let mut url = self.url(&format!("/api/sessions/{session}/events"));
        let mut query = Vec::new();
        if let Some(cursor) = &open.cursor {
            query.push(format!("cursor={}", urlencode(cursor)));
        }
        if open.approvals {
            query.push("approvals=1".to_owned());
        }
        if !query.is_empty() {
            url = format!("{url}?{}", query.join("&"));
        }
        let mut request = self.client.get(url).header("accept", "text/event-stream");
        if let Some(id) = &open.last_event_id {
            request = request.header("last-event-id", id);
        }
        tokio::time::timeout(WAIT, request.send()).await.expect("stream response in time").expect("stream request")
    }

    /// Opens a session stream; panics unless 200.
    pub async fn events(&self, session: &str, open: Open) -> SseStream {
        let res = self.events_response(session, &open).await;
        assert_eq!(res.status(), StatusCode::OK, "open events");
        SseStream::new(res)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// How to open a session stream: optional `Last-Event-ID` header, `?cursor=` and
/// `?approvals=1`.
#[derive(Clone, Debug, Default)]
pub struct Open {
    pub last_event_id: Option<String>,
    pub cursor: Option<String>,
    pub approvals: bool,
}

impl Open {
    pub fn fresh() -> Self {
        Self::default()
    }

    pub fn last_event_id(id: impl Into<String>) -> Self {
        Self { last_event_id: Some(id.into()), ..Self::default() }
    }

    pub fn cursor(cursor: impl Into<String>) -> Self {
        Self { cursor: Some(cursor.into()), ..Self::default() }
    }
}

/// The `id` field of a JSON record.
pub fn id_of(record: &Value) -> String {
    record["id"].as_str().unwrap_or_else(|| panic!("record without id: {record}")).to_owned()
}

/// Percent-encodes a query value (cursors contain `:`).
pub fn urlencode(raw: &str) -> String {
    raw.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

// ---- git repositories for the git poller ---------------------------------------------

/// Test options with the git poller on, reading every `every` with libgit2 (the
/// binary's default is 5 s; a short tick keeps the tests quick, and they wait on
/// events, never on a tick).
pub fn git_polling(every: Duration) -> TestOptions {
    let mut options = TestOptions::default();
    let probe = Arc::new(spool_tools::GitReader);
    options.engine.git = Some(spool_engine::GitPolling { every, probe });
    options
}

/// Makes `dir` a git repository on branch `main` with `files` committed.
pub fn git_repo(dir: &Path, files: &[(&str, &str)]) -> git2::Repository {
    let mut init = git2::RepositoryInitOptions::new();
    init.initial_head("main");
    let repo = git2::Repository::init_opts(dir, &init).expect("git init");
    for (path, text) in files {
        std::fs::write(dir.join(path), text).expect("write");
    }
    git_commit_all(&repo, "first");
    repo
}

/// Commits every file of the work tree; returns the new commit's id abbreviated as
/// `git` shows it.
pub fn git_commit_all(repo: &git2::Repository, message: &str) -> String {
    let mut index = repo.index().expect("index");
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).expect("git add");
    index.write().expect("write index");
    let tree = repo.find_tree(index.write_tree().expect("tree")).expect("find tree");
    let who = git2::Signature::now("Test", "test@example.com").expect("signature");
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<&git2::Commit> = parent.iter().collect();
    let id = repo.commit(Some("HEAD"), &who, &who, message, &tree, &parents).expect("commit");
    let commit = repo.find_commit(id).expect("find commit");
    commit.as_object().short_id().expect("short id").as_str().expect("ASCII").to_owned()
}

impl TestServer {
    /// Waits until the git poller has read the session's project (its first reading,
    /// which is never announced) and returns that reading (`git` of the session).
    pub async fn wait_git_primed(&self, session: &str) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (status, detail) = self.get(&format!("/api/sessions/{session}")).await;
            assert_eq!(status, StatusCode::OK, "{detail}");
            if !detail["git"].is_null() {
                return detail["git"].clone();
            }
            assert!(tokio::time::Instant::now() < deadline, "the git poller never read {session}: {detail}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

// ---- a real provider client against the shared fake ---------------------------------

/// A server whose default model is an OpenAI-compatible client of `fake`
/// (`spool_test_support::Fake`), with retries that wait milliseconds.
pub async fn provider_server(fake: &spool_test_support::Fake, key: &str) -> TestServer {
    let mut config = spool_model::OpenAiConfig::new(format!("{}/v1", fake.base_url), Some(key.to_owned()), "fake-gpt");
    config.retry = spool_model::RetryPolicy {
        max_retries: 2,
        initial_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_retry_after: Duration::from_millis(20),
    };
    let model = Arc::new(spool_model::OpenAiModel::new(config).expect("model"));
    let models = Models::new(Arc::new(ScriptedModel::default())).with(model, None, true);
    TestServer::start_with(TestOptions { models: Some(ModelsOverride(models)), ..TestOptions::default() }).await
}

/// A small seeded generator (xorshift64*) for the random-drop tests, so a failing drop
/// pattern can be replayed: `SPOOL_TEST_SEED` overrides the test's own seed, which
/// failure messages should print.
#[allow(dead_code)]
pub struct Rng {
    pub seed: u64,
    state: u64,
}

#[allow(dead_code)]
impl Rng {
    pub fn seeded(default: u64) -> Rng {
        let seed = std::env::var("SPOOL_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
        Rng { seed, state: seed | 1 }
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// For a test about what the server does with its process environment (secrets it
/// redacts, variables commands must not see): runs the calling test again, alone, in a
/// process of its own whose environment has `vars` from the start (see
/// [`spool_test_support::own_process`]). Returns `true` in that process, where the test
/// goes on with its body, and `false` in the calling one once the child passed.
///
/// `module` is the calling test's `module_path!()` and `test` its function's name: the
/// tests are modules of one binary (`tests/main.rs`), so the test's full name is the
/// module path past the crate's name, then `test`.
pub fn in_own_process(module: &str, test: &str, vars: &[(&str, &str)]) -> bool {
    let test = match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{test}"),
        None => test.to_owned(),
    };
    spool_test_support::in_own_process(&test, vars)
}

/// A page of `GET /api/sessions/:id/messages` as (index, role, its text blocks joined) rows.
pub fn message_rows(page: &Value) -> Vec<(u64, String, String)> {
    page["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let text: Vec<&str> =
                m["content"].as_array().into_iter().flatten().filter_map(|c| c["text"].as_str()).collect();
            (m["index"].as_u64().expect("index"), m["role"].as_str().expect("role").to_owned(), text.join(""))
        })
        .collect()
}

/// Every file under `dir` and its bytes (what a snapshot or a revert must get right).
pub fn files_on_disk(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("read dir") {
            let path = entry.expect("entry").path();
            let name = path.strip_prefix(dir).expect("beneath").to_string_lossy().into_owned();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(name, std::fs::read(&path).expect("read"));
            }
        }
    }
    files
}

/// A new session whose calls of these tools run without asking.
pub async fn session_allowing(server: &TestServer, tools: &[&str]) -> String {
    let session = server.new_session().await;
    let rules: Vec<_> = tools.iter().map(|t| json!({"tool": t, "action": "allow"})).collect();
    let (status, body) = server.patch(&format!("/api/sessions/{session}"), json!({"permissions": rules})).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    session
}

/// The chat requests a [`Recording`] model was sent.
pub type Seen = Arc<std::sync::Mutex<Vec<ModelRequest>>>;

/// The scripted model, keeping every chat request it was sent (title and summary calls,
/// which offer no tools, are not kept).
pub struct Recording {
    pub seen: Seen,
}

#[async_trait::async_trait]
impl Model for Recording {
    fn name(&self) -> String {
        "recording".into()
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        if !request.tools.is_empty() {
            self.seen.lock().expect("lock").push(request.clone());
        }
        ScriptedModel::default().stream(request).await
    }
}

/// A server whose one model is a [`Recording`], and what it was sent.
pub async fn recording_server(engine: EngineConfig) -> (TestServer, Seen) {
    let seen = Seen::default();
    let model = Arc::new(Recording { seen: seen.clone() });
    let options = TestOptions { models: Some(ModelsOverride(Models::new(model))), engine, ..TestOptions::default() };
    (TestServer::start_with(options).await, seen)
}

/// Stores `decision` for the parked `approval` straight in the store, as a process that
/// stopped right after deciding leaves it: the run has not gone on yet.
pub async fn settle_in_store(server: &TestServer, approval: &Value, decision: spool_protocol::Decision) {
    use spool_engine::store::Approvals;
    let approval_id: spool_protocol::ApprovalId = id_of(approval).parse().expect("approval id");
    let won = server
        .store
        .settle_approval(&approval_id, spool_protocol::ApprovalStatus::Resolved, Some(&decision), None, None, 1)
        .await
        .expect("settle");
    assert!(won, "the approval was still pending");
}
