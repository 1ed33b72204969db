//! The accept loop's two jobs beyond serving: dropping a connection whose client stopped
//! reading once the engine cut its subscriber, and shutting down gracefully with streams
//! open.

use crate::common;

use common::{Open, SseStream, TestOptions, TestServer, WAIT};
use reqwest::StatusCode;
use spool_engine::EngineConfig;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected() {
    // One stream per user: the stuck client's place is given back only when its
    // connection is dropped, which makes that moment visible from outside.
    let engine = EngineConfig { max_streams_per_user: 1, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
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

    // The engine cut the stuck subscriber long ago; the connection is dropped a grace
    // period later. Until then the stream holds the user's one place and a new stream
    // is refused; once one is let in, the stuck connection is gone.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut fresh = loop {
        let res = server.events_response(&session, &Open::fresh()).await;
        if res.status() == StatusCode::OK {
            break SseStream::new(res);
        }
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(tokio::time::Instant::now() < deadline, "the stuck connection still holds its stream");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // Drained now, the connection must end without the chunked body's terminator: it
    // was dropped, not finished.
    let mut received = Vec::new();
    let read = tokio::time::timeout(WAIT, stuck.read_to_end(&mut received)).await.expect("connection closed");
    assert!(read.is_ok() || !received.is_empty(), "read failed before any data: {read:?}");
    assert!(received.starts_with(b"HTTP/1.1 200 OK\r\n"));
    assert!(!received.ends_with(b"\r\n0\r\n\r\n"), "the body finished normally instead of being cut");
    assert!(received.len() < 64 << 20, "the server kept queueing for the stuck client: {} bytes", received.len());

    // Everyone else is unaffected.
    let snapshot = fresh.next_frame().await.expect("snapshot");
    assert_eq!(snapshot.state().total, 2);
}

#[tokio::test]
async fn shutdown_ends_open_streams_cleanly() {
    let mut server = TestServer::start().await;
    let session = server.new_session().await;
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.next_frame().await.expect("snapshot");

    // The server ends its streams itself, so the shutdown does not wait out its grace
    // period and then drop them (which a client would see as a broken body).
    server.stop().await;
    stream.expect_end(WAIT).await;
    assert_eq!(stream.error, None, "the stream was dropped, not ended");
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
