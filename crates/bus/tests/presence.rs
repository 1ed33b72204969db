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

/// Clients arriving on three nodes over a few seconds, then leaving at once, as a
/// thousand browsers do: a terminal on the session hears a bounded number of
/// `session.presence` frames, not one per node and change, and the last one it hears
/// has everyone in it, then only itself again.
#[cfg_attr(not(spool_redis), ignore = "needs Redis: set SPOOL_TEST_REDIS_URL")]
#[tokio::test]
async fn a_burst_of_views_on_three_nodes_is_announced_a_few_times_with_the_right_sum() {
    const JOINS: usize = 60;
    let url = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn spool_engine::Store> =
        Arc::new(spool_store::SqliteStore::open(&dir.path().join("spool.db")).await.expect("open the store"));
    let hub = InProcess::hub("a");
    let (b_link, c_link) = (hub.node("b"), hub.node("c"));
    let connect = || async { RedisBus::connect(&url, BusConfig::default(), crate::bus::key()).await.expect("bus") };
    let a = node(store.clone(), hub, Arc::new(connect().await), "a").await;
    let b = node(store.clone(), b_link, Arc::new(connect().await), "b").await;
    let c = node(store, c_link, Arc::new(connect().await), "c").await;
    let user = a.local_user().clone();
    let project = a.projects().create(&user, dir.path().to_str().expect("utf-8"), None).await.expect("project");
    let session = a.sessions().create(&user, &project.id, None).await.expect("session").id;

    // The terminal follows on C and hears that it is there.
    let (terminal, _) = c
        .sessions()
        .subscribe(&user, &session, None, CancellationToken::new(), Viewer::watching(ClientKind::Cli))
        .await
        .expect("subscribe on c");
    let mut terminal = terminal.typed();
    let mut heard = Vec::new();
    let alone = |p: &Presence| p.viewers == 1 && p.answerers == 0;
    next_presence(&mut terminal, &mut heard, alone).await;
    heard.clear();

    // Web pages open on A, B and C in turn, one every 40 ms: a pace for arrivals, not
    // a wait for anything.
    let nodes = [&a, &b, &c];
    let mut pages = Vec::new();
    for i in 0..JOINS {
        let (page, _) = nodes[i % 3]
            .sessions()
            .subscribe(&user, &session, None, CancellationToken::new(), Viewer::answering(ClientKind::Web))
            .await
            .expect("subscribe a page");
        pages.push(page);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let everyone = |p: &Presence| p.viewers == 1 + JOINS as u64 && p.answerers == JOINS as u64;
    let last = next_presence(&mut terminal, &mut heard, everyone).await;
    assert_eq!(last.clients, [(ClientKind::Web, JOINS as u64), (ClientKind::Cli, 1)].into_iter().collect());
    let joined = heard.len();

    drop(pages);
    heard.clear();
    next_presence(&mut terminal, &mut heard, alone).await;
    let left = heard.len();
    // Before presence was bounded per session, each node announced each of its
    // settled changes: dozens of frames for this burst.
    assert!(joined <= 8, "{joined} presence frames while {JOINS} pages opened: {heard:?}");
    assert!(left <= 4, "{left} presence frames while they all closed");
}

/// Reads `frames` until a `session.presence` frame passes `done` (within [`WAIT`] twice
/// over: a burst's last count is written and read a few seconds after it), keeping every
/// presence frame heard in `heard`; returns the one that passed.
async fn next_presence(
    frames: &mut spool_engine::TypedSubscription,
    heard: &mut Vec<Presence>,
    done: impl Fn(&Presence) -> bool,
) -> Presence {
    let deadline = tokio::time::Instant::now() + WAIT * 2;
    loop {
        let batch = tokio::time::timeout_at(deadline, frames.next())
            .await
            .unwrap_or_else(|_| panic!("no such presence frame; heard {heard:?}"))
            .expect("open");
        for frame in batch {
            if let FrameBody::Presence { presence } = &frame.body {
                heard.push(presence.clone());
                if done(presence) {
                    return presence.clone();
                }
            }
        }
    }
}
