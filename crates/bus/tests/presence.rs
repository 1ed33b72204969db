//! Presence across nodes: two engines share one SQLite store and one Redis bus. A view
//! of the session on node B — a web page that can answer approvals — counts on node A,
//! through B's watcher entry in the bus: in A's presence, in A's "is a person looking?"
//! (what a push sent only to someone away asks), and in the `session.presence` frame
//! A's own clients get. Hiding B's page, then closing it, takes it away again.

use futures::StreamExt;
use spool_bus::{BusConfig, RedisBus};
use spool_engine::cluster::InProcess;
use spool_engine::{Engine, EngineConfig, FrameBus, Models, Viewer};
use spool_model::ScriptedModel;
use spool_protocol::frame::FrameBody;
use spool_protocol::{ClientKind, Presence};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use spool_test_support::redis_url;

const WAIT: Duration = Duration::from_secs(15);

async fn node(store: Arc<dyn spool_engine::Store>, cluster: InProcess, bus: Arc<dyn FrameBus>, name: &str) -> Engine {
    let config = EngineConfig {
        node_id: name.into(),
        shared_store: true,
        presence: Some(Duration::from_millis(50)),
        ..EngineConfig::default()
    };
    let models = Models::new(Arc::new(ScriptedModel::new(Duration::from_millis(2))));
    Engine::start_clustered(store, models, spool_tools::workspace_tools(), config, Arc::new(cluster), Some(bus))
        .await
        .expect("start a node")
}

/// Asks `read` until what it gives passes `done`, for [`WAIT`] at most: a node hears of
/// the other's views when the other has written its entry.
async fn until<T: std::fmt::Debug, F: Future<Output = T>>(mut read: impl FnMut() -> F, done: impl Fn(&T) -> bool) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = read().await;
        if done(&now) {
            return now;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {now:?} after {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_view_on_another_node_counts_until_it_hides_and_goes() {
    let url = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn spool_engine::Store> =
        Arc::new(spool_store::SqliteStore::open(&dir.path().join("spool.db")).await.expect("open the store"));
    let hub = InProcess::hub("a");
    let b_link = hub.node("b");
    let connect = || async { RedisBus::connect(&url, BusConfig::default(), crate::bus::key()).await.expect("bus") };
    let a = node(store.clone(), hub, Arc::new(connect().await), "a").await;
    let b = node(store, b_link, Arc::new(connect().await), "b").await;
    let user = a.local_user().clone();
    let project = a.projects().create(&user, dir.path().to_str().expect("utf-8"), None).await.expect("project");
    let session = a.sessions().create(&user, &project.id, None).await.expect("session").id;

    // A terminal follows the session on A; a web page opens it on B.
    let (on_a, _) = a
        .sessions()
        .subscribe(&user, &session, None, CancellationToken::new(), Viewer::watching(ClientKind::Cli))
        .await
        .expect("subscribe on a");
    let mut on_a = on_a.typed();
    assert!(!a.has_visible_answerer(&session).await, "a terminal answers nothing");
    let (page, _) = b
        .sessions()
        .subscribe(&user, &session, None, CancellationToken::new(), Viewer::answering(ClientKind::Web))
        .await
        .expect("subscribe on b");

    let both = |p: &Presence| p.viewers == 2 && p.answerers == 1 && p.visible == 1;
    let presence = || async { a.sessions().presence(&user, &session).await.expect("presence") };
    let seen = until(presence, both).await;
    assert_eq!(seen.clients, [(ClientKind::Web, 1), (ClientKind::Cli, 1)].into_iter().collect());
    assert!(a.has_visible_answerer(&session).await, "B's page counts on A");
    // A's terminal is told, by whichever node announced it.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let batch = tokio::time::timeout_at(deadline, on_a.next()).await.expect("a presence frame").expect("open");
        if batch.iter().any(|f| matches!(&f.body, FrameBody::Presence { presence } if both(presence))) {
            break;
        }
    }

    page.set_visible(false);
    until(|| a.has_visible_answerer(&session), |looking| !looking).await;
    let hidden = presence().await;
    assert_eq!((hidden.viewers, hidden.answerers, hidden.visible), (2, 1, 0), "hidden, still there");

    drop(page);
    let gone = until(presence, |p| p.viewers == 1).await;
    assert_eq!((gone.answerers, gone.visible), (0, 0));
    assert_eq!(gone.clients, [(ClientKind::Cli, 1)].into_iter().collect());
}
