//! Checks of the prompt queue: order and limits (per session, per owner by count and
//! bytes), pausing, and taking a prompt into exactly one run, even when raced.

use super::fixtures::*;
use spool_engine::{ApprovalPolicy, OnDisconnect, QueueInsert, QueueLimits, QueuedPrompt, RunInsert, Store};
use spool_protocol::time::Millis;
use spool_protocol::*;
use std::sync::Arc;

pub fn queued_in(session: &Session, request_id: &str, text: &str, created_at: Millis) -> QueuedPrompt {
    QueuedPrompt {
        session_id: session.id.clone(),
        owner_id: session.owner_id.clone(),
        message: frame::QueuedMessage {
            id: MessageId::new(),
            request_id: request_id.into(),
            text: text.into(),
            created_at,
            files: Vec::new(),
        },
        approval_policy: None,
        on_disconnect: OnDisconnect::Continue,
    }
}

async fn queue_texts(store: &dyn Store, session: &Session) -> Vec<String> {
    let queued = store.queued_prompts(&session.id).await.expect("queued_prompts");
    queued.into_iter().map(|q| q.message.text).collect()
}

pub async fn queued_prompts_wait_in_order_within_their_limit(store: &dyn Store) {
    let (project, session) = new_session(store).await;
    // All in one millisecond: the order is the order they were queued in.
    let first = QueuedPrompt {
        approval_policy: Some(ApprovalPolicy::Deny),
        on_disconnect: OnDisconnect::Cancel,
        ..queued_in(&session, "req-a", "first ünï 🦀", 500)
    };
    assert_eq!(store.queue_prompt(&first, QueueLimits::session(3)).await.expect("queue"), QueueInsert::Queued);
    let second = queued_in(&session, "req-b", "second", 500);
    assert_eq!(store.queue_prompt(&second, QueueLimits::session(3)).await.expect("queue"), QueueInsert::Queued);
    assert_eq!(store.queued_prompts(&session.id).await.expect("queued"), vec![first.clone(), second.clone()]);
    assert_eq!(store.get_queued(&first.message.id).await.expect("get"), Some(first.clone()));

    // A retry (same request id, fresh message id) gets the first message back.
    let retry = queued_in(&session, "req-a", "first again", 600);
    assert_eq!(
        store.queue_prompt(&retry, QueueLimits::session(3)).await.expect("retry"),
        QueueInsert::Existing(first.clone())
    );
    assert_eq!(store.get_queued(&retry.message.id).await.expect("get"), None, "the retry is not stored");

    // The limit counts this session only; past it nothing is written.
    let other = session_in(&project, 2_000, false);
    store.insert_session(&other).await.expect("insert_session");
    assert_eq!(
        store.queue_prompt(&queued_in(&other, "req-a", "elsewhere", 1), QueueLimits::session(1)).await.expect("queue"),
        QueueInsert::Queued
    );
    assert_eq!(
        store.queue_prompt(&queued_in(&session, "req-c", "third", 700), QueueLimits::session(3)).await.expect("queue"),
        QueueInsert::Queued
    );
    let fourth = queued_in(&session, "req-d", "fourth", 800);
    assert_eq!(store.queue_prompt(&fourth, QueueLimits::session(3)).await.expect("queue"), QueueInsert::Full);
    assert_eq!(queue_texts(store, &session).await, ["first ünï 🦀", "second", "third"]);
    assert_eq!(
        store.queue_prompt(&queued_in(&session, "req-a", "x", 1), QueueLimits::session(3)).await.expect("q"),
        QueueInsert::Existing(first.clone()),
        "a full queue still finds a retry"
    );

    let waiting = store.queued_sessions(u32::MAX).await.expect("queued_sessions");
    assert!(waiting.contains(&session.id) && waiting.contains(&other.id), "{waiting:?}");

    // Removing is once; what stays keeps its order.
    assert!(store.delete_queued(&second.message.id).await.expect("delete"));
    assert!(!store.delete_queued(&second.message.id).await.expect("delete again"));
    assert!(!store.delete_queued(&MessageId::new()).await.expect("delete unknown"));
    assert_eq!(queue_texts(store, &session).await, ["first ünï 🦀", "third"]);

    // A queue goes with its session.
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
    assert_eq!(store.queued_prompts(&session.id).await.expect("queued"), vec![]);
    assert_eq!(store.get_queued(&first.message.id).await.expect("get"), None);
    assert!(!store.queued_sessions(u32::MAX).await.expect("queued_sessions").contains(&session.id));
    assert!(store.delete_session(&other.id).await.expect("delete_session"));
}

/// A queued prompt and a steer keep the files they were sent with (issue 42), in
/// order and whole; one without files reads back with none.
pub async fn a_queued_message_keeps_its_files(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let file = |name: &str, media_type: &str, sha: &str| {
        let id = AttachmentId::new();
        api::AttachmentInfo {
            url: format!("/api/attachments/{id}"),
            id,
            name: name.into(),
            media_type: media_type.into(),
            size: 5120,
            sha256: sha.repeat(32),
        }
    };
    let files = vec![file("shot.png", "image/png", "ab"), file("build log.txt", "text/plain", "cd")];
    let mut prompt = queued_in(&session, "req-files", "", 100);
    prompt.message.files = files.clone();
    assert_eq!(store.queue_prompt(&prompt, QueueLimits::session(3)).await.expect("queue"), QueueInsert::Queued);
    let mut steer = queued_in(&session, "req-steer-files", "and this", 200);
    steer.message.files = vec![files[1].clone()];
    assert_eq!(store.queue_steer(&steer, QueueLimits::session(3)).await.expect("steer"), QueueInsert::Queued);
    let plain = queued_in(&session, "req-plain", "no files", 300);
    assert_eq!(store.queue_prompt(&plain, QueueLimits::session(3)).await.expect("queue"), QueueInsert::Queued);

    assert_eq!(store.get_queued(&prompt.message.id).await.expect("get"), Some(prompt.clone()));
    assert_eq!(store.queued_prompts(&session.id).await.expect("queued"), vec![prompt.clone(), steer.clone(), plain]);
    assert_eq!(store.queued_steers(&session.id).await.expect("steers"), vec![steer]);
    // A retry answers the message queued first, its files included.
    let retry = queued_in(&session, "req-files", "again", 400);
    assert_eq!(
        store.queue_prompt(&retry, QueueLimits::session(3)).await.expect("retry"),
        QueueInsert::Existing(prompt)
    );
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
}

/// Stop pauses a queue (issue 36): a paused session is not among the queues start-up
/// and the reaper start, its prompts stay, and resuming brings it back.
pub async fn a_paused_queue_is_left_out_until_resumed(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    store.queue_prompt(&queued_in(&session, "req-p", "waits", 1), QueueLimits::session(3)).await.expect("queue");
    assert!(!store.queue_paused(&session.id).await.expect("paused"));
    store.pause_queue(&session.id, 10).await.expect("pause");
    store.pause_queue(&session.id, 20).await.expect("pausing twice is no error");
    assert!(store.queue_paused(&session.id).await.expect("paused"));
    assert!(!store.queued_sessions(u32::MAX).await.expect("queued_sessions").contains(&session.id));
    assert_eq!(queue_texts(store, &session).await, ["waits"], "the prompts stay");
    assert!(store.resume_queue(&session.id).await.expect("resume"));
    assert!(!store.resume_queue(&session.id).await.expect("resume"), "not paused any more");
    assert!(!store.queue_paused(&session.id).await.expect("paused"));
    assert!(store.queued_sessions(u32::MAX).await.expect("queued_sessions").contains(&session.id));
}

pub async fn queued_prompts_are_bounded_per_owner_by_count_and_bytes(store: &dyn Store) {
    let (project, first) = new_session(store).await;
    let second = session_in(&project, 2_000, false);
    store.insert_session(&second).await.expect("insert_session");
    let (_, strangers) = new_session(store).await;
    // "ü" is two bytes: the byte limit counts bytes, not characters.
    let limits = QueueLimits { per_session: 10, per_owner: 3, per_owner_bytes: 10 };
    let queue = |q: QueuedPrompt| async move { store.queue_prompt(&q, limits).await.expect("queue") };
    assert_eq!(queue(queued_in(&first, "a", "üüü", 1)).await, QueueInsert::Queued);
    assert_eq!(queue(queued_in(&second, "b", "xxxx", 1)).await, QueueInsert::Queued);
    // 6 + 4 bytes queued: one more byte in any of the owner's sessions is too many.
    assert_eq!(queue(queued_in(&second, "c", "y", 1)).await, QueueInsert::OwnerFull);
    assert_eq!(queue(queued_in(&strangers, "c", "other", 1)).await, QueueInsert::Queued);
    assert_eq!(
        queue(queued_in(&first, "a", "retry", 1)).await,
        QueueInsert::Existing(store.queued_prompts(&first.id).await.expect("q")[0].clone())
    );
    let roomy = QueueLimits { per_owner_bytes: 1_000, ..limits };
    assert_eq!(store.queue_prompt(&queued_in(&first, "d", "z", 1), roomy).await.expect("q"), QueueInsert::Queued);
    // Three queued: the count limit, across sessions.
    assert_eq!(store.queue_prompt(&queued_in(&second, "e", "z", 1), roomy).await.expect("q"), QueueInsert::OwnerFull);
    assert_eq!(queue_texts(store, &second).await, ["xxxx"], "nothing written when refused");
    // A full session is still `Full`, whatever the owner has.
    let tight = QueueLimits { per_session: 2, ..roomy };
    assert_eq!(store.queue_prompt(&queued_in(&first, "f", "z", 1), tight).await.expect("q"), QueueInsert::Full);
}

pub async fn taking_a_queued_prompt_inserts_its_run_once(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let next = queued_in(&session, "req-next", "next", 100);
    let later = queued_in(&session, "req-later", "later", 100);
    for q in [&next, &later] {
        assert_eq!(store.queue_prompt(q, QueueLimits::session(32)).await.expect("queue"), QueueInsert::Queued);
    }
    let run = run_in(&session, "req-next", RunStatus::Running);
    let prompt = prompt_of(&run, next.message.id.clone(), "next");
    assert_eq!(store.take_queued(&next.message.id, &run, &prompt).await.expect("take"), Some(RunInsert::Created));
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(run.clone()));
    assert_eq!(queue_texts(store, &session).await, ["later"]);
    // The queued text became the run's user message, under the queued message's id.
    let history = store.list_messages(&session.id, None, 10).await.expect("list_messages");
    assert_eq!(history, vec![prompt.clone()], "the prompt is stored with its run");
    // Taken is taken: a second taker writes nothing.
    let again = run_in(&session, "req-next", RunStatus::Running);
    let again_prompt = prompt_of(&again, next.message.id.clone(), "next");
    assert_eq!(store.take_queued(&next.message.id, &again, &again_prompt).await.expect("take again"), None);
    assert_eq!(store.get_run(&again.id).await.expect("get_run"), None);
    assert_eq!(store.count_messages(&session.id).await.expect("count"), 1, "no second prompt");

    // A prompt whose request id already has a run leaves the queue and starts nothing.
    let ran = run_in(&session, "req-later", RunStatus::Completed);
    store.insert_run(&ran).await.expect("insert_run");
    let late = run_in(&session, "req-later", RunStatus::Running);
    let late_prompt = prompt_of(&late, later.message.id.clone(), "later");
    assert_eq!(
        store.take_queued(&later.message.id, &late, &late_prompt).await.expect("take"),
        Some(RunInsert::Existing(ran))
    );
    assert_eq!(store.get_run(&late.id).await.expect("get_run"), None);
    assert_eq!(store.count_messages(&session.id).await.expect("count"), 1, "nothing started, nothing written");
    assert_eq!(store.queued_prompts(&session.id).await.expect("queued"), vec![]);
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
}

pub async fn concurrent_takes_of_one_queued_prompt_have_exactly_one_winner(stores: &[Arc<dyn Store>], racers: usize) {
    let store = &stores[0];
    let (_, session) = new_session(store.as_ref()).await;
    let queued = queued_in(&session, "req-race", "once", 100);
    assert_eq!(store.queue_prompt(&queued, QueueLimits::session(32)).await.expect("queue"), QueueInsert::Queued);
    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let store = stores[i % stores.len()].clone();
            let (id, run) = (queued.message.id.clone(), run_in(&session, "req-race", RunStatus::Running));
            let prompt = prompt_of(&run, id.clone(), "once");
            tokio::spawn(async move { (run.id.clone(), store.take_queued(&id, &run, &prompt).await.expect("take")) })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        if let (run, Some(taken)) = task.await.expect("task") {
            assert_eq!(taken, RunInsert::Created);
            winners.push(run);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one taker starts the prompt");
    assert_eq!(store.runs_since(&session.id, 0).await.expect("runs").len(), 1, "one run in the store");
    assert_eq!(store.count_messages(&session.id).await.expect("count"), 1, "one prompt in the store");
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
}

/// Steers (issue 40) wait in the queue marked as such, bounded by their own count, and a
/// steer is taken into its run once: its row goes and its user message comes in one
/// write, and a second taker writes nothing.
pub async fn a_steer_is_taken_into_its_run_once(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let prompt = queued_in(&session, "req-queued", "queued", 100);
    assert_eq!(store.queue_prompt(&prompt, QueueLimits::session(32)).await.expect("queue"), QueueInsert::Queued);
    let steer = queued_in(&session, "req-steer", "steer", 100);
    assert_eq!(store.queue_steer(&steer, QueueLimits::session(1)).await.expect("steer"), QueueInsert::Queued);
    let retry = queued_in(&session, "req-steer", "steer", 100);
    assert_eq!(
        store.queue_steer(&retry, QueueLimits::session(1)).await.expect("retry"),
        QueueInsert::Existing(steer.clone())
    );
    let more = queued_in(&session, "req-more", "more", 100);
    assert_eq!(store.queue_steer(&more, QueueLimits::session(1)).await.expect("full"), QueueInsert::Full);
    // Steers are listed apart, and in the queue with every other prompt.
    assert_eq!(store.queued_steers(&session.id).await.expect("steers"), vec![steer.clone()]);
    assert_eq!(queue_texts(store, &session).await, ["queued", "steer"]);

    let message = IndexedMessage { id: steer.message.id.clone(), index: 0, message: Message::user_text("steer", 100) };
    let take = || store.take_steer(&steer.message.id, &session.id, &session.owner_id, &message);
    assert!(take().await.expect("take"));
    assert!(!take().await.expect("take again"), "taken is taken");
    // A queued prompt is no steer: taking it as one writes nothing.
    let not_steer =
        IndexedMessage { id: prompt.message.id.clone(), index: 1, message: Message::user_text("queued", 1) };
    let taken = store.take_steer(&prompt.message.id, &session.id, &session.owner_id, &not_steer).await.expect("take");
    assert!(!taken);
    assert_eq!(store.list_messages(&session.id, None, 10).await.expect("list"), vec![message]);
    assert_eq!(queue_texts(store, &session).await, ["queued"]);
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
}
