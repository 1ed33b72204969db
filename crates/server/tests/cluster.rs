//! Nodes that share a store and a cluster, played by two engines in one process over one
//! SQLite file and the engine's in-process cluster: an abort on the node that is not
//! running the session reaches the node that is; a list change on one node reaches the
//! other's list stream and typed-change watchers once. (The same over Redis, with three
//! processes, is the CLI's `cluster` test.)

use futures::StreamExt;
use spool_engine::cluster::InProcess;
use spool_engine::lists::Change;
use spool_engine::{Engine, EngineConfig, EngineError, Models, PromptInput};
use spool_model::ScriptedModel;
use spool_protocol::RunStatus;
use spool_store::SqliteStore;
use std::sync::Arc;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(5);

async fn node(store: Arc<dyn spool_engine::Store>, cluster: InProcess, name: &str) -> Engine {
    let config = EngineConfig { node_id: name.into(), lease_ttl: TTL, shared_store: true, ..EngineConfig::default() };
    let models = Models::new(Arc::new(ScriptedModel::new(Duration::from_millis(5))));
    Engine::start_clustered(store, models, spool_tools::workspace_tools(), config, Arc::new(cluster), None)
        .await
        .expect("start a node")
}

#[tokio::test]
async fn an_abort_on_the_other_node_cancels_the_run_and_list_changes_cross_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn spool_engine::Store> =
        Arc::new(SqliteStore::open(&dir.path().join("spool.db")).await.expect("open the store"));
    let hub = InProcess::hub("a");
    let b_link = hub.node("b");
    let a = node(store.clone(), hub, "a").await;
    let b = node(store, b_link, "b").await;
    let user = a.local_user().clone();
    assert_eq!(&user, b.local_user(), "one store, one local user");

    let mut page_on_b = b.lists().subscribe(user.clone());
    page_on_b.next().await.expect("reset");
    let mut watcher_on_b = b.lists().watch_changes();
    let project = a.projects().create(&user, dir.path().to_str().expect("utf-8"), None).await.expect("project");
    let session = a.sessions().create(&user, &project.id, None).await.expect("session");
    let frame = String::from_utf8(page_on_b.next().await.expect("projects.changed on b").to_vec()).expect("utf-8");
    assert!(frame.contains("projects.changed") && frame.contains(project.id.as_str()), "{frame}");
    let frame = String::from_utf8(page_on_b.next().await.expect("sessions.changed on b").to_vec()).expect("utf-8");
    assert!(frame.contains("sessions.changed") && frame.contains(project.id.as_str()), "{frame}");
    assert_eq!(watcher_on_b.recv().await.expect("typed"), Change::ProjectChanged { project: project.id.clone() });
    assert_eq!(
        watcher_on_b.recv().await.expect("typed"),
        Change::SessionCreated { session: session.id.clone(), project: project.id.clone() }
    );

    let prompt = PromptInput { text: "stream: 100000".into(), ..PromptInput::default() };
    let accepted = a.runs().prompt(&user, &session.id, prompt).await.expect("run on a");
    let aborted = b.runs().abort(&user, &session.id).await.expect("abort on b");
    assert_eq!(aborted, Some(accepted.run_id.clone()), "b answers like a local abort");
    // Cancelled: node a ended it on b's word (100,000 deltas 5 ms apart cannot have
    // ended on their own), and b answered only once it had.
    let run = b.runs().get(&user, &accepted.run_id).await.expect("run");
    assert_eq!(run.status, RunStatus::Cancelled, "{run:?}");

    let stranger = spool_protocol::UserId::new();
    let refused = b.runs().abort(&stranger, &session.id).await;
    assert!(matches!(refused, Err(EngineError::NotFound("session"))), "another user's: {refused:?}");
    assert_eq!(b.runs().abort(&user, &session.id).await.expect("abort again"), None, "nothing runs anywhere now");
}
