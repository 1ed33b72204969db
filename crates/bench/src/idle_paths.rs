//! `spool-bench idle-paths`: what one idle SSE subscriber costs the server on each way a
//! client can reach its stream (issue 43, "the lean path for every stream").
//!
//! `spool-bench idle` measures the simplest way: a plain TCP connection whose first and
//! only request is the stream. Real clients also come other ways: a browser's
//! `EventSource` takes a pooled keep-alive connection that already served other
//! requests, and over TLS it speaks HTTP/2 (every tab's streams on one connection) or,
//! without ALPN `h2`, HTTP/1.1. Each [`Path`] is one of those, measured alone on a fresh
//! server: N subscribers spread round robin over S sessions, each on its own connection
//! (HTTP/2: `--h2-streams` streams per connection), the server's VmRSS and RssAnon
//! read after `--settle-secs` of quiet before and with them; the difference over N is
//! what one costs.
//!
//! Which path served a stream is on the wire: the lean event-stream connection answers
//! with `connection: close` (it serves that one request), hyper does not. The row says
//! how many of the N were lean.
//!
//! HTTPS servers get a self-signed certificate made here, passed through
//! `SPOOL_TLS_CERT`/`SPOOL_TLS_KEY` by a small wrapper script in front of the spool
//! binary (the way `scripts/heaptrack-serve` stands in front of it), so the server is
//! started exactly as the other benchmarks start it. The client is as lean as `idle`'s:
//! raw HTTP/1.1 over the socket or over rustls, and the `h2` crate for HTTP/2; it reads
//! a response until the stream's first frame (`\nid: `) and then reads and drops
//! heartbeats.
//!
//! Where a path's memory goes: `--spool scripts/heaptrack-serve` with `SPOOL_BIN` set
//! runs each server under heaptrack (the server is stopped with SIGTERM at the end of
//! its path, so the profile is written), e.g. `--paths tls --subscribers 2000`.

use crate::fake_model::FakeModel;
use crate::nodes::{Cluster, Node};
use anyhow::{Context, Result, bail};
use memchr::memmem;
use std::net::SocketAddr;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;

/// The first frame of a stream (its snapshot has an SSE id).
const FIRST_FRAME: &[u8] = b"\nid: ";
/// The most of a response read before its first frame must have come.
const MAX_OPENING: usize = 256 * 1024;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Plain HTTP/1.1; the stream is the connection's first request.
    Fresh,
    /// Plain HTTP/1.1; the stream follows an ordinary request on the same connection.
    KeepAlive,
    /// HTTPS, HTTP/1.1 by ALPN; the stream is the connection's first request.
    Tls,
    /// HTTPS, HTTP/1.1 by ALPN; the stream follows an ordinary request.
    TlsKeepAlive,
    /// HTTPS, HTTP/2 by ALPN, `--h2-streams` streams per connection.
    H2,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Fresh => "fresh",
            Path::KeepAlive => "keep-alive",
            Path::Tls => "tls",
            Path::TlsKeepAlive => "tls-keep-alive",
            Path::H2 => "h2",
        }
    }

    fn tls(self) -> bool {
        !matches!(self, Path::Fresh | Path::KeepAlive)
    }

    /// Whether an ordinary request goes first on the stream's connection.
    fn primed(self) -> bool {
        matches!(self, Path::KeepAlive | Path::TlsKeepAlive)
    }
}

#[derive(clap::Args, Debug)]
pub struct IdlePathsArgs {
    /// Path of the spool binary (default: `spool` next to this binary); a wrapper such
    /// as `scripts/heaptrack-serve` works too.
    #[arg(long)]
    spool: Option<PathBuf>,
    /// Idle subscribers per path, spread round robin over the sessions.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    subscribers: u64,
    /// Sessions the subscribers follow.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    sessions: u64,
    /// The paths to measure, each on a fresh server, in this order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fresh,keep-alive,tls,tls-keep-alive,h2")]
    paths: Vec<Path>,
    /// Streams per HTTP/2 connection (a browser puts all of its tabs' on one).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    h2_streams: u64,
    /// Connections being opened at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    in_flight: u64,
    /// Seconds the server is left alone before each memory reading.
    #[arg(long, default_value_t = 2)]
    settle_secs: u64,
}

pub async fn idle_paths(args: &IdlePathsArgs) -> Result<()> {
    // Each process holds one socket per subscriber, plus its own few.
    crate::idle::system::raise_fd_limit(args.subscribers + 1024)?;
    let cert = Cert::new()?;
    println!(
        "{} idle subscribers per path over {} sessions; server VmRSS (RssAnon) after {} s of quiet",
        args.subscribers, args.sessions, args.settle_secs
    );
    println!("| path | lean | server RSS before → with N, MiB | KiB per idle subscriber | RssAnon per subscriber |");
    println!("|---|---|---|---|---|");
    for &path in &args.paths {
        let row = measure(args, path, &cert).await.with_context(|| format!("path {}", path.name()))?;
        println!(
            "| {}{} | {} of {} | {:.1} → {:.1} | **{:.2}** | {:.2} |",
            path.name(),
            if path == Path::H2 { format!(" ({} per connection)", args.h2_streams) } else { String::new() },
            row.lean,
            args.subscribers,
            row.before.0 as f64 / 1024.0,
            row.with.0 as f64 / 1024.0,
            per(row.with.0, row.before.0, args.subscribers),
            per(row.with.1, row.before.1, args.subscribers),
        );
    }
    Ok(())
}

fn per(with: u64, before: u64, n: u64) -> f64 {
    (with as f64 - before as f64) / n as f64
}

/// One path's readings: (VmRSS, RssAnon) in KiB, and how many streams were lean.
struct Row {
    before: (u64, u64),
    with: (u64, u64),
    lean: u64,
}

async fn measure(args: &IdlePathsArgs, path: Path, cert: &Cert) -> Result<Row> {
    let bin = crate::nodes::spool_bin(args.spool.as_ref())?;
    let bin = if path.tls() { cert.wrap(&bin)? } else { bin };
    // Nothing is prompted; the model only has to exist.
    let model = FakeModel::start(1, Duration::from_millis(1)).await?;
    let mut node = Node::start(&bin, &Cluster::solo(&model.base_url), 0)?;
    let addr: SocketAddr = node
        .base
        .split_once("://")
        .and_then(|(_, a)| a.parse().ok())
        .with_context(|| format!("the node's address {:?}", node.base))?;
    let dial = Dial { addr, tls: path.tls().then(|| cert.connector(path)) };

    // Setup over one HTTP/1.1 connection (over TLS too: ALPN `http/1.1`).
    let setup_dial = Dial { addr, tls: dial.tls.as_ref().map(|_| cert.connector(Path::Tls)) };
    let mut setup = setup_dial.connect().await?;
    let project_dir = tempfile::tempdir()?;
    let project =
        exchange(&mut setup, addr, "POST", "/api/projects", Some(serde_json::json!({"path": project_dir.path()})))
            .await?;
    let mut sessions = Vec::new();
    for i in 0..args.sessions {
        let body = serde_json::json!({"projectId": project["id"], "title": format!("idle {i}")});
        let session = exchange(&mut setup, addr, "POST", "/api/sessions", Some(body)).await?;
        sessions.push(session["id"].as_str().context("a session id")?.to_owned());
    }
    drop(setup);

    let settle = Duration::from_secs(args.settle_secs);
    tokio::time::sleep(settle).await;
    let before = memory(&node);
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let places = Arc::new(Semaphore::new(args.in_flight as usize));
    let mut tasks = JoinSet::new();
    let n = args.subscribers as usize;
    if path == Path::H2 {
        let per_conn = args.h2_streams as usize;
        for first in (0..n).step_by(per_conn) {
            let ids: Vec<String> =
                (first..(first + per_conn).min(n)).map(|i| sessions[i % sessions.len()].clone()).collect();
            let (dial, ready, places) = (dial.clone(), ready_tx.clone(), places.clone());
            tasks.spawn(async move {
                let place = places.acquire_owned().await.expect("the semaphore is never closed");
                h2_subscribers(dial, ids, ready, place).await;
            });
        }
    } else {
        for i in 0..n {
            let session = sessions[i % sessions.len()].clone();
            let (dial, ready, places) = (dial.clone(), ready_tx.clone(), places.clone());
            tasks.spawn(async move {
                let place = places.acquire_owned().await.expect("the semaphore is never closed");
                h1_subscriber(dial, session, path.primed(), ready, place).await;
            });
        }
    }
    drop(ready_tx);
    let mut lean = 0;
    for _ in 0..n {
        match ready_rx.recv().await {
            Some(Ok(was_lean)) => lean += u64::from(was_lean),
            Some(Err(e)) => bail!("a subscriber failed: {e}"),
            None => bail!("the subscribers ended before all were ready"),
        }
    }
    tokio::time::sleep(settle).await;
    let with = memory(&node);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    // Stopped as an operator would, so a heap profiler in front of it
    // (`--spool scripts/heaptrack-serve`) writes its file.
    if let Err(e) = node.terminate(Duration::from_secs(15)) {
        eprintln!("warning: {e:#}");
    }
    Ok(Row { before, with, lean })
}

fn memory(node: &Node) -> (u64, u64) {
    (node.rss_kib().unwrap_or(0), node.rss_anon_kib().unwrap_or(0))
}

/// How a subscriber reaches the server.
#[derive(Clone)]
struct Dial {
    addr: SocketAddr,
    tls: Option<TlsConnector>,
}

/// A client connection, plain or over TLS.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

impl Dial {
    async fn connect(&self) -> Result<Box<dyn Conn>> {
        let tcp = TcpStream::connect(self.addr).await.with_context(|| format!("connecting to {}", self.addr))?;
        tcp.set_nodelay(true)?;
        Ok(match &self.tls {
            None => Box::new(tcp),
            Some(tls) => {
                let name = rustls::pki_types::ServerName::try_from("localhost").expect("a valid name");
                Box::new(tls.connect(name, tcp).await.context("TLS handshake")?)
            }
        })
    }
}

/// One HTTP/1.1 subscriber: optionally an ordinary request first, then the stream on the
/// same connection; reports whether the lean path served it, then reads heartbeats.
async fn h1_subscriber(
    dial: Dial,
    session: String,
    primed: bool,
    ready: mpsc::UnboundedSender<Result<bool, String>>,
    place: tokio::sync::OwnedSemaphorePermit,
) {
    let opened = async {
        let mut conn = dial.connect().await?;
        if primed {
            let got = exchange(&mut conn, dial.addr, "GET", &format!("/api/sessions/{session}"), None).await?;
            if got["id"] != session.as_str() {
                bail!("GET /api/sessions/{session} answered {got}");
            }
        }
        let request = format!(
            "GET /api/sessions/{session}/events HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
            dial.addr
        );
        conn.write_all(request.as_bytes()).await?;
        let head = read_opening(&mut conn).await?;
        let lean = head.to_ascii_lowercase().contains("\r\nconnection: close\r\n");
        anyhow::Ok((conn, lean))
    };
    let mut conn = match opened.await {
        Ok((conn, lean)) => {
            let _ = ready.send(Ok(lean));
            conn
        }
        Err(e) => {
            let _ = ready.send(Err(format!("{e:#}")));
            return;
        }
    };
    drop((ready, place));
    let mut buf = [0u8; 1024];
    while let Ok(1..) = conn.read(&mut buf).await {}
}

/// Reads a stream's response until its first frame; returns the response head. Anything
/// but a 200 is the error.
async fn read_opening(conn: &mut Box<dyn Conn>) -> Result<String> {
    let mut got = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            bail!("closed before the first frame: {:?}", String::from_utf8_lossy(&got));
        }
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = memmem::find(&got, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end + 2]).into_owned();
            if !head.starts_with("HTTP/1.1 200") {
                bail!("the stream was answered {:?}", head.lines().next().unwrap_or_default());
            }
            if memmem::find(&got[end..], FIRST_FRAME).is_some() {
                return Ok(head);
            }
        }
        if got.len() > MAX_OPENING {
            bail!("no first frame in {} bytes", got.len());
        }
    }
}

/// One request with a JSON answer on an HTTP/1.1 connection that stays open; the answer
/// must be a 2xx with a `content-length`.
async fn exchange(
    conn: &mut Box<dyn Conn>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<serde_json::Value> {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await?;
    let mut got = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = memmem::find(&got, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .with_context(|| format!("{method} {path}: no content-length in {head:?}"))?;
            if got.len() >= end + 4 + length {
                if !head.starts_with("http/1.1 2") {
                    bail!("{method} {path}: {}", String::from_utf8_lossy(&got));
                }
                return Ok(serde_json::from_slice(&got[end + 4..end + 4 + length])?);
            }
        }
        let n = conn.read(&mut buf).await?;
        if n == 0 {
            bail!("{method} {path}: closed mid-answer: {:?}", String::from_utf8_lossy(&got));
        }
        got.extend_from_slice(&buf[..n]);
    }
}

/// Streams over one HTTP/2 connection, one per session in `sessions`: each reports when
/// its first frame came (never lean: HTTP/2 is hyper's), then reads heartbeats.
async fn h2_subscribers(
    dial: Dial,
    sessions: Vec<String>,
    ready: mpsc::UnboundedSender<Result<bool, String>>,
    place: tokio::sync::OwnedSemaphorePermit,
) {
    let mut readers = JoinSet::new();
    let opened = async {
        let conn = dial.connect().await?;
        let (mut send, connection) = h2::client::handshake(conn).await.context("HTTP/2 handshake")?;
        readers.spawn(async move {
            let _ = connection.await;
        });
        for session in &sessions {
            let request = http::Request::get(format!("https://{}/api/sessions/{session}/events", dial.addr))
                .header("accept", "text/event-stream")
                .body(())?;
            send = send.ready().await?;
            let (response, _) = send.send_request(request, true)?;
            let response = response.await?;
            if response.status() != http::StatusCode::OK {
                bail!("the stream was answered {}", response.status());
            }
            let mut body = response.into_body();
            let mut got = Vec::new();
            while memmem::find(&got, FIRST_FRAME).is_none() {
                let data = body.data().await.context("closed before the first frame")??;
                let _ = body.flow_control().release_capacity(data.len());
                got.extend_from_slice(&data);
                if got.len() > MAX_OPENING {
                    bail!("no first frame in {} bytes", got.len());
                }
            }
            let _ = ready.send(Ok(false));
            readers.spawn(async move {
                while let Some(Ok(data)) = body.data().await {
                    let _ = body.flow_control().release_capacity(data.len());
                }
            });
        }
        anyhow::Ok(send)
    };
    let _send = match opened.await {
        Ok(send) => send,
        Err(e) => {
            let _ = ready.send(Err(format!("{e:#}")));
            return;
        }
    };
    drop((ready, place));
    while readers.join_next().await.is_some() {}
}

/// A self-signed certificate for `localhost`, its files, and what trusts it.
struct Cert {
    dir: tempfile::TempDir,
    roots: Arc<rustls::RootCertStore>,
}

impl Cert {
    fn new() -> Result<Cert> {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("cert.pem"), made.cert.pem())?;
        std::fs::write(dir.path().join("key.pem"), made.signing_key.serialize_pem())?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(made.cert.der().clone())?;
        Ok(Cert { dir, roots: Arc::new(roots) })
    }

    /// A script that starts `bin` with this certificate (`SPOOL_TLS_CERT`/`SPOOL_TLS_KEY`).
    fn wrap(&self, bin: &FsPath) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let quote = |p: &FsPath| format!("'{}'", p.display().to_string().replace('\'', r"'\''"));
        let script = self.dir.path().join("serve-tls");
        let dir = self.dir.path();
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexport SPOOL_TLS_CERT={} SPOOL_TLS_KEY={}\nexec {} \"$@\"\n",
                quote(&dir.join("cert.pem")),
                quote(&dir.join("key.pem")),
                quote(&std::path::absolute(bin)?)
            ),
        )?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
        Ok(script)
    }

    /// A client that trusts the certificate and offers the path's protocol by ALPN.
    fn connector(&self, path: Path) -> TlsConnector {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(self.roots.clone())
            .with_no_client_auth();
        config.alpn_protocols = vec![if path == Path::H2 { b"h2".to_vec() } else { b"http/1.1".to_vec() }];
        TlsConnector::from(Arc::new(config))
    }
}
