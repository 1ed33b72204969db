//! The accept loop's two jobs beyond serving: dropping a connection whose client stopped
//! reading once the engine cut its subscriber, and shutting down gracefully with streams
//! open.

mod common;

use common::{Open, TestServer, WAIT};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected() {
    let server = TestServer::start().await;
    let session = server.new_session().await;

    // A raw connection that sends the request and then reads nothing.
    let mut stuck = tokio::net::TcpStream::connect(server.addr).await.expect("connect");
    let request = format!("GET /api/sessions/{session}/events HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stuck.write_all(request.as_bytes()).await.expect("send request");

    // Far more frames than the socket buffers plus the 1 MiB queue can hold. An
    // unpaced 100,000-delta answer takes over 15 s of a debug build on a busy 2-core box,
    // so this waits for the run to settle on its own terms, not within the usual WAIT:
    // the test is about the stuck client, not about speed.
    let run_id = server.start_run(&session, "stream: 100000").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let run = loop {
        let (_, run) = server.get(&format!("/api/runs/{run_id}")).await;
        if matches!(run["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
            break run;
        }
        assert!(tokio::time::Instant::now() < deadline, "the run never settled: {run}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(run["status"], "completed");
    // Nothing observable from outside tells when the drop happened (the client is not
    // reading), so give the connection its grace period with a margin.
    tokio::time::sleep(spool_server::KILL_GRACE * 4).await;

    // Drained now, the connection must end without the chunked body's terminator: it
    // was dropped, not finished.
    let mut received = Vec::new();
    let read = tokio::time::timeout(WAIT, stuck.read_to_end(&mut received)).await.expect("connection closed");
    assert!(read.is_ok() || !received.is_empty(), "read failed before any data: {read:?}");
    assert!(received.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(!received.ends_with(b"\r\n0\r\n\r\n"), "the body finished normally instead of being cut");
    assert!(received.len() < 64 << 20, "the server kept queueing for the stuck client: {} bytes", received.len());

    // Everyone else is unaffected.
    let mut fresh = server.events(&session, Open::fresh()).await;
    let snapshot = fresh.next_frame().await.expect("snapshot");
    assert_eq!(snapshot.state().total, 2);
}

#[tokio::test]
async fn shutdown_ends_open_streams_and_returns_promptly() {
    let mut server = TestServer::start().await;
    let session = server.new_session().await;
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");

    let started = Instant::now();
    server.stop().await;
    assert!(started.elapsed() < Duration::from_secs(5), "shutdown waited {:?}", started.elapsed());
    stream.expect_end(WAIT).await;
    // Nothing listens any more.
    assert!(tokio::net::TcpStream::connect(server.addr).await.is_err());
}

#[tokio::test]
async fn a_restart_keeps_the_records_and_starts_a_new_stream() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let run = server.run_prompt(&session, "echo: kept").await;
    let (_, before) = server.get(&format!("/api/sessions/{session}")).await;

    let server = server.restart().await;
    let (status, after) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{after}");
    assert_ne!(after["streamId"], before["streamId"]);
    assert_eq!(after["state"]["total"], 2);
    let (_, stored) = server.get(&format!("/api/runs/{}", run["id"].as_str().expect("run id"))).await;
    assert_eq!(stored["status"], "completed");
    // The default project survives too: a second session lands in it.
    let second = server.new_session().await;
    assert_ne!(second, session);
}
