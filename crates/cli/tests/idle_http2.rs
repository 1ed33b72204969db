//! Idle HTTP/2 connections are closed like idle HTTP/1.1 ones, through the real `spool`
//! binary on a real port: clients that each make one request and then keep their
//! connection open (h2c with prior knowledge on the plain port, h2 chosen by ALPN over
//! TLS) fill `--max-connections`; after the idle timeout the server has closed every one
//! of them and a new client is served, while a connection with a stream open (a list
//! stream) stays and goes on taking requests.
//!
//! The tests wait on what a client sees — its connection ending — never a fixed sleep.
//! Before the fix the connections stayed open for good and everyone else got 503.

use crate::common;
use crate::tls::certificate;

use axum::http::{Request, StatusCode};
use bytes::Bytes;
use common::{WAIT, serve};
use h2::client::SendRequest;
use std::path::Path;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// The idle timeout the servers run with, and how many connections they take.
const IDLE_SECS: &str = "1";
const MAX_CONNECTIONS: usize = 4;

/// One client's HTTP/2 connection: requests go through `send`, and `closed` ends when
/// the connection does.
struct H2 {
    send: SendRequest<Bytes>,
    closed: JoinHandle<()>,
    authority: String,
}

impl H2 {
    async fn over<T>(io: T, authority: &str) -> H2
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (send, connection) = h2::client::handshake(io).await.expect("HTTP/2 handshake");
        // The connection's task answers the server's PINGs and ends when the server
        // closes the connection.
        let closed = tokio::spawn(async move {
            let _ = connection.await;
        });
        H2 { send, closed, authority: authority.to_owned() }
    }

    /// Sends `GET path`; returns the status and the response's body, which stays open.
    async fn get(&mut self, path: &str, accept: &str) -> (StatusCode, h2::RecvStream) {
        let request = Request::get(format!("http://{}{path}", self.authority))
            .header("accept", accept)
            .body(())
            .expect("a request");
        let mut ready = self.send.clone().ready().await.expect("the connection takes a request");
        let (response, _) = ready.send_request(request, true).expect("sent");
        let response = tokio::time::timeout(WAIT, response).await.expect("an answer in time").expect("an answer");
        (response.status(), response.into_body())
    }

    /// `GET /api/health` read to the end; returns its status.
    async fn health_status(&mut self) -> StatusCode {
        let (status, mut body) = self.get("/api/health", "application/json").await;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("the body");
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        status
    }

    /// `GET /api/health`, answered 200.
    async fn health(&mut self) {
        assert_eq!(self.health_status().await, StatusCode::OK);
    }

    /// Waits for the server to close the connection; panics if it is open after [`WAIT`].
    async fn wait_closed(self) {
        tokio::time::timeout(WAIT, self.closed)
            .await
            .expect("the server closed the idle connection")
            .expect("the connection task");
    }
}

/// `spool serve` with a short idle timeout and few connections, plain or with `tls`
/// (its certificate and key); returns the server and `HOST:PORT`.
fn start(data: &Path, tls: Option<(&Path, &Path)>) -> (common::Spool, String) {
    let data = data.to_str().expect("a UTF-8 temp path");
    let max = MAX_CONNECTIONS.to_string();
    let mut args =
        vec!["--addr", "127.0.0.1:0", "--data-dir", data, "--idle-timeout-secs", IDLE_SECS, "--max-connections", &max];
    if let Some((cert, key)) = tls {
        args.extend_from_slice(&[
            "--tls-cert",
            cert.to_str().expect("UTF-8"),
            "--tls-key",
            key.to_str().expect("UTF-8"),
        ]);
    }
    let (server, base) = serve(&args);
    let authority = base.split_once("://").map(|(_, a)| a.to_owned()).expect("a base URL");
    (server, authority)
}

/// Fills every place with a connection that made one request, waits for the server to
/// close them all, and checks that a new connection is served.
async fn idle_connections_are_closed<F, Fut>(connect: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = H2>,
{
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        let mut client = connect().await;
        client.health().await;
        held.push(client);
    }
    for client in held {
        client.wait_closed().await;
    }
    // A client sees its connection end a moment before the server's task gives its
    // place back; a new client is served once it has.
    let deadline = tokio::time::Instant::now() + WAIT;
    while connect().await.health_status().await != StatusCode::OK {
        assert!(tokio::time::Instant::now() < deadline, "the closed connections never gave their places back");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn idle_h2c_connections_are_closed_and_free_their_places() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_server, authority) = start(&dir.path().join("data"), None);
    idle_connections_are_closed(|| async {
        let tcp = TcpStream::connect(&authority).await.expect("connect");
        H2::over(tcp, &authority).await
    })
    .await;
}

#[tokio::test]
async fn idle_h2_connections_over_tls_are_closed_and_free_their_places() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key, pem) = certificate(dir.path());
    let (_server, authority) = start(&dir.path().join("data"), Some((&cert, &key)));
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(pem.as_bytes()) {
        roots.add(cert.expect("the certificate's PEM")).expect("a trusted root");
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    idle_connections_are_closed(|| async {
        let tcp = TcpStream::connect(&authority).await.expect("connect");
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("a name");
        let tls = connector.connect(name, tcp).await.expect("TLS handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "the server chose h2");
        H2::over(tls, &authority).await
    })
    .await;
}

#[tokio::test]
async fn a_connection_with_a_stream_open_is_not_idle() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_server, authority) = start(&dir.path().join("data"), None);
    let connect = || async {
        let tcp = TcpStream::connect(&authority).await.expect("connect");
        H2::over(tcp, &authority).await
    };
    // A list stream opened first, then another connection's one request: by the time
    // that one is closed for being idle, the stream's connection has waited longer.
    let mut streaming = connect().await;
    let (status, mut stream) = streaming.get("/api/workspaces/events", "text/event-stream").await;
    assert_eq!(status, StatusCode::OK);
    let first = tokio::time::timeout(WAIT, stream.data()).await.expect("the first event in time");
    assert!(first.is_some_and(|chunk| chunk.is_ok()), "the stream sends its first event");
    let mut other = connect().await;
    other.health().await;
    other.wait_closed().await;
    assert!(!streaming.closed.is_finished(), "the connection with a stream open was closed");
    // It still takes requests: it was not even asked to close.
    streaming.health().await;
}
