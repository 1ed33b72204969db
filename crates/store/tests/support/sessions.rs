//! Checks of sessions: listed by archived flag, their permission rules (removed once,
//! even when raced), search over titles and text, and deletion with what they hold.

use super::fixtures::*;
use serde_json::json;
use spool_engine::{RuleRemoval, Store};
use spool_protocol::*;
use std::sync::Arc;

pub async fn sessions_list_by_archived_flag_newest_first(store: &dyn Store) {
    let (project, first) = new_session(store).await; // updated_at 1000, live
    let newest = session_in(&project, 3_000, false);
    let middle = session_in(&project, 2_000, false);
    let archived = session_in(&project, 5_000, true);
    for s in [&middle, &archived, &newest] {
        store.insert_session(s).await.expect("insert_session");
    }
    let (_, elsewhere) = new_session(store).await;

    let live = store.list_sessions(&project.id, false).await.expect("list live");
    assert_eq!(live, vec![newest.clone(), middle.clone(), first.clone()]);
    assert_eq!(store.list_sessions(&project.id, true).await.expect("list archived"), vec![archived.clone()]);
    assert_eq!(store.get_session(&elsewhere.id).await.expect("get"), Some(elsewhere.clone()));
    assert_eq!(store.get_session(&SessionId::new()).await.expect("get absent"), None);

    // update_session writes title, title_set, archived, permissions, mode and updated_at only.
    let edited = Session {
        title: "Fix the parser".into(),
        title_set: true,
        archived: true,
        permissions: vec![PermissionRule::new("read", "*", PermissionAction::Allow)],
        mode: spool_protocol::SessionMode::Plan,
        updated_at: 9_000,
        created_at: 42,
        ..first.clone()
    };
    store.update_session(&edited).await.expect("update");
    let expected = Session { created_at: first.created_at, ..edited };
    assert_eq!(store.get_session(&first.id).await.expect("get"), Some(expected.clone()));
    assert_eq!(store.list_sessions(&project.id, false).await.expect("list live"), vec![newest, middle]);
    assert_eq!(store.list_sessions(&project.id, true).await.expect("list archived"), vec![expected, archived]);
}

pub async fn sessions_keep_their_permission_rules(store: &dyn Store) {
    let (project, plain) = new_session(store).await;
    assert_eq!(store.get_session(&plain.id).await.expect("get").expect("stored").permissions, vec![]);

    use PermissionAction::*;
    // A default pattern (`*`, left out of the JSON), wildcards, order that matters
    // (the last match wins), and characters JSON has to escape.
    let rules = vec![
        PermissionRule::new("*", "*", Ask),
        PermissionRule::new("bash", "git *", Allow),
        PermissionRule::new("bash", "git push*", Deny),
        PermissionRule::new("write", "src/\"quoted\"/ünï?.rs", Allow),
    ];
    let session = Session { permissions: rules.clone(), ..session_in(&project, 2_000, false) };
    store.insert_session(&session).await.expect("insert_session");
    assert_eq!(store.get_session(&session.id).await.expect("get"), Some(session.clone()));
    assert_eq!(store.list_sessions(&project.id, false).await.expect("list"), vec![session.clone(), plain]);

    // update_session replaces the rules whole: reordered, then none at all.
    let reordered = Session { permissions: rules.iter().rev().cloned().collect(), updated_at: 3_000, ..session };
    store.update_session(&reordered).await.expect("update");
    assert_eq!(store.get_session(&reordered.id).await.expect("get"), Some(reordered.clone()));
    let cleared = Session { permissions: vec![], updated_at: 4_000, ..reordered };
    store.update_session(&cleared).await.expect("update");
    assert_eq!(store.get_session(&cleared.id).await.expect("get"), Some(cleared));
}

pub async fn sessions_keep_their_own_guardrails(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    assert_eq!(store.session_guardrails(&session.id).await.expect("read"), None, "none of its own at first");
    let own = Guardrails { run_cost_usd: Some(1.5), session_tokens: Some(10_000), ..Guardrails::default() };
    store.set_session_guardrails(&session.id, Some(&own), 7_000).await.expect("set");
    assert_eq!(store.session_guardrails(&session.id).await.expect("read"), Some(own));
    assert_eq!(store.get_session(&session.id).await.expect("get").expect("session").updated_at, 7_000);
    // Writing the session's other fields leaves them as they are.
    let renamed = Session { title: "renamed".into(), ..session.clone() };
    store.update_session(&renamed).await.expect("update");
    assert_eq!(store.session_guardrails(&session.id).await.expect("read"), Some(own));
    store.set_session_guardrails(&session.id, None, 8_000).await.expect("remove");
    assert_eq!(store.session_guardrails(&session.id).await.expect("read"), None);
    assert_eq!(store.session_guardrails(&SessionId::new()).await.expect("absent session"), None);
}

pub async fn one_rule_is_removed_only_while_it_is_the_one_named(store: &dyn Store) {
    use PermissionAction::{Allow, Deny};
    let (_, session) = new_session(store).await;
    let rules = vec![PermissionRule::new("read", "*", Deny), PermissionRule::new("bash", "git *", Allow)];
    store.update_session(&Session { permissions: rules.clone(), ..session.clone() }).await.expect("update");
    // Another tool or another action at that index: nothing changes.
    let at_zero = Some(rules[0].clone());
    assert_eq!(
        store.remove_session_rule(&session.id, 0, "bash", Allow, 9).await.expect("remove"),
        RuleRemoval::Mismatch(at_zero.clone())
    );
    assert_eq!(
        store.remove_session_rule(&session.id, 0, "read", Allow, 9).await.expect("remove"),
        RuleRemoval::Mismatch(at_zero)
    );
    assert_eq!(
        store.remove_session_rule(&session.id, 2, "bash", Allow, 9).await.expect("remove"),
        RuleRemoval::Mismatch(None)
    );
    let unchanged = store.get_session(&session.id).await.expect("get").expect("session");
    assert_eq!((unchanged.permissions, unchanged.updated_at), (rules.clone(), session.updated_at));
    // The named one goes, with its pattern; the rest stay in order.
    assert_eq!(
        store.remove_session_rule(&session.id, 1, "bash", Allow, 7_000).await.expect("remove"),
        RuleRemoval::Removed(vec![rules[0].clone()])
    );
    let stored = store.get_session(&session.id).await.expect("get").expect("session");
    assert_eq!((stored.permissions, stored.updated_at), (vec![rules[0].clone()], 7_000));
    assert_eq!(
        store.remove_session_rule(&SessionId::new(), 0, "read", Deny, 9).await.expect("remove"),
        RuleRemoval::NoSession
    );
}

/// Racers remove the same rule (index 0, `bash` allow) from one list: exactly one wins,
/// the others find another rule there, and the rule behind it is never lost.
pub async fn concurrent_removals_of_one_rule_have_exactly_one_winner(stores: &[Arc<dyn Store>], racers: usize) {
    use PermissionAction::Allow;
    let (_, session) = new_session(stores[0].as_ref()).await;
    let rules = vec![PermissionRule::new("bash", "*", Allow), PermissionRule::new("write", "*", Allow)];
    stores[0].update_session(&Session { permissions: rules.clone(), ..session.clone() }).await.expect("update");
    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let (store, id) = (stores[i % stores.len()].clone(), session.id.clone());
            tokio::spawn(async move { store.remove_session_rule(&id, 0, "bash", Allow, 1).await })
        })
        .collect();
    let mut won = 0;
    for task in tasks {
        match task.await.expect("task").expect("remove") {
            RuleRemoval::Removed(left) => {
                won += 1;
                assert_eq!(left, vec![rules[1].clone()]);
            }
            RuleRemoval::Mismatch(there) => assert_eq!(there, Some(rules[1].clone())),
            RuleRemoval::NoSession => panic!("the session is there"),
        }
    }
    assert_eq!(won, 1);
    let stored = stores[0].get_session(&session.id).await.expect("get").expect("session");
    assert_eq!(stored.permissions, vec![rules[1].clone()]);
}

pub async fn search_finds_titles_and_message_text_of_one_owner_newest_first_in_pages(store: &dyn Store) {
    // A word no earlier pass over the same database wrote.
    let word = format!("quokka{}", &SessionId::new().as_str()[4..]).to_lowercase();
    let (project, unrelated) = new_session(store).await; // updated_at 1000, no match
    let titled = Session { title: format!("Fix the {word} parser"), ..session_in(&project, 2_000, false) };
    let in_prompt = session_in(&project, 3_000, false);
    let in_answer = session_in(&project, 4_000, true); // archived sessions are searched too
    let in_tool_call = session_in(&project, 5_000, false);
    for s in [&titled, &in_prompt, &in_answer, &in_tool_call] {
        store.insert_session(s).await.expect("insert_session");
    }
    let owner = project.owner_id.clone();
    let prompt_text = format!("where is the {} defined?", word.to_uppercase());
    store.insert_message(&in_prompt.id, &owner, &indexed(0, user("hello"))).await.expect("insert");
    store.insert_message(&in_prompt.id, &owner, &indexed(1, user(&prompt_text))).await.expect("insert");
    store.insert_message(&in_answer.id, &owner, &indexed(0, user("hi"))).await.expect("insert");
    store
        .insert_message(&in_answer.id, &owner, &indexed(1, assistant(&format!("the {word} lives here"))))
        .await
        .expect("insert");
    // Only text is searched: a tool call's arguments are not what a person wrote or read.
    let call = Message::Assistant {
        content: vec![Content::ToolCall { id: "c1".into(), name: "read".into(), arguments: json!({"path": word}) }],
        stop_reason: Some(StopReason::ToolUse),
        usage: Usage::default(),
        model: "scripted".into(),
        error_message: None,
        timestamp: 11,
    };
    store.insert_message(&in_tool_call.id, &owner, &indexed(0, call)).await.expect("insert");
    // Another user's session with the word in its title and text stays invisible.
    let (other_project, other) = new_session(store).await;
    let other = Session { title: format!("{word} too"), ..other };
    store.update_session(&other).await.expect("update");
    store.insert_message(&other.id, &other_project.owner_id, &indexed(0, user(&word))).await.expect("insert");

    let all = store.search_sessions(&owner, &word.to_uppercase(), None, 10, A_WHILE).await.expect("search");
    let found: Vec<(&SessionId, Option<&str>)> = all.iter().map(|m| (&m.session.id, m.text.as_deref())).collect();
    let answer_text = format!("the {word} lives here");
    assert_eq!(
        found,
        vec![
            (&in_answer.id, Some(answer_text.as_str())),
            (&in_prompt.id, Some(prompt_text.as_str())),
            (&titled.id, None)
        ],
        "case-insensitive, newest first, this owner's only, with the matching text"
    );
    assert_eq!(all[2].session, titled);
    assert!(!found.iter().any(|(id, _)| **id == unrelated.id || **id == in_tool_call.id));

    let first = store.search_sessions(&owner, &word, None, 2, A_WHILE).await.expect("page 1");
    assert_eq!(first.iter().map(|m| &m.session.id).collect::<Vec<_>>(), vec![&in_answer.id, &in_prompt.id]);
    let last = &first[1].session;
    let rest = store
        .search_sessions(&owner, &word, Some((last.updated_at, last.id.clone())), 2, A_WHILE)
        .await
        .expect("page 2");
    assert_eq!(rest.iter().map(|m| &m.session.id).collect::<Vec<_>>(), vec![&titled.id]);

    // LIKE's wildcards in the query match themselves, not everything.
    assert_eq!(store.search_sessions(&owner, "%", None, 10, A_WHILE).await.expect("search %"), vec![]);
    assert_eq!(store.search_sessions(&owner, "_", None, 10, A_WHILE).await.expect("search _"), vec![]);
}

pub async fn deleting_a_session_removes_its_messages_runs_and_approvals(store: &dyn Store) {
    let (project, doomed) = new_session(store).await;
    let kept = session_in(&project, 2_000, false);
    store.insert_session(&kept).await.expect("insert_session");
    append_all(store, &doomed, vec![user("bye"), assistant("bye")]).await;
    let kept_messages = append_all(store, &kept, vec![user("hi")]).await;
    let doomed_run = run_in(&doomed, "req", RunStatus::Completed);
    let kept_run = run_in(&kept, "req", RunStatus::Completed);
    store.insert_run(&doomed_run).await.expect("insert_run");
    store.insert_run(&kept_run).await.expect("insert_run");
    let (doomed_interrupted, doomed_approval, _) = interrupted_run_in(store, &doomed, "req-ask", 200).await;
    let (_, kept_approval, kept_checkpoint) = interrupted_run_in(store, &kept, "req-ask", 200).await;

    assert!(store.delete_session(&doomed.id).await.expect("delete_session"));
    assert_eq!(store.get_session(&doomed.id).await.expect("get"), None);
    assert_eq!(store.count_messages(&doomed.id).await.expect("count"), 0);
    assert_eq!(all_messages(store, &doomed).await, vec![]);
    assert_eq!(store.get_run(&doomed_run.id).await.expect("get_run"), None);
    assert_eq!(store.get_run(&doomed_interrupted.id).await.expect("get_run"), None);
    assert_eq!(stored_approval(store, &doomed_approval.id).await, None);
    assert_eq!(store.pending_approvals(&doomed.id).await.expect("pending"), vec![]);
    let all_pending = store.all_pending_approvals().await.expect("all_pending_approvals");
    assert!(all_pending.iter().all(|a| a.id != doomed_approval.id), "no pending approval outlives its session");
    assert!(!store.delete_session(&doomed.id).await.expect("delete again"), "a second delete finds nothing");

    assert_eq!(store.list_sessions(&project.id, false).await.expect("list"), vec![kept.clone()]);
    assert_eq!(all_messages(store, &kept).await, kept_messages);
    assert_eq!(store.get_run(&kept_run.id).await.expect("get_run"), Some(kept_run));
    assert_eq!(stored_approval(store, &kept_approval.id).await, Some((kept_approval.clone(), kept_checkpoint)));
    assert_eq!(store.pending_approvals(&kept.id).await.expect("pending"), vec![kept_approval]);

    // The index and requestId of a deleted session are free again if the id comes back.
    store.insert_session(&doomed).await.expect("reinsert session");
    store.insert_message(&doomed.id, &doomed.owner_id, &indexed(0, user("again"))).await.expect("index 0 is free");
}
