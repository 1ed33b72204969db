//! Checks of committed messages: every role and content kind round-trips, an index is
//! taken once, and pages and rounds are cut where the engine expects.

use super::fixtures::*;
use serde_json::json;
use spool_engine::{Store, StoreError};
use spool_protocol::*;

pub async fn messages_round_trip_for_every_role_and_content_kind(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let every_kind = || {
        vec![
            Content::Thinking { thinking: "let me think\nabout \"quotes\" and ünïcødé 🦀".into() },
            Content::Text { text: String::new() },
            Content::ToolCall {
                id: "call_1".into(),
                name: "bash".into(),
                arguments: json!({
                    "command": "ls -la",
                    "nested": {"list": [1, -2, 3.5, null, true, "x"], "empty": {}},
                    "big": u64::MAX,
                    "small": i64::MIN,
                    "float": 0.1,
                }),
            },
            Content::Text { text: "the end".into() },
        ]
    };
    let messages = vec![
        Message::User { content: every_kind(), timestamp: 1_700_000_000_000 },
        Message::Assistant {
            content: every_kind(),
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage { input: 12_345, output: 678, ..Usage::default() },
            model: "claude-test".into(),
            error_message: None,
            timestamp: 1_700_000_000_001,
        },
        Message::ToolResult {
            tool_call_id: "call_1".into(),
            tool_name: "bash".into(),
            content: every_kind(),
            is_error: true,
            timestamp: 1_700_000_000_002,
            diff: None,
        },
        // The optional fields set the other way, and no content at all.
        Message::Assistant {
            content: vec![],
            stop_reason: None,
            usage: Usage::default(),
            model: String::new(),
            error_message: Some("model overloaded".into()),
            timestamp: 1_700_000_000_003,
        },
        Message::User { content: vec![], timestamp: 0 },
        Message::ToolResult {
            tool_call_id: String::new(),
            tool_name: "read".into(),
            content: vec![Content::Text { text: "ok".into() }],
            is_error: false,
            timestamp: -5,
            // What a write changed, kept with its result for the card after a reload.
            diff: Some("--- a (before the write)\n+++ a (after the write)\n@@ -1 +1 @@\n-\"old\"\n+ünï\n".into()),
        },
        Message::Assistant {
            content: vec![Content::Text { text: "done".into() }],
            stop_reason: Some(StopReason::Aborted),
            usage: Usage { input: 0, output: 1, ..Usage::default() },
            model: "m".into(),
            error_message: Some(String::new()),
            timestamp: 9,
        },
    ];
    let stored = append_all(store, &session, messages).await;
    assert_eq!(all_messages(store, &session).await, stored, "messages must come back exactly as written");
    assert_eq!(store.count_messages(&session.id).await.expect("count"), stored.len() as u64);

    let (_, empty) = new_session(store).await;
    assert_eq!(store.count_messages(&empty.id).await.expect("count"), 0);
    assert_eq!(all_messages(store, &empty).await, vec![]);
}

pub async fn a_taken_message_index_is_a_conflict(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let original = indexed(0, user("first"));
    store.insert_message(&session.id, &session.owner_id, &original).await.expect("insert");

    let rival = indexed(0, assistant("second writer"));
    match store.insert_message(&session.id, &session.owner_id, &rival).await {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("a taken index must be a Conflict, got {other:?}"),
    }
    assert_eq!(all_messages(store, &session).await, vec![original.clone()], "the first writer's message must stand");
    assert_eq!(store.count_messages(&session.id).await.expect("count"), 1);

    // The same index in another session is a different slot.
    let (_, other) = new_session(store).await;
    store.insert_message(&other.id, &other.owner_id, &indexed(0, user("elsewhere"))).await.expect("other session");

    // A message for a session that does not exist is refused, not stored as an orphan.
    let ghost = SessionId::new();
    assert!(store.insert_message(&ghost, &session.owner_id, &indexed(0, user("lost"))).await.is_err());
    assert_eq!(store.count_messages(&ghost).await.expect("count"), 0);
}

pub async fn list_messages_pages_backwards_from_before(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let messages =
        (0..10).map(|i| if i % 2 == 0 { user(&format!("u{i}")) } else { assistant(&format!("a{i}")) }).collect();
    let stored = append_all(store, &session, messages).await;
    // Another session's messages must never leak into this one's pages.
    let (_, noise) = new_session(store).await;
    append_all(store, &noise, vec![user("noise"), assistant("noise")]).await;

    let id = &session.id;
    let page = |before: Option<u64>, limit: u32| async move {
        store.list_messages(id, before, limit).await.expect("list_messages")
    };
    assert_eq!(page(None, 3).await, stored[7..10].to_vec(), "the latest page, ascending");
    assert_eq!(page(Some(7), 3).await, stored[4..7].to_vec(), "the page before it");
    assert_eq!(page(Some(4), 3).await, stored[1..4].to_vec());
    assert_eq!(indices(&page(Some(1), 3).await), vec![0], "a short first page");
    assert_eq!(page(Some(0), 3).await, vec![], "nothing before the first message");
    assert_eq!(page(None, 0).await, vec![], "a zero limit");
    assert_eq!(page(None, 100).await, stored, "a limit beyond the history returns all");
    assert_eq!(indices(&page(Some(1_000), 2).await), vec![8, 9], "before beyond the end");
    assert_eq!(indices(&page(Some(u64::MAX), 2).await), vec![8, 9]);
}

pub async fn latest_rounds_starts_at_the_nth_last_user_message(store: &dyn Store) {
    // One round: a prompt, a tool call, its result, the answer.
    let round =
        |n: usize| vec![user(&format!("prompt {n}")), assistant("calling"), tool_result("output"), assistant("answer")];
    let rounds_of = |sizes: usize| (0..sizes).flat_map(round).collect::<Vec<_>>();
    let from =
        |stored: &[IndexedMessage], index: u64| stored.iter().filter(|m| m.index >= index).cloned().collect::<Vec<_>>();

    // No messages at all.
    let (_, empty) = new_session(store).await;
    for n in [0, 1, 3] {
        assert_eq!(
            store.latest_rounds(&empty.id, n).await.expect("latest_rounds"),
            vec![],
            "empty session, {n} rounds"
        );
    }

    // Messages but no user message (0 user rounds): fewer than asked, so everything.
    let (_, no_user) = new_session(store).await;
    let stored = append_all(store, &no_user, vec![assistant("hello"), tool_result("x")]).await;
    assert_eq!(store.latest_rounds(&no_user.id, 1).await.expect("latest_rounds"), stored);

    // One round.
    let (_, one) = new_session(store).await;
    let stored = append_all(store, &one, rounds_of(1)).await;
    for n in [1, 3, 5] {
        assert_eq!(store.latest_rounds(&one.id, n).await.expect("latest_rounds"), stored, "1 round, asked {n}");
    }

    // Three rounds: user messages at 0, 4, 8.
    let (_, three) = new_session(store).await;
    let stored = append_all(store, &three, rounds_of(3)).await;
    assert_eq!(store.latest_rounds(&three.id, 1).await.expect("latest_rounds"), from(&stored, 8));
    assert_eq!(store.latest_rounds(&three.id, 2).await.expect("latest_rounds"), from(&stored, 4));
    assert_eq!(store.latest_rounds(&three.id, 3).await.expect("latest_rounds"), stored);
    assert_eq!(store.latest_rounds(&three.id, 5).await.expect("latest_rounds"), stored);
    assert_eq!(store.latest_rounds(&three.id, 0).await.expect("latest_rounds"), vec![], "zero rounds is nothing");

    // Five rounds after a leading non-user message, with an unanswered last prompt:
    // user messages at 1, 5, 9, 13, 17 and the history ends at 17.
    let (_, five) = new_session(store).await;
    let mut messages = vec![assistant("welcome")];
    messages.extend(rounds_of(4));
    messages.push(user("still waiting"));
    let stored = append_all(store, &five, messages).await;
    assert_eq!(indices(&store.latest_rounds(&five.id, 1).await.expect("latest_rounds")), vec![17]);
    assert_eq!(store.latest_rounds(&five.id, 3).await.expect("latest_rounds"), from(&stored, 9));
    assert_eq!(store.latest_rounds(&five.id, 5).await.expect("latest_rounds"), from(&stored, 1));
    assert_eq!(store.latest_rounds(&five.id, 6).await.expect("latest_rounds"), stored, "more rounds than exist");
    assert_eq!(store.latest_rounds(&five.id, usize::MAX).await.expect("latest_rounds"), stored);
}

pub async fn copy_messages_copies_a_prefix_with_new_ids_all_or_nothing(store: &dyn Store) {
    let (project, source) = new_session(store).await;
    let stored =
        append_all(store, &source, vec![user("one"), assistant("two"), user("three"), assistant("four")]).await;
    let fork = session_in(&project, 2_000, false);
    store.insert_session(&fork).await.expect("insert_session");
    assert_eq!(store.copy_messages(&source.id, &fork.id, &fork.owner_id, 2).await.expect("copy"), 2);
    let copied = all_messages(store, &fork).await;
    let content = |ms: &[IndexedMessage]| ms.iter().map(|m| (m.index, m.message.clone())).collect::<Vec<_>>();
    assert_eq!(content(&copied), content(&stored[..2]), "same indices and content");
    assert!(copied.iter().all(|c| stored.iter().all(|s| s.id != c.id)), "new ids");
    assert_eq!(all_messages(store, &source).await, stored, "the source is untouched");

    // A copy that cannot finish (index 1 is taken in the target) leaves nothing behind.
    let (_, taken) = new_session(store).await;
    let own = indexed(1, user("mine"));
    store.insert_message(&taken.id, &taken.owner_id, &own).await.expect("insert_message");
    let refused = store.copy_messages(&source.id, &taken.id, &taken.owner_id, 4).await;
    assert!(matches!(refused, Err(StoreError::Conflict(_))), "{refused:?}");
    assert_eq!(all_messages(store, &taken).await, vec![own], "no message of the failed copy stays");
}
