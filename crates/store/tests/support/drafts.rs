//! Checks of drafts: the streaming message appended in chunks, and found orphaned once
//! its run settles without committing it.

use super::fixtures::*;
use spool_engine::{Draft, Store};
use spool_protocol::*;

/// A draft is the message it began as plus the chunks appended to it; chunk 0 starts a
/// new one and replaces the session's previous draft; a chunk never extends another
/// message's draft; a chunk written again replaces itself (a retried write). Listed as
/// orphaned, rebuilt whole, only once its run is neither running nor interrupted;
/// deleted by `delete_draft` and with its session.
pub async fn drafts_are_appended_and_orphaned_once_their_run_settles(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let mut run = run_in(&session, "draft", RunStatus::Running);
    store.insert_run(&run).await.expect("insert_run");
    let began = |content: Vec<Content>| Message::Assistant {
        content,
        stop_reason: None,
        usage: Usage::default(),
        model: "scripted".into(),
        error_message: None,
        timestamp: 7,
    };
    let head = |id: &MessageId| Draft {
        session_id: session.id.clone(),
        run_id: run.id.clone(),
        owner_id: session.owner_id.clone(),
        message: IndexedMessage { id: id.clone(), index: 1, message: began(Vec::new()) },
    };
    let start = StreamDelta::TextStart { content_index: 0 };
    let text = |offset: usize, t: &str| StreamDelta::TextDelta { content_index: 0, offset, delta: t.into() };
    let ours = |all: Vec<Draft>| all.into_iter().filter(|d| d.session_id == session.id).collect::<Vec<_>>();

    let stale = MessageId::new();
    store.append_draft(&head(&stale), 0, &[start.clone(), text(0, "stale")]).await.expect("a first draft");
    let id = MessageId::new();
    assert!(
        store.append_draft(&head(&id), 1, &[text(0, "x")]).await.is_err(),
        "a chunk never extends another message's draft"
    );
    let written = store.append_draft(&head(&id), 0, &[start.clone(), text(0, "w1")]).await.expect("replaces");
    assert!(written > 0, "counts what it wrote");
    store.append_draft(&head(&id), 1, &[text(2, " w2")]).await.expect("appends");
    store.append_draft(&head(&id), 1, &[text(2, " w2")]).await.expect("a retried chunk replaces itself");
    store.append_draft(&head(&id), 2, &[text(5, " w3")]).await.expect("appends");
    assert!(ours(store.orphaned_drafts().await.expect("orphaned")).is_empty(), "its run is still running");

    run.status = RunStatus::Failed;
    store.update_run(&run).await.expect("update_run");
    let whole = Draft {
        message: IndexedMessage {
            message: began(vec![Content::Text { text: "w1 w2 w3".into() }]),
            ..head(&id).message
        },
        ..head(&id)
    };
    assert_eq!(ours(store.orphaned_drafts().await.expect("orphaned")), vec![whole], "rebuilt from its chunks");

    store.delete_draft(&session.id).await.expect("delete_draft");
    assert!(ours(store.orphaned_drafts().await.expect("orphaned")).is_empty());
    store.append_draft(&head(&id), 0, &[start]).await.expect("a draft again");
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
    assert!(ours(store.orphaned_drafts().await.expect("orphaned")).is_empty(), "gone with its session");
}
