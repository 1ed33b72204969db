//! A node behind the cursor waits for the bus instead of sending an older snapshot
//! (issue 14). Two engines share one SQLite store and one Redis bus; node B hears the
//! bus 200 ms late. A client that read up to node A's last frame reconnects to node B
//! with that cursor while B has not heard it yet: B waits for the frames (at most
//! [`BUS_LAG_WAIT`]) and then replays — here, nothing — instead of answering with a
//! snapshot older than what the client already showed.

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use spool_bus::{BusConfig, RedisBus};
use spool_engine::cluster::InProcess;
use spool_engine::events::BUS_LAG_WAIT;
use spool_engine::framebus::Watchers;
use spool_engine::{BusFailure, BusItem, Engine, EngineConfig, FrameBus, Models, PromptInput, Start};
use spool_model::ScriptedModel;
use spool_protocol::{Cursor, RunStatus, SessionId};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How late node B hears every frame.
const LAG: Duration = Duration::from_millis(200);

use spool_test_support::redis_url;

/// The real bus, with every item a listener hears delivered `LAG` after it arrived
/// (a fixed latency, not one that adds up).
struct Late(RedisBus);

#[async_trait]
impl FrameBus for Late {
    async fn publish(&self, session: &SessionId, payloads: &[Bytes]) -> Result<Vec<Cursor>, BusFailure> {
        FrameBus::publish(&self.0, session, payloads).await
    }

    async fn replay(&self, session: &SessionId, cursor: &Cursor) -> Result<Option<Vec<Bytes>>, BusFailure> {
        FrameBus::replay(&self.0, session, cursor).await
    }

    async fn set_watchers(&self, session: &SessionId, node: &str, watchers: Watchers) -> Result<(), BusFailure> {
        FrameBus::set_watchers(&self.0, session, node, watchers).await
    }

    async fn watchers(&self, session: &SessionId) -> Result<Vec<(String, Watchers)>, BusFailure> {
        FrameBus::watchers(&self.0, session).await
    }

    async fn listen(
        &self,
        session: &SessionId,
        cursor: Option<&Cursor>,
    ) -> Result<BoxStream<'static, BusItem>, BusFailure> {
        let mut inner = FrameBus::listen(&self.0, session, cursor).await?;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, BusItem)>();
        tokio::spawn(async move {
            while let Some(item) = inner.next().await {
                if tx.send((tokio::time::Instant::now() + LAG, item)).is_err() {
                    return;
                }
            }
        });
        let delayed = futures::stream::unfold(rx, |mut rx| async move {
            let (due, item) = rx.recv().await?;
            tokio::time::sleep_until(due).await;
            Some((item, rx))
        });
        Ok(delayed.boxed())
    }
}

async fn node(store: Arc<dyn spool_engine::Store>, cluster: InProcess, bus: Arc<dyn FrameBus>, name: &str) -> Engine {
    let config = EngineConfig { node_id: name.into(), shared_store: true, ..EngineConfig::default() };
    let models = Models::new(Arc::new(ScriptedModel::new(Duration::from_millis(2))));
    Engine::start_clustered(store, models, spool_tools::workspace_tools(), config, Arc::new(cluster), Some(bus))
        .await
        .expect("start a node")
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_node_behind_the_cursor_waits_for_the_frames_instead_of_sending_a_snapshot() {
    let url = redis_url();
    assert!(LAG * 4 < BUS_LAG_WAIT, "the lag is well within the wait");
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn spool_engine::Store> =
        Arc::new(spool_store::SqliteStore::open(&dir.path().join("spool.db")).await.expect("open the store"));
    let hub = InProcess::hub("a");
    let b_link = hub.node("b");
    let on_time: Arc<dyn FrameBus> =
        Arc::new(RedisBus::connect(&url, BusConfig::default(), crate::bus::key()).await.expect("bus"));
    let late: Arc<dyn FrameBus> =
        Arc::new(Late(RedisBus::connect(&url, BusConfig::default(), crate::bus::key()).await.expect("bus")));
    let a = node(store.clone(), hub, on_time, "a").await;
    let b = node(store, b_link, late, "b").await;
    let user = a.local_user().clone();
    let project = a.projects().create(&user, dir.path().to_str().expect("utf-8"), None).await.expect("project");
    let session = a.sessions().create(&user, &project.id, None).await.expect("session").id;
    // B follows the session (someone has it open there), 200 ms behind.
    b.sessions().get(&user, &session).await.expect("load on b");

    let prompt = PromptInput { text: "stream: 40".into(), ..PromptInput::default() };
    let run = a.runs().prompt(&user, &session, prompt).await.expect("prompt on a").run_id;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while a.runs().get(&user, &run).await.expect("run").status == RunStatus::Running {
        assert!(tokio::time::Instant::now() < deadline, "the run settles");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // What a client of node A has read: every frame up to A's head.
    let seen = a.sessions().get(&user, &session).await.expect("detail on a");
    let cursor = Cursor { stream_id: seen.stream_id.clone(), seq: seen.seq };
    let behind = b.sessions().get(&user, &session).await.expect("detail on b");
    assert_eq!(behind.stream_id, seen.stream_id, "one stream across nodes");
    assert!(behind.seq < cursor.seq, "B has not heard the last frames yet: {} of {}", behind.seq, cursor.seq);

    let (_subscription, start) = b
        .sessions()
        .subscribe(
            &user,
            &session,
            Some(&cursor),
            CancellationToken::new(),
            spool_engine::Viewer::watching(spool_protocol::ClientKind::Other),
        )
        .await
        .expect("subscribe on b");
    // A replay from exactly the cursor, not a snapshot. It may carry frames A published
    // after the client's read (the session's title, set asynchronously after a first
    // run, can land then), so their number is not asserted.
    assert!(
        matches!(start, Start::Replay { from_seq, .. } if from_seq == cursor.seq),
        "B caught up with the bus and replays from the cursor (it was at {} of {}): {start:?}",
        behind.seq,
        cursor.seq
    );
    // With a bus, each node reports its own lag behind it, under its own name.
    for (engine, name) in [(&a, "a"), (&b, "b")] {
        let text = engine.metrics_text();
        let series = format!("spool_bus_lag_frames{{node=\"{name}\"}} ");
        let line = text.lines().find_map(|l| l.strip_prefix(series.as_str()));
        assert!(line.is_some_and(|v| v.parse::<u64>().is_ok()), "no {series} in:\n{text}");
    }
}
