//! The `spool` binary. `spool serve` wires the parts together: the store (SQLite in
//! the data directory, or PostgreSQL with `--database-url`; see [`database`]), the
//! other nodes (Redis with `--redis-url`; see [`cluster`]), the models, the tools, the
//! engine, and the HTTP server, until SIGINT or SIGTERM.
//!
//! A non-loopback address is served only with auth on (`spool token create`); such a
//! server then requires a token even if auth is turned off under it, and
//! `spool auth disable` is refused while it runs.

use anyhow::{Context, bail};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use spool_engine::{ApprovalPolicy, Engine, EngineConfig, GitPolling, Models};
use spool_model::ScriptedModel;
use spool_server::{AppState, ServerConfig};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

mod chat;
mod cluster;
mod config;
mod limits;
mod database;
mod hub;
mod lock;
mod mcp_server;
mod otlp;
mod retention;
mod sandbox;
mod secrets;
mod webhooks;

use database::StoreArgs;

/// The git poller's interval when neither `--git-poll-secs` nor the config sets one
/// (seed 002's BranchPoller ticks every 5 s).
const DEFAULT_GIT_POLL_SECS: u64 = 5;

#[derive(Parser)]
#[command(name = "spool", version, about = "Hosts AI-agent sessions and streams them over SSE.")]
struct Cli {
    /// How log lines (on stderr) are written: `text` for people, `json` for log
    /// shippers (one object per line: timestamp, level, target, message, fields, and the
    /// spans it happened in, such as the HTTP request's id and the run's id).
    #[arg(long, global = true, env = "SPOOL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Export traces (a span per request, per run, per model and tool call) over OTLP
    /// to this collector, e.g. `http://127.0.0.1:4318` (`/v1/traces` is appended).
    /// Off when unset.
    #[arg(long, global = true, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    otlp_endpoint: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

// Parsed once at start-up: the size of the largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Serve the API and the session streams.
    Serve(ServeArgs),
    /// Manage API tokens (the first one turns auth on).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Show or turn off auth (it stays on once a token was created, even with every
    /// token revoked).
    #[command(subcommand)]
    Auth(AuthCommand),
    /// Chat with a session in the terminal: streamed answers, tool cards, approvals
    /// answered at the prompt (`--json`: one event per line, for scripts).
    Chat(chat::ChatArgs),
    /// Offer a running server to another agent as an MCP server over stdio: tools to
    /// prompt a session and wait for its answer, and to list its pending approvals.
    Mcp(mcp_server::McpArgs),
    /// Publish seed 002 hub events to a running server.
    #[command(subcommand)]
    Hub(HubCommand),
    /// The outbox's webhook and push deliveries: list, dead letters, replay, enable.
    #[command(subcommand)]
    Webhook(webhooks::WebhookCommand),
}

impl Command {
    /// The store flags of a command that opens the store.
    fn store_mut(&mut self) -> Option<&mut StoreArgs> {
        match self {
            Command::Serve(args) => Some(&mut args.store),
            Command::Token(
                TokenCommand::Create { store, .. } | TokenCommand::List { store } | TokenCommand::Revoke { store, .. },
            )
            | Command::Auth(AuthCommand::Status { store } | AuthCommand::Disable { store }) => Some(store),
            Command::Webhook(cmd) => Some(cmd.store_mut()),
            Command::Chat(_) | Command::Mcp(_) | Command::Hub(_) => None,
        }
    }
}

#[derive(Subcommand)]
enum HubCommand {
    /// Publish one event (`POST /api/hub/events`); prints its cursor.
    Publish(hub::PublishArgs),
}

#[derive(Subcommand)]
enum AuthCommand {
    /// Whether auth is on, how many tokens are active, and where servers listen.
    Status {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Turn auth off: every request then acts as the local user. Refused while a server
    /// serves on a non-loopback address.
    Disable {
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token for a user (created on first use), or a publisher token that can
    /// only publish hub events, and print it once.
    Create {
        #[arg(long, value_name = "NAME", required_unless_present = "publisher", conflicts_with = "publisher")]
        user: Option<String>,
        /// A publisher token: it can publish hub events and read nothing.
        #[arg(long, value_name = "NAME")]
        publisher: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List tokens (ids, users, dates; never the secrets).
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke a token by id.
    Revoke {
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on (loopback only until auth exists). Port 0 picks a free port.
    #[arg(long, env = "SPOOL_ADDR", default_value = "127.0.0.1:4747", value_name = "HOST:PORT")]
    addr: String,
    #[command(flatten)]
    store: StoreArgs,
    /// Seconds between heartbeats on event streams.
    #[arg(long, env = "SPOOL_HEARTBEAT_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..))]
    heartbeat_secs: u64,
    /// Pause of the scripted model between streamed deltas, in milliseconds. Not 0 by
    /// default, so a newcomer trying Spool without a model sees an answer stream in;
    /// tests that want full speed say 0.
    #[arg(long, env = "SPOOL_SCRIPTED_DELAY_MS", default_value_t = 20)]
    scripted_delay_ms: u64,
    /// The default model, PROVIDER:MODEL (openai, anthropic, ollama, openai-compatible,
    /// scripted). Base URLs and keys come from the environment or the config's [env].
    #[arg(long, env = "SPOOL_MODEL", value_name = "PROVIDER:MODEL")]
    model: Option<String>,
    /// Config file with permission rules (default: DATA_DIR/config.toml if it exists).
    #[arg(long, env = "SPOOL_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// What an approval does with no interactive view connected: wait or deny.
    #[arg(long, env = "SPOOL_APPROVAL_POLICY", value_parser = ["wait", "deny"])]
    approval_policy: Option<String>,
    /// Seconds an approval waits for a decision before it expires (default 86400; 0:
    /// never). A rule's own `timeout` wins.
    #[arg(long, env = "SPOOL_APPROVAL_TTL_SECS")]
    approval_ttl_secs: Option<u64>,
    /// Seconds a call of a client-side tool waits for the client's result before it
    /// expires and cancels its run (default 3600).
    #[arg(long, env = "SPOOL_CLIENT_TOOL_TTL_SECS", value_parser = clap::value_parser!(u64).range(1..))]
    client_tool_ttl_secs: Option<u64>,
    /// Seconds between the git poller's readings of each loaded session's project
    /// (branch, commit, diff against HEAD: the hub's `channel.updated`, OpenCode's
    /// `session.diff`); 0 turns it off (default 5, or the config's `git_poll_secs`).
    #[arg(long, env = "SPOOL_GIT_POLL_SECS", value_parser = clap::value_parser!(u64).range(0..=86_400))]
    git_poll_secs: Option<u64>,
    /// This node's name in session leases, for several nodes on one --database-url
    /// (default: the host name and a random suffix; with SQLite, "local").
    #[arg(long, env = "SPOOL_NODE_ID", value_name = "NAME")]
    node_id: Option<String>,
    /// Seconds a session lease lasts unrenewed: a node that dies mid-run has its runs
    /// marked failed (node_lost) by another node about this long after.
    #[arg(long, env = "SPOOL_LEASE_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    lease_secs: u64,
    /// Join the other nodes on the same --database-url through Redis, a redis:// URL
    /// (redis://[:PASSWORD@]HOST:PORT[/DB]): a client follows any session on any node
    /// and resumes on any other with its cursor, an abort sent to any node reaches the
    /// node running the session, and session-list notifications reach the pages
    /// connected to every node. Needs --database-url. Without it each node streams,
    /// aborts and notifies only what it does itself.
    /// A URL with a password is refused on the command line (every process can read
    /// argv): set the variable, or use --redis-url-file.
    #[arg(long, env = "SPOOL_REDIS_URL", value_name = "URL")]
    redis_url: Option<String>,
    /// Read the --redis-url from this file (read once at start, surrounding whitespace
    /// trimmed): for URLs with a password, kept out of argv.
    #[arg(long, env = "SPOOL_REDIS_URL_FILE", value_name = "FILE", conflicts_with = "redis_url")]
    redis_url_file: Option<PathBuf>,
    /// The key every node of the deployment seals what it writes to Redis with (at
    /// least 32 bytes; the file is read once, whitespace trimmed). Also taken from the
    /// variable SPOOL_CLUSTER_KEY. Without either, the first node stores a random key
    /// in the shared PostgreSQL database and every node of that database uses it.
    #[arg(long, env = "SPOOL_CLUSTER_KEY_FILE", value_name = "FILE")]
    cluster_key_file: Option<PathBuf>,
    /// Most session streams one user may hold open on this node at once (one browser
    /// tab holds one per open session); past it a new stream is refused with 429.
    #[arg(long, env = "SPOOL_MAX_STREAMS_PER_USER", default_value_t = 256, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_streams_per_user: u64,
    /// Most bytes of text, reasoning and tool arguments one assistant message may
    /// stream; past it the run fails with `answer_too_large` and the answer so far is
    /// kept.
    #[arg(long, env = "SPOOL_MAX_ANSWER_BYTES", default_value_t = 4 << 20, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1 << 30))]
    max_answer_bytes: u64,
    /// A host name to serve besides localhost while auth is off, such as the name a
    /// reverse proxy forwards with (repeatable; NAME matches any port, NAME:PORT one).
    /// Other names are refused with 403 bad_host, so a web page that rebinds its own
    /// DNS name to this machine cannot use the server.
    #[arg(long = "allowed-host", env = "SPOOL_ALLOWED_HOSTS", value_name = "NAME", value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// Most open connections; past it a new connection gets 503 too_many_connections.
    #[arg(long, env = "SPOOL_MAX_CONNECTIONS", default_value_t = 10_000, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_connections: u64,
    /// How long a connection may take to send a request's headers, and may stay idle
    /// (HTTP/1.1 between requests, HTTP/2 with no request or stream open) before it is
    /// closed; HTTP/2 connections are also PINGed this often.
    #[arg(long, env = "SPOOL_IDLE_TIMEOUT_SECS", default_value_t = 30, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    idle_timeout_secs: u64,
    /// A directory under which projects may be registered (repeatable; the variable
    /// takes a ':'-separated list). With tokens, projects may only be registered under
    /// these and the user's own `[users.NAME] roots`; with auth off, any directory is
    /// allowed until a root is configured.
    #[arg(long = "workspace-root", env = "SPOOL_WORKSPACE_ROOTS", value_name = "DIR", value_delimiter = ':')]
    workspace_roots: Vec<PathBuf>,
    /// Serve the web UI from this directory (read on every request) instead of the copy
    /// built into the binary: for working on `web/app` without rebuilding.
    #[arg(long, env = "SPOOL_UI_DIR", value_name = "DIR")]
    ui_dir: Option<PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (the server's certificate first);
    /// needs --tls-key. Browsers then use HTTP/2, so open tabs share one connection.
    #[arg(long, env = "SPOOL_TLS_CERT", value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, RSA or EC).
    #[arg(long, env = "SPOOL_TLS_KEY", value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Record no metrics and do not serve /metrics (every recording becomes a no-op).
    #[arg(long, env = "SPOOL_NO_METRICS")]
    no_metrics: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Before any HTTPS client is built: the MCP client's reqwest brings no provider.
    spool_mcp::install_crypto_provider();
    let matches = Cli::command().get_matches();
    secrets::refuse_credentials_in_argv(&matches)?;
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(store) = cli.command.store_mut() {
        store.read_url_file()?;
    }
    let traces = cli.otlp_endpoint.as_deref().filter(|e| !e.is_empty()).map(otlp::Traces::start).transpose()?;
    init_logs(cli.log_format, traces.as_ref());
    // After the logs: the default data directory may warn about an earlier one.
    if let Some(store) = cli.command.store_mut() {
        store.resolve_data_dir()?;
    }
    let result = match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Token(cmd) => token(cmd).await,
        Command::Auth(cmd) => auth(cmd).await,
        Command::Hub(HubCommand::Publish(args)) => hub::publish(args).await,
        Command::Webhook(cmd) => webhooks::command(cmd).await,
        Command::Chat(args) => chat::chat(args).await,
        Command::Mcp(args) => mcp_server::serve(args).await,
    };
    if let Some(traces) = traces {
        traces.shutdown().await;
    }
    result
}

/// Logs go to stderr, filtered by `RUST_LOG` (default `info`); stdout is kept for what
/// a command prints (`serve`'s address line, a new token).
/// With `traces`, spans also go to the OTLP exporter, filtered on their own
/// ([`otlp::Traces::filter`]): quieting the logs with `RUST_LOG=warn` keeps the traces.
fn init_logs(format: LogFormat, traces: Option<&otlp::Traces>) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // rmcp logs every MCP connection's whole server info (instructions included) and
    // each notification at info; Spool logs what matters of them itself.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Text => logs.boxed(),
        // The event's fields at the top level beside `message`; `span` is the innermost
        // span's fields and `spans` all of them, outermost first.
        LogFormat::Json => logs.json().flatten_event(true).with_current_span(true).with_span_list(true).boxed(),
    };
    let traces = traces.map(|t| t.layer().with_filter(otlp::Traces::filter()));
    tracing_subscriber::registry().with(logs.with_filter(filter)).with(traces).init();
}

async fn auth(cmd: AuthCommand) -> anyhow::Result<()> {
    let (AuthCommand::Status { store } | AuthCommand::Disable { store }) = &cmd;
    let database = store.open().await?;
    let result = auth_command(&cmd, database.store()).await;
    database.close().await;
    result
}

async fn auth_command(cmd: &AuthCommand, store: &dyn spool_engine::Store) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match cmd {
        AuthCommand::Status { .. } => {
            let enabled = store.auth_enabled().await?;
            let active = store.list_tokens().await?.iter().filter(|t| t.revoked_at.is_none()).count();
            writeln!(out, "auth: {}", if enabled { "on" } else { "off" })?;
            writeln!(out, "active tokens: {active}")?;
            let fresh_after = spool_protocol::time::now_ms() - spool_engine::auth::LISTENER_STALE_MS;
            for l in store.listeners().await?.iter().filter(|l| l.updated_at > fresh_after) {
                let reach = if l.public { "non-loopback" } else { "loopback" };
                writeln!(out, "server {} listening on {} ({reach})", l.node_id, l.addr)?;
            }
            if enabled && active == 0 {
                writeln!(out, "no active token: nobody can sign in; create one with `spool token create`")?;
            }
        }
        AuthCommand::Disable { .. } => {
            spool_engine::auth::disable_auth(store).await?;
            writeln!(out, "auth is off: requests act as the local user without a token")?;
        }
    }
    Ok(())
}

async fn token(cmd: TokenCommand) -> anyhow::Result<()> {
    let (TokenCommand::Create { store, .. } | TokenCommand::List { store } | TokenCommand::Revoke { store, .. }) = &cmd;
    let database = store.open().await?;
    let store = database.store();
    let mut out = std::io::stdout().lock();
    match &cmd {
        TokenCommand::Create { user, publisher, .. } => {
            let (token, secret) = match (user, publisher) {
                (_, Some(name)) => spool_engine::auth::create_publisher_token(store, name).await?,
                (Some(user), None) => spool_engine::auth::create_token(store, user).await?,
                (None, None) => bail!("name a --user or a --publisher"),
            };
            writeln!(out, "{secret}")?;
            eprintln!("created {} for {:?}; this is the only time the token is shown", token.id, token.user_name);
        }
        TokenCommand::List { .. } => {
            for t in store.list_tokens().await? {
                let state = if t.revoked_at.is_some() { "revoked" } else { "active" };
                writeln!(out, "{}\t{}\t{}\t{}", t.id, t.user_name, t.created_at, state)?;
            }
        }
        TokenCommand::Revoke { id, .. } => {
            let id = id.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            spool_engine::auth::revoke_token(store, &id).await?;
            writeln!(out, "revoked {id}")?;
        }
    }
    drop(out);
    database.close().await;
    Ok(())
}

async fn serve(mut args: ServeArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.redis_url_file {
        args.redis_url = Some(secrets::read_secret_file(path, "--redis-url-file")?);
    }
    let addr = resolve_addr(&args.addr).await?;
    // One server per SQLite data directory, locked before the store is opened (the
    // public-bind check below may open it). A data directory that does not exist yet
    // holds no store to protect, and a refused start must not create it.
    let sqlite = args.store.uses_sqlite()?;
    let data_dir = args.store.data_dir();
    let mut data_lock = match sqlite && data_dir.is_dir() {
        true => Some(lock::DataDirLock::acquire(data_dir)?),
        false => None,
    };
    if !addr.ip().is_loopback() && !args.store.auth_enabled().await? {
        bail!(
            "refusing to listen on {addr} (from --addr {:?}): auth is required for non-loopback addresses \
             and is not configured. Create a token first with `spool token create --user NAME {}`, \
             or use a loopback address such as 127.0.0.1:4747.",
            args.addr,
            args.store.flag_hint()
        );
    }

    // Checked before the store is opened (and perhaps migrated): a typo costs nothing.
    let redis_url = cluster::redis_url(args.redis_url.as_deref())?;
    let tls = tls_config(&args)?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    if sqlite && data_lock.is_none() {
        args.store.create_data_dir()?;
        data_lock = Some(lock::DataDirLock::acquire(data_dir)?);
    }
    let database = args.store.open().await?;
    let store = database.shared();
    let mut file = config::FileConfig::load(args.config.as_deref(), &args.store.data_dir().join("config.toml"))?;
    let models = build_models(&args, &file)?;
    let mcp = spool_mcp::servers(std::mem::take(&mut file.mcp))?;
    // Provider keys from the config's `[env]` are masked in what runs show, as the
    // environment's are.
    spool_engine::secrets::remember(file.env.iter().map(|(name, value)| (name.as_str(), value.as_str())));
    let mut engine_config = EngineConfig::default();
    engine_config.rules.extend(file.permission);
    engine_config.approval_policy = match args.approval_policy.as_deref() {
        Some("deny") => ApprovalPolicy::Deny,
        Some(_) => ApprovalPolicy::Wait,
        None => file.approval_policy.unwrap_or_default(),
    };
    if let Some(secs) = args.approval_ttl_secs.or(file.approval_ttl_secs) {
        engine_config.approval_ttl = Duration::from_secs(secs);
    }
    if let Some(secs) = args.client_tool_ttl_secs.or(file.client_tool_ttl_secs) {
        engine_config.client_tool_ttl = Duration::from_secs(secs);
    }
    if let Some(budget) = file.context_budget_tokens {
        engine_config.context_budget_tokens = budget;
    }
    engine_config.lease_ttl = Duration::from_secs(args.lease_secs);
    engine_config.git = match args.git_poll_secs.or(file.git_poll_secs).unwrap_or(DEFAULT_GIT_POLL_SECS) {
        0 => None,
        secs => Some(GitPolling { every: Duration::from_secs(secs), probe: Arc::new(spool_tools::GitReader) }),
    };
    engine_config.max_streams_per_user = args.max_streams_per_user as usize;
    engine_config.max_answer_bytes = args.max_answer_bytes as usize;
    engine_config.guardrails = file.guardrails.guardrails()?;
    // Checked now, so a typo in a webhook stops the start instead of its deliveries.
    let webhooks = webhooks::endpoints(&file.webhook, file.base_dir.as_deref().unwrap_or(std::path::Path::new(".")))?;
    engine_config.caps = file.limits.caps();
    engine_config.search = file.limits.search();
    engine_config.attachments = file.limits.attachments();
    engine_config.metrics = !args.no_metrics;
    engine_config.workspace_roots.global =
        args.workspace_roots.iter().filter(|r| !r.as_os_str().is_empty()).cloned().collect();
    engine_config.workspace_roots.per_user =
        file.users.iter().map(|(name, user)| (name.clone(), user.roots.clone())).collect();
    engine_config.data_dir = Some(data_dir.to_path_buf());
    // Step snapshots: a shadow repository per project under the data directory, which
    // `bash` cannot read (issue 39). Off, nothing is recorded or pruned.
    let snapshots = file.snapshots.settings()?;
    if snapshots.enabled {
        let shadow = spool_tools::ShadowRepos::new(data_dir.join("snapshots"), snapshots.limits);
        let recorder = spool_engine::snapshots::StepSnapshotting::new(Arc::new(shadow));
        engine_config.snapshots = Some(recorder.keeping(snapshots.retention));
    }
    let frame_log = file.frame_log.settings()?;
    engine_config.frame_log = frame_log.enabled;
    engine_config.presence = Some(spool_engine::PRESENCE_SETTLE);
    engine_config.frame_log_retention = frame_log.retention;
    // Several nodes may share a PostgreSQL database; a SQLite file is one process's.
    engine_config.shared_store = matches!(database, database::Database::Postgres(_));
    engine_config.node_id = match (&args.node_id, engine_config.shared_store) {
        (Some(name), _) => check_node_id(name)?,
        (None, true) => default_node_id(),
        (None, false) => spool_engine::LOCAL_NODE.to_owned(),
    };
    let node_id = engine_config.node_id.clone();
    if redis_url.is_some() && !engine_config.shared_store {
        bail!("--redis-url joins nodes that share a --database-url; with SQLite a server is on its own");
    }
    let mut sandbox_settings = file.sandbox.settings();
    // Commands never reach the store, the bus or this server's own port (with auth off a
    // command could approve itself there), nor read the files that hold secrets.
    let database_url = if sqlite { None } else { args.store.database_url.as_deref() };
    sandbox_settings.services = sandbox::services(database_url, redis_url);
    sandbox_settings.services.extend(sandbox::listener(addr));
    sandbox_settings.secret_paths = secret_files(&args);
    sandbox_settings.secret_paths.extend(mcp_token_files(&mcp));
    let sandbox = spool_tools::probe_sandbox(&sandbox_settings);
    if !sandbox.landlock {
        tracing::warn!(
            "Landlock is not available on this kernel: bash commands run with a scrubbed environment \
             but are not confined to the project directory and can read the data directory"
        );
    } else if !sandbox.fully_enforced {
        tracing::warn!(abi = sandbox.abi, "this kernel's Landlock enforces only part of the bash sandbox");
    }
    let mut tools = spool_tools::workspace_tools_with(sandbox_settings.clone());
    tools = mcp_sources(tools, mcp, &sandbox_settings, data_dir);
    let engine = match redis_url {
        Some(url) => {
            let database::Database::Postgres(pg) = &database else {
                bail!("--redis-url joins nodes that share a --database-url; with SQLite a server is on its own");
            };
            let key = cluster::cluster_key(args.cluster_key_file.as_deref(), pg).await?;
            let (cluster, frames) = cluster::join(url, &node_id, key).await?;
            Engine::start_clustered(store, models, tools, engine_config, Arc::new(cluster), Some(Arc::new(frames)))
                .await
        }
        None => Engine::start(store, models, tools, engine_config).await,
    }
    .context("starting the engine")?;
    give_back_freed_memory(engine.metrics().clone());
    // Uploads never sent past `[limits] upload_ttl_hours`, and what a crash left of
    // attachments (temporary files, blobs no row names): at start, then hourly.
    let sweeper = engine.clone();
    tokio::spawn(async move {
        let mut hourly = tokio::time::interval(std::time::Duration::from_secs(3600));
        loop {
            hourly.tick().await;
            sweeper.attachments().sweep().await;
        }
    });

    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    if let Some(data_lock) = &mut data_lock {
        data_lock.record(Some(&format!("{scheme}://{bound}")))?;
    }
    tracing::info!(
        store = database.kind(),
        data_dir = %args.store.data_dir().display(),
        model = %engine.model_name(),
        node = %node_id,
        cluster = if redis_url.is_some() { "redis" } else { "none" },
        landlock = sandbox.landlock,
        landlock_abi = sandbox.abi,
        "spool started"
    );
    // Tests and scripts wait for this exact line to learn the port (and the scheme).
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "spool listening on {scheme}://{bound}")?;
    stdout.flush()?;
    drop(stdout);

    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            match stop_signal().await {
                Ok(name) => tracing::info!(signal = name, "shutting down"),
                Err(e) => tracing::error!(error = %e, "cannot listen for stop signals; shutting down"),
            }
            shutdown.cancel();
        }
    });
    let config = ServerConfig {
        heartbeat: Duration::from_secs(args.heartbeat_secs),
        allowed_hosts: args.allowed_hosts.iter().map(|h| h.trim().to_owned()).filter(|h| !h.is_empty()).collect(),
        max_connections: args.max_connections as usize,
        header_timeout: Duration::from_secs(args.idle_timeout_secs),
        sandbox: Some(sandbox),
        ui_dir: args.ui_dir.clone(),
        secure_cookies: tls.is_some(),
        tls,
        outbox: spool_server::OutboxConfig { webhooks, dispatch: file.webhooks.dispatch(), channels: Vec::new() },
        push: file.push.clone(),
        ..ServerConfig::default()
    };
    spool_server::serve_state(listener, AppState::new(engine.clone(), config), shutdown)
        .await
        .context("serving")?;
    // Runs still executing end as `failed` (`server_stopped`) and give their leases up,
    // so another node (or this one, restarted) can run their sessions at once. A crash
    // skips this: the next start (one node) or the lease reaper (several) settles them.
    let stopped = engine.stop_runs(Duration::from_secs(5)).await;
    if stopped > 0 {
        tracing::info!(stopped, "stopped the runs still executing");
    }
    database.close().await;
    drop(data_lock);
    tracing::info!("stopped");
    Ok(())
}

/// The certificate and key of `--tls-cert`/`--tls-key`, read and checked now so that a
/// wrong file stops the start instead of failing every handshake.
fn tls_config(args: &ServeArgs) -> anyhow::Result<Option<spool_server::TlsConfig>> {
    match (&args.tls_cert, &args.tls_key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(spool_server::TlsConfig::from_pem_files(cert, key)?)),
        (Some(_), None) => bail!("--tls-cert needs --tls-key (SPOOL_TLS_KEY): the private key of the certificate"),
        (None, Some(_)) => bail!("--tls-key needs --tls-cert (SPOOL_TLS_CERT): the certificate chain of the key"),
    }
}

/// Offers the tools of each enabled `[[mcp]]` server, connected per session: a stdio
/// server started in the `bash` sandbox (`settings`, with `data_dir` unreadable), an
/// HTTP one reached with its headers and its bearer token, read when connecting.
fn mcp_sources(
    mut tools: spool_engine::ToolRegistry,
    servers: Vec<spool_mcp::McpServerConfig>,
    settings: &spool_tools::SandboxSettings,
    data_dir: &std::path::Path,
) -> spool_engine::ToolRegistry {
    let data_dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    for server in servers.into_iter().filter(|s| s.enabled) {
        let name = server.name.clone();
        let transport = match server.transport {
            spool_mcp::Transport::Stdio(_) => "stdio",
            spool_mcp::Transport::Http(_) => "HTTP",
        };
        let source = spool_mcp::McpSource::new(server, settings.clone(), Some(data_dir.clone()));
        tracing::info!(server = %name, "MCP server configured ({transport}, connected per session)");
        tools = tools.with_source(std::sync::Arc::new(source));
    }
    tools
}

/// The `bearer_token_file`s of the `[[mcp]]` entries: secrets like the server's own,
/// which commands (and stdio servers, in the same sandbox) must not read.
fn mcp_token_files(servers: &[spool_mcp::McpServerConfig]) -> Vec<PathBuf> {
    let files = servers.iter().filter_map(|server| match &server.transport {
        spool_mcp::Transport::Http(spool_mcp::HttpServer { bearer: Some(spool_mcp::BearerToken::File(path)), .. }) => {
            Some(path.clone())
        }
        _ => None,
    });
    files.collect()
}

/// Every file the server was given that holds a secret, or may (a certificate file can
/// hold the key too): the `bash` sandbox keeps them from commands as it keeps the data
/// directory. A new flag naming such a file belongs here.
fn secret_files(args: &ServeArgs) -> Vec<PathBuf> {
    let flags = [&args.config, &args.tls_cert, &args.tls_key, &args.redis_url_file, &args.cluster_key_file];
    flags.into_iter().flatten().cloned().chain(args.store.secret_files()).collect()
}

/// The models on offer: the scripted model always (the default when nothing else is
/// configured), the `--model` / config default, and the config's extra `models`, with
/// prices from the config. Provider settings are looked up in the config's `[env]`
/// first, then the process environment.
fn build_models(args: &ServeArgs, file: &config::FileConfig) -> anyhow::Result<Models> {
    let env = |name: &str| file.env.get(name).cloned().or_else(|| std::env::var(name).ok());
    let scripted = Arc::new(ScriptedModel::new(Duration::from_millis(args.scripted_delay_ms)));
    let mut models = Models::new(scripted);
    let default = args.model.clone().or_else(|| file.model.clone());
    for (spec, is_default) in default.iter().map(|d| (d, true)).chain(file.models.iter().map(|m| (m, false))) {
        if spec == "scripted" {
            continue;
        }
        let model = spool_model::from_spec(spec, &env).map_err(|e| anyhow::anyhow!("model {spec:?}: {e}"))?;
        models = models.with(model, None, is_default);
    }
    for (name, price) in &file.prices {
        if !models.set_price(name, *price) {
            bail!("the config prices {name:?}, which is not a configured model");
        }
    }
    Ok(models)
}

/// Resolves `--addr`'s `HOST:PORT` to the one address to bind.
async fn resolve_addr(raw: &str) -> anyhow::Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(raw)
        .await
        .with_context(|| format!("invalid --addr {raw:?}: expected HOST:PORT"))?
        .collect();
    // A name resolving to both loopback and public addresses counts as public.
    addrs
        .iter()
        .find(|a| !a.ip().is_loopback())
        .or(addrs.first())
        .copied()
        .with_context(|| format!("--addr {raw:?} resolves to no address"))
}

/// Waits for SIGINT or SIGTERM and names the one that came.
async fn stop_signal() -> std::io::Result<&'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result.map(|()| "SIGINT"),
            _ = term.recv() => Ok("SIGTERM"),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await.map(|()| "ctrl-c")
    }
}

/// A node name: 1 to 64 printable ASCII characters, so it reads well in logs and errors.
fn check_node_id(name: &str) -> anyhow::Result<String> {
    let name = name.trim();
    if name.is_empty() || name.len() > 64 || !name.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("--node-id must be 1 to 64 printable ASCII characters without spaces");
    }
    Ok(name.to_owned())
}

/// The host name and a random suffix: unique per process, so a restarted node never
/// mistakes its predecessor's leases for its own.
fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().chars().filter(char::is_ascii_graphic).take(40).collect::<String>())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into());
    let suffix = spool_protocol::RunId::new().as_str()[4..].to_ascii_lowercase();
    format!("{host}-{}", &suffix[suffix.len() - 6..])
}

/// After connections close, hands the memory they freed back to the system.
///
/// glibc's malloc keeps freed chunks in its arenas: after 10,000 SSE subscribers came
/// and went, RSS stayed at 192 MiB against 24 MiB before (BENCHMARKS.md, "Idle
/// subscribers"); `malloc_trim(0)` returns the free pages inside the heap too, which
/// brought it to 29 MiB. It walks the free lists under the arena locks, so it runs
/// only when fewer connections are open than at the previous look, on a thread of its
/// own, at most every few seconds. jemalloc measured worse, so the allocator stays.
fn give_back_freed_memory(metrics: spool_engine::metrics::Metrics) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        let every = std::time::Duration::from_secs(3);
        let open = move || metrics.open_http_connections();
        let spawned = std::thread::Builder::new().name("malloc-trim".into()).spawn(move || {
            let mut last = open();
            loop {
                std::thread::sleep(every);
                let now = open();
                if now < last {
                    // SAFETY: malloc_trim takes a plain size and only touches malloc's own state.
                    unsafe { malloc_trim(0) };
                }
                last = now;
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start the memory trimmer");
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    drop(metrics);
}
