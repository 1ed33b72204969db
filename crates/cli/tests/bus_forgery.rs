//! A frame on the Redis bus that no node wrote never reaches a client. Someone who can
//! reach Redis (a `bash` command on a node, as the security review did with
//! `redis-cli`) writes a forged `session.state` into a session's stream log and
//! publishes it on the session's PUB/SUB channel, exactly as the node's publish script
//! would; the session's live stream must never show it, and the node counts what it
//! dropped (`spool_bus_rejected_messages_total`). Frames the node itself writes go on
//! being delivered: the marker after the forgery arrives.
//!
//! PostgreSQL and Redis come from `SPOOL_TEST_DATABASE_URL` and `SPOOL_TEST_REDIS_URL`;
//! built without them the test is ignored, except under CI (see `common`).

use crate::common;

use common::{SseStream, TestDb, WAIT, call, redis_url, start_with};
use redis::AsyncCommands;
use serde_json::json;

const FORGED: &str = "forged-by-redis-cli";

#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_frame_forged_in_redis_never_reaches_the_sessions_stream() {
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let project_dir = dir.path().join("project");
    std::fs::create_dir(&project_dir).expect("project dir");
    let node_id = format!("forgery-{}", std::process::id());
    let (_node, base) = start_with(&db.url, &dir.path().join("data"), &["--redis-url", &redis, "--node-id", &node_id]);
    let client = reqwest::Client::builder().no_proxy().build().expect("client");

    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
    let session = session["id"].as_str().expect("session id").to_owned();
    let res = client.get(format!("{base}/api/sessions/{session}/events")).send().await.expect("open the stream");
    assert!(res.status().is_success(), "{}", res.status());
    let mut stream = SseStream::new(res).with_wait(WAIT);
    let first = stream.next_frame().await.expect("the stream opens");
    assert_eq!(first.kind, "session.snapshot", "{}", first.json);

    // A real session.state on the bus, for the attacker to copy.
    let retitle = |title: &str| client.patch(format!("{base}/api/sessions/{session}")).json(&json!({"title": title}));
    call(retitle("genuine")).await;
    let genuine = stream.frames_until(|f| f.kind == "session.state" && f.state().session.title == "genuine").await;
    let genuine = genuine.last().expect("the genuine frame");

    // What an attacker with redis-cli does: take the last entry of the session's log,
    // put another title in it, and append and publish it as the next frame.
    let mut redis_conn = redis::Client::open(redis.as_str())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to Redis");
    let (meta, log, live) =
        (format!("spool:{{{session}}}:meta"), format!("spool:{{{session}}}:log"), format!("spool:{{{session}}}:live"));
    let epoch: String = redis_conn.hget(&meta, "epoch").await.expect("the session's epoch");
    // Stream entries as redis-rs reads them: (entry id, [(field, value)]).
    type Entries = Vec<(String, Vec<(String, Vec<u8>)>)>;
    let last: Entries = redis::cmd("XREVRANGE")
        .arg(&log)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(&mut redis_conn)
        .await
        .expect("read the log");
    let entry = &last.first().expect("the session's log has its frames").1[0].1;
    // The node's frame is JSON (`[origin, number, body]`); anything before it is not
    // the attacker's to reproduce.
    let start = entry.iter().position(|&b| b == b'[').expect("a JSON frame in the entry");
    let copied = String::from_utf8_lossy(&entry[start..]).into_owned();
    assert!(copied.contains("\"genuine\""), "the copied frame is the genuine retitle: {copied}");
    let forged = copied.replace("\"genuine\"", &format!("\"{FORGED}\""));
    let seq: u64 = redis_conn.hincr(&meta, "seq", 1).await.expect("bump the seq");
    let _: String = redis::cmd("XADD")
        .arg(&log)
        .arg(format!("{seq}-0"))
        .arg("f")
        .arg(forged.as_bytes())
        .query_async(&mut redis_conn)
        .await
        .expect("append the forged frame");
    let receivers: u64 =
        redis_conn.publish(&live, format!("{epoch}:{seq}\n{forged}")).await.expect("publish the forged frame");
    assert!(receivers >= 1, "the node listens on the session's channel");

    // The node's next frame: everything the client got up to it is free of the forgery.
    call(retitle("after")).await;
    let after = stream
        .frames_until(|f| {
            matches!(f.kind.as_str(), "session.state" | "session.snapshot") && f.state().session.title == "after"
        })
        .await;
    for frame in &after {
        assert!(!frame.json.to_string().contains(FORGED), "a forged frame reached the client: {}", frame.json);
        assert!(frame.seq > genuine.seq || frame.stream_id != genuine.stream_id, "{}", frame.json);
    }
    let state = call(client.get(format!("{base}/api/sessions/{session}"))).await;
    assert_eq!(state["title"], "after", "{state}");

    let metrics = client.get(format!("{base}/metrics")).send().await.expect("metrics").text().await.expect("text");
    let rejected = metrics
        .lines()
        .find_map(|l| l.strip_prefix("spool_bus_rejected_messages_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(rejected.is_some_and(|n| n >= 1.0), "the node counts what it dropped:\n{metrics}");
}
