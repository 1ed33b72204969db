//! Checks of a session's notes: its memory and its todo list, each replaced whole, and
//! its choices about tool sources, one per source; all deleted with the session.

use super::fixtures::*;
use spool_engine::Store;
use spool_protocol::*;

pub async fn session_memory_is_replaced_whole_and_deleted_with_the_session(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    assert_eq!(store.get_memory(&session.id).await.expect("get"), SessionMemory::default());
    let memory = SessionMemory {
        facts: vec![Fact { text: "README.md has 3 lines".into(), source: FactSource::Tool, at: 5 }],
        summary: Some("the user asked about the readme".into()),
        summarized_before: 4,
    };
    store.put_memory(&session.id, &session.owner_id, &memory).await.expect("put");
    assert_eq!(store.get_memory(&session.id).await.expect("get"), memory);
    let replaced = SessionMemory { facts: vec![], summary: None, summarized_before: 9 };
    store.put_memory(&session.id, &session.owner_id, &replaced).await.expect("put again");
    assert_eq!(store.get_memory(&session.id).await.expect("get"), replaced);
    assert!(store.delete_session(&session.id).await.expect("delete"));
    assert_eq!(store.get_memory(&session.id).await.expect("get"), SessionMemory::default());
}

pub async fn todo_lists_are_replaced_whole_and_deleted_with_the_session(store: &dyn Store) {
    use spool_protocol::hub::{Todo, TodoPriority, TodoStatus};
    let (_, session) = new_session(store).await;
    let (_, other) = new_session(store).await;
    assert_eq!(store.get_todos(&session.id).await.expect("get"), vec![], "no list until the agent writes one");
    let todo = |id: &str, content: &str, status, priority| Todo {
        content: content.into(),
        status,
        active_form: None,
        priority,
        id: Some(id.into()),
    };
    let first = vec![
        todo("1", "Read the code ✓ — ünïcode", TodoStatus::Completed, Some(TodoPriority::High)),
        todo("2", "Write the tool", TodoStatus::InProgress, None),
        todo("3", "Drop it", TodoStatus::Cancelled, Some(TodoPriority::Low)),
    ];
    store.put_todos(&session.id, &session.owner_id, &first).await.expect("put");
    store.put_todos(&other.id, &other.owner_id, &first[..1]).await.expect("put other");
    assert_eq!(store.get_todos(&session.id).await.expect("get"), first, "order and every field kept");
    let replaced = vec![todo("2", "Write the tool", TodoStatus::Completed, None)];
    store.put_todos(&session.id, &session.owner_id, &replaced).await.expect("put again");
    assert_eq!(store.get_todos(&session.id).await.expect("get"), replaced, "replaced whole");
    store.put_todos(&session.id, &session.owner_id, &[]).await.expect("clear");
    assert_eq!(store.get_todos(&session.id).await.expect("get"), vec![]);
    assert_eq!(store.get_todos(&other.id).await.expect("get other"), first[..1].to_vec(), "per session");
    assert!(store.delete_session(&other.id).await.expect("delete"));
    assert_eq!(store.get_todos(&other.id).await.expect("get"), vec![], "deleted with its session");
}

pub async fn tool_source_choices_are_kept_per_source_and_deleted_with_the_session(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let (_, other) = new_session(store).await;
    assert!(store.get_source_choices(&session.id).await.expect("get").is_empty(), "no choice until one is made");
    store.set_source_choice(&session.id, &session.owner_id, "everything", false).await.expect("off");
    store.set_source_choice(&session.id, &session.owner_id, "docs", true).await.expect("on");
    store.set_source_choice(&other.id, &other.owner_id, "everything", true).await.expect("other");
    let choices = store.get_source_choices(&session.id).await.expect("get");
    assert_eq!(choices, [("docs".to_owned(), true), ("everything".to_owned(), false)].into(), "one per source");
    store.set_source_choice(&session.id, &session.owner_id, "everything", true).await.expect("on again");
    assert!(store.get_source_choices(&session.id).await.expect("get")["everything"], "replaced");
    assert!(store.get_source_choices(&other.id).await.expect("get")["everything"], "per session");
    assert!(store.delete_session(&session.id).await.expect("delete"));
    assert!(store.get_source_choices(&session.id).await.expect("get").is_empty(), "deleted with its session");
}
