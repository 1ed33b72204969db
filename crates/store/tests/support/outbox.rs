//! Checks of the outbox (issue 41): each change writes its event once, in its own
//! transaction, and a loser writes none; fan-out writes one delivery per target however
//! often it runs; claims never share a delivery; a lapsed lease records nothing;
//! a dead letter is listed and replayed under its id.

use super::fixtures::*;
use serde_json::json;
use spool_engine::{DeliveryOutcome, DeliveryStatus, Store, StoredEvent};
use spool_protocol::reach::EventType;
use spool_protocol::time::Millis;
use spool_protocol::*;
use std::collections::HashSet;
use std::sync::Arc;

/// Far past every time the other checks use, so claims at these times see every
/// earlier delivery as due; [`sweep`] leases those away first.
const LATER: Millis = 4_000_000_000_000;

async fn events_of(store: &dyn Store, session: &SessionId, kind: EventType) -> Vec<StoredEvent> {
    let all = store.session_events(session).await.expect("session_events");
    all.into_iter().filter(|e| e.kind == kind).collect()
}

/// Leases every delivery due at `now` (earlier checks', an earlier pass's) to a node
/// that never records, for good, so a check's claims see only its own.
async fn sweep(store: &dyn Store, now: Millis) {
    while !store.claim_deliveries("sweeper", now, Millis::MAX, 500).await.expect("sweep").is_empty() {}
}

pub async fn each_change_writes_its_event_once_and_a_loser_none(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let created = events_of(store, &session.id, EventType::SessionCreated).await;
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0].owner_id, session.owner_id);
    assert_eq!(created[0].data["sessionId"], session.id.as_str());

    let (run, approval, _) = interrupted_run_in(store, &session, "req-outbox", 200).await;
    let requested = events_of(store, &session.id, EventType::ApprovalRequested).await;
    assert_eq!(requested.len(), 1);
    assert_eq!(requested[0].approval_id.as_ref(), Some(&approval.id));
    assert_eq!(requested[0].data["tool"], "bash");

    let decide =
        |at| store.settle_approval(&approval.id, ApprovalStatus::Resolved, Some(&Decision::Once), None, None, at);
    assert!(decide(300).await.expect("settle"));
    assert!(!decide(301).await.expect("settle again"), "the second settle loses");
    let resolved = events_of(store, &session.id, EventType::ApprovalResolved).await;
    assert_eq!(resolved.len(), 1, "the loser wrote no event");
    assert_eq!(
        (resolved[0].data["status"].as_str(), resolved[0].data["decision"].as_str()),
        (Some("resolved"), Some("once"))
    );

    let settled = Run { status: RunStatus::Completed, ended_at: Some(400), updated_at: 400, ..run.clone() };
    assert!(store.settle_run(&settled).await.expect("settle_run"));
    let again = Run { status: RunStatus::Cancelled, ended_at: Some(500), updated_at: 500, ..run.clone() };
    assert!(!store.settle_run(&again).await.expect("settle_run again"), "a settled run stays settled");
    store.update_run(&again).await.expect("update_run of a settled run");
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(settled), "the first settle stands");
    let told = events_of(store, &session.id, EventType::RunSettled).await;
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].data["status"], "completed");

    // A supersede tells the old approval resolved (superseded) and asks anew; a losing
    // supersede tells nothing.
    let (_, other) = new_session(store).await;
    let (parked_run, old, _) = interrupted_run_in(store, &other, "req-supersede-outbox", 200).await;
    let replacement = approval_for(&parked_run, 201);
    let from_pending = spool_engine::Supersede { id: &old.id, from: ApprovalStatus::Pending, actor: None, at: 201 };
    assert!(store.supersede_approval(&from_pending, &parked_run, &replacement, &json!({})).await.expect("supersede"));
    let lost = approval_for(&parked_run, 202);
    assert!(!store.supersede_approval(&from_pending, &parked_run, &lost, &json!({})).await.expect("again"));
    let resolved = events_of(store, &other.id, EventType::ApprovalResolved).await;
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(
        (resolved[0].approval_id.as_ref(), resolved[0].data["status"].as_str()),
        (Some(&old.id), Some("superseded"))
    );
    let requested = events_of(store, &other.id, EventType::ApprovalRequested).await;
    let asked: Vec<_> = requested.iter().filter_map(|e| e.approval_id.clone()).collect();
    assert_eq!(asked, [old.id.clone(), replacement.id.clone()]);

    // A question is told as asked; a run failed at start-up is told as settled.
    let running = run_in(&session, "req-question", RunStatus::Running);
    store.insert_run(&running).await.expect("insert_run");
    let parked = Run { status: RunStatus::Interrupted, updated_at: 600, ..running.clone() };
    let question = Approval {
        kind: ApprovalKind::SelectOption,
        payload: json!({"question": "Which branch?", "options": []}),
        ..approval_for(&parked, 600)
    };
    store.interrupt_run(&parked, &question, &json!({})).await.expect("interrupt_run");
    let asked = events_of(store, &session.id, EventType::QuestionAsked).await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].data["summary"], "Which branch?");

    let crashed = run_in(&session, "req-crashed", RunStatus::Running);
    store.insert_run(&crashed).await.expect("insert_run");
    let crash = RunError { code: "server_restarted".into(), message: "the server restarted".into() };
    store.fail_running_runs(&crash, 700, &[]).await.expect("fail_running_runs");
    let told = events_of(store, &session.id, EventType::RunSettled).await;
    let failed: Vec<_> = told.iter().filter(|e| e.run_id.as_ref() == Some(&crashed.id)).collect();
    assert_eq!(failed.len(), 1, "{told:?}");
    assert_eq!(failed[0].data["error"], json!({"code": "server_restarted"}), "the code, never the message");
}

pub async fn fan_out_writes_one_delivery_per_target_and_claims_and_records_under_a_lease(store: &dyn Store) {
    let now = LATER;
    sweep(store, now).await;
    let (_, session) = new_session(store).await;
    let event = events_of(store, &session.id, EventType::SessionCreated).await.remove(0);
    let unfanned = store.unfanned_events(100_000).await.expect("unfanned");
    assert!(unfanned.iter().any(|e| e.id == event.id), "a new event waits for fan-out");

    let targets = vec![("webhook:ci".to_owned(), now), ("webhook:audit".to_owned(), now)];
    assert_eq!(store.fan_out(&event.id, &targets, now).await.expect("fan_out"), 2);
    assert_eq!(store.fan_out(&event.id, &targets, now).await.expect("fan_out again"), 0, "each target once");
    let unfanned = store.unfanned_events(100_000).await.expect("unfanned");
    assert!(!unfanned.iter().any(|e| e.id == event.id), "fanned out");

    let claimed = store.claim_deliveries("node-a", now, now + 10, 10).await.expect("claim");
    assert_eq!(claimed.len(), 2);
    assert!(claimed.iter().all(|c| c.delivery.event == event && c.claim.attempt == 1));
    assert!(store.claim_deliveries("node-b", now, now + 10, 10).await.expect("claim").is_empty(), "leased");

    // The first lease lapses: its record changes nothing, and node b takes the delivery.
    let (first, second) = (&claimed[0], &claimed[1]);
    let ok = DeliveryOutcome::Delivered { status: Some(200) };
    assert!(!store.record_delivery(&first.claim, &ok, now + 10).await.expect("record"), "lapsed");
    let retaken = store.claim_deliveries("node-b", now + 10, now + 20, 10).await.expect("claim");
    assert_eq!(retaken.len(), 2, "both leases lapsed");
    let find = |id: &DeliveryId| retaken.iter().find(|c| &c.delivery.id == id).expect("retaken").clone();
    let (retaken, second) = (find(&first.delivery.id), find(&second.delivery.id));
    assert_eq!((retaken.claim.node.as_str(), retaken.claim.attempt), ("node-b", 2));
    assert!(!store.record_delivery(&first.claim, &ok, now + 11).await.expect("record"), "node a's lease is gone");
    assert!(store.record_delivery(&retaken.claim, &ok, now + 11).await.expect("record"));

    // A retry comes back when due; the last failure is dead, listed and replayed.
    let later = now + 1_000;
    let retry = DeliveryOutcome::Retry { next_at: later, status: Some(500), error: "HTTP 500".into() };
    assert!(store.record_delivery(&second.claim, &retry, now + 12).await.expect("record"));
    assert!(store.claim_deliveries("node-c", later - 1, later + 10, 10).await.expect("claim").is_empty(), "not due");
    let again = store.claim_deliveries("node-c", later, later + 10, 10).await.expect("claim");
    assert_eq!(again.len(), 1);
    let dead = DeliveryOutcome::Dead { status: Some(500), error: "HTTP 500".into() };
    assert!(store.record_delivery(&again[0].claim, &dead, later + 1).await.expect("record"));
    let dead_list = store.list_deliveries(Some(&session.owner_id), Some(DeliveryStatus::Dead), 10).await.expect("list");
    assert_eq!(dead_list.len(), 1);
    assert_eq!((dead_list[0].attempts, dead_list[0].last_status), (3, Some(500)));
    let all = store.list_deliveries(Some(&session.owner_id), None, 10).await.expect("list");
    assert_eq!(all.len(), 2);
    assert!(store.list_deliveries(Some(&UserId::new()), None, 10).await.expect("list").is_empty(), "owner's only");

    assert!(!store.replay_delivery(&dead_list[0].id, Some(&UserId::new()), later).await.expect("replay"), "not yours");
    assert!(store.replay_delivery(&dead_list[0].id, Some(&session.owner_id), later + 2).await.expect("replay"));
    assert!(!store.replay_delivery(&dead_list[0].id, None, later + 2).await.expect("replay"), "pending already");
    let replayed = store.claim_deliveries("node-d", later + 2, later + 10, 10).await.expect("claim");
    assert_eq!(replayed.len(), 1);
    assert_eq!((replayed[0].delivery.event.id.clone(), replayed[0].claim.attempt), (event.id.clone(), 1));
    let skipped = DeliveryOutcome::Skipped { reason: "nothing to say".into() };
    assert!(store.record_delivery(&replayed[0].claim, &skipped, later + 3).await.expect("record"));

    // Every delivery finished: the event may be pruned, with its deliveries.
    assert!(store.prune_events(event.created_at + 1).await.expect("prune") >= 1);
    assert!(store.list_deliveries(Some(&session.owner_id), None, 10).await.expect("list").is_empty());
}

/// The push of a decision asks how its ask went to the same browser: the delivery of
/// the approval's ask to that target, not the decision's own, none for another target.
pub async fn an_asks_delivery_is_found_by_its_approval_and_target(store: &dyn Store) {
    let now = LATER + 10_000;
    sweep(store, now).await;
    let (_, session) = new_session(store).await;
    let (_, approval, _) = interrupted_run_in(store, &session, "req-ask-delivery", 200).await;
    let asked = events_of(store, &session.id, EventType::ApprovalRequested).await.remove(0);
    let targets = vec![("push:psub_a".to_owned(), now), ("push:psub_b".to_owned(), now + 60_000)];
    store.fan_out(&asked.id, &targets, now).await.expect("fan_out");
    assert!(
        store
            .settle_approval(&approval.id, ApprovalStatus::Resolved, Some(&Decision::Once), None, None, 300)
            .await
            .expect("settle")
    );
    let decided = events_of(store, &session.id, EventType::ApprovalResolved).await.remove(0);
    store.fan_out(&decided.id, &[("push:psub_a".to_owned(), now + 120_000)], now).await.expect("fan_out");

    let claimed = store.claim_deliveries("node-a", now, now + 10, 10).await.expect("claim");
    assert_eq!(claimed.len(), 1, "only psub_a's ask is due");
    let ok = DeliveryOutcome::Delivered { status: Some(201) };
    assert!(store.record_delivery(&claimed[0].claim, &ok, now + 1).await.expect("record"));

    let to_a = store.ask_delivery(&approval.id, "push:psub_a").await.expect("ask_delivery").expect("fanned out to a");
    assert_eq!((to_a.event.id, to_a.status), (asked.id.clone(), DeliveryStatus::Delivered));
    let to_b = store.ask_delivery(&approval.id, "push:psub_b").await.expect("ask_delivery").expect("fanned out to b");
    assert_eq!((to_b.event.id, to_b.status, to_b.attempts), (asked.id, DeliveryStatus::Pending, 0));
    assert_eq!(store.ask_delivery(&approval.id, "push:psub_c").await.expect("ask_delivery"), None);
    sweep(store, Millis::MAX - 1).await;
}

/// Racers claim one delivery each, again and again, until none is left: every
/// delivery is claimed exactly once.
pub async fn concurrent_claims_never_share_a_delivery(stores: &[Arc<dyn Store>], racers: usize) {
    let now = LATER + 1_000_000;
    let store = stores[0].as_ref();
    sweep(store, now).await;
    let (_, session) = new_session(store).await;
    let event = events_of(store, &session.id, EventType::SessionCreated).await.remove(0);
    let targets: Vec<_> = (0..racers * 2).map(|i| (format!("webhook:t{i}"), now)).collect();
    store.fan_out(&event.id, &targets, now).await.expect("fan_out");

    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let store = stores[i % stores.len()].clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let claimed = store.claim_deliveries(&format!("racer-{i}"), now, now + 60_000, 1).await;
                    let claimed = claimed.expect("claim");
                    if claimed.is_empty() {
                        return mine;
                    }
                    mine.extend(claimed.into_iter().map(|c| c.delivery.id));
                }
            })
        })
        .collect();
    let mut seen = HashSet::new();
    for task in tasks {
        for id in task.await.expect("task") {
            assert!(seen.insert(id.clone()), "{id} was claimed twice");
        }
    }
    assert_eq!(seen.len(), racers * 2, "every delivery claimed");
}

/// A configured webhook its receiver declared gone stays disabled until enabled.
pub async fn a_disabled_webhook_stays_disabled_until_enabled(store: &dyn Store) {
    let name = format!("hook-{}", EventId::new());
    store.disable_webhook(&name, "410 Gone", 100).await.expect("disable");
    store.disable_webhook(&name, "again", 200).await.expect("disable again");
    let disabled = store.disabled_webhooks().await.expect("disabled");
    let mine = disabled.iter().find(|d| d.name == name).expect("listed");
    assert_eq!((mine.disabled_at, mine.reason.as_str()), (100, "410 Gone"), "the first reason stays");
    assert!(store.enable_webhook(&name).await.expect("enable"));
    assert!(!store.enable_webhook(&name).await.expect("enable again"));
    assert!(!store.disabled_webhooks().await.expect("disabled").iter().any(|d| d.name == name));
}
