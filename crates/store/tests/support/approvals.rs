//! Checks of approvals: written together with the run they interrupt, listed while
//! pending, settled and superseded exactly once, even when raced.

use super::fixtures::*;
use serde_json::json;
use spool_engine::{Store, Supersede};
use spool_protocol::time::Millis;
use spool_protocol::*;
use std::sync::Arc;

pub async fn interrupt_run_writes_the_approval_and_the_run_together(store: &dyn Store) {
    let (project, session) = new_session(store).await;
    assert_eq!(store.interrupted_run(&session.id).await.expect("interrupted_run"), None);
    let (run, approval, checkpoint) = interrupted_run_in(store, &session, "req-interrupt", 200).await;

    assert_eq!(store.get_run(&run.id).await.expect("get_run").expect("stored").status, RunStatus::Interrupted);
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(run.clone()), "written as update_run would");
    assert_eq!(stored_approval(store, &approval.id).await, Some((approval.clone(), checkpoint)));
    assert_eq!(store.interrupted_run(&session.id).await.expect("interrupted_run"), Some(run.clone()));
    assert_eq!(store.get_approval(&ApprovalId::new()).await.expect("get absent"), None);

    // Another session's interrupted run is not this one's; a running run is not interrupted.
    let other = session_in(&project, 2_000, false);
    store.insert_session(&other).await.expect("insert_session");
    store.insert_run(&run_in(&other, "req-running", RunStatus::Running)).await.expect("insert_run");
    assert_eq!(store.interrupted_run(&other.id).await.expect("interrupted_run"), None);

    // Start-up recovery fails running runs; an interrupted one waits for its person.
    let crash = RunError { code: "server_restarted".into(), message: "the server restarted during this run".into() };
    store.fail_running_runs(&crash, 9_000, &[]).await.expect("fail_running_runs");
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(run.clone()), "still interrupted");
    assert_eq!(store.interrupted_run(&session.id).await.expect("interrupted_run"), Some(run));
    assert_eq!(stored_approval(store, &approval.id).await.expect("stored").0.status, ApprovalStatus::Pending);

    // All or nothing: when the run cannot be written (a token count no database
    // integer holds), the approval inserted before it in the transaction is gone too.
    let (_, lonely) = new_session(store).await;
    let running = run_in(&lonely, "req-atomic", RunStatus::Running);
    store.insert_run(&running).await.expect("insert_run");
    let unwritable = Run {
        status: RunStatus::Interrupted,
        usage: Usage { input: u64::MAX, output: 0, ..Usage::default() },
        ..running.clone()
    };
    let orphan = approval_for(&unwritable, 300);
    assert!(store.interrupt_run(&unwritable, &orphan, &json!({})).await.is_err());
    assert_eq!(stored_approval(store, &orphan.id).await, None, "the approval is rolled back with the run");
    assert_eq!(store.get_run(&running.id).await.expect("get_run"), Some(running.clone()));
    assert_eq!(store.interrupted_run(&lonely.id).await.expect("interrupted_run"), None);

    // And the other way: an approval that cannot be stored (its id is taken) leaves
    // the run as it was.
    let interrupted = Run { status: RunStatus::Interrupted, updated_at: 400, ..running.clone() };
    let taken = Approval { id: approval.id.clone(), ..approval_for(&interrupted, 400) };
    assert!(store.interrupt_run(&interrupted, &taken, &json!({})).await.is_err());
    assert_eq!(store.get_run(&running.id).await.expect("get_run"), Some(running));
    assert_eq!(store.pending_approvals(&lonely.id).await.expect("pending"), vec![]);
}

pub async fn pending_approvals_are_listed_oldest_first(store: &dyn Store) {
    let (project, session) = new_session(store).await;
    let run = Run { status: RunStatus::Interrupted, ..run_in(&session, "req-pending", RunStatus::Running) };
    store.insert_run(&run).await.expect("insert_run");
    // One run can stop several times; written newest first, so order comes from created_at.
    let [late, early, middle] = [300, 100, 200].map(|at| approval_for(&run, at));
    for approval in [&late, &early, &middle] {
        store.interrupt_run(&run, approval, &checkpoint_for(approval)).await.expect("interrupt_run");
    }
    let other = session_in(&project, 2_000, false);
    store.insert_session(&other).await.expect("insert_session");
    let (_, elsewhere, _) = interrupted_run_in(store, &other, "req-elsewhere", 150).await;

    assert_eq!(
        store.pending_approvals(&session.id).await.expect("pending"),
        vec![early.clone(), middle.clone(), late.clone()]
    );
    assert_eq!(store.pending_approvals(&other.id).await.expect("pending"), vec![elsewhere.clone()]);
    assert_eq!(store.pending_approvals(&SessionId::new()).await.expect("pending"), vec![]);

    assert!(store.settle_approval(&middle.id, ApprovalStatus::Expired, None, None, None, 250).await.expect("settle"));
    assert_eq!(store.pending_approvals(&session.id).await.expect("pending"), vec![early.clone(), late.clone()]);

    // all_pending_approvals sees every session, including earlier checks' and passes',
    // so only our rows are compared exactly; the whole list must still be in order.
    let all = store.all_pending_approvals().await.expect("all_pending_approvals");
    let ours = [&early, &middle, &late, &elsewhere].map(|a| a.id.clone());
    let mine: Vec<Approval> = all.iter().filter(|a| ours.contains(&a.id)).cloned().collect();
    assert_eq!(mine, vec![early, elsewhere, late]);
    assert!(all.iter().all(|a| a.status == ApprovalStatus::Pending));
    assert!(
        all.windows(2).all(|w| (w[0].created_at, w[0].id.as_str()) <= (w[1].created_at, w[1].id.as_str())),
        "oldest first"
    );
}

pub async fn waiting_sessions_are_those_with_a_pending_approval(store: &dyn Store) {
    let (project, parked) = new_session(store).await;
    let idle = session_in(&project, 2_000, false);
    store.insert_session(&idle).await.expect("insert_session");
    assert_eq!(store.waiting_sessions(&project.id).await.expect("waiting"), vec![]);
    // Two pending approvals of one session list it once.
    let (run, first, _) = interrupted_run_in(store, &parked, "req-waiting", 100).await;
    let second = approval_for(&run, 200);
    store.interrupt_run(&run, &second, &checkpoint_for(&second)).await.expect("interrupt_run");
    let (_, elsewhere) = new_session(store).await;
    interrupted_run_in(store, &elsewhere, "req-waiting-elsewhere", 100).await;

    assert_eq!(store.waiting_sessions(&project.id).await.expect("waiting"), vec![parked.id.clone()]);
    assert_eq!(store.waiting_sessions(&elsewhere.project_id).await.expect("waiting"), vec![elsewhere.id.clone()]);
    assert!(store.settle_approval(&first.id, ApprovalStatus::Expired, None, None, None, 250).await.expect("settle"));
    assert_eq!(store.waiting_sessions(&project.id).await.expect("waiting"), vec![parked.id.clone()], "one still waits");
    assert!(store.settle_approval(&second.id, ApprovalStatus::Cancelled, None, None, None, 260).await.expect("settle"));
    assert_eq!(store.waiting_sessions(&project.id).await.expect("waiting"), vec![]);
}

pub async fn settle_approval_decides_once(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let (_, approval, checkpoint) = interrupted_run_in(store, &session, "req-settle", 200).await;
    let alice = new_user(store).await;
    let mallory = new_user(store).await;

    let fill = Decision::Fill(json!({"command": "rm -rf build/tmp", "why": "narrower"}));
    assert!(
        store
            .settle_approval(&approval.id, ApprovalStatus::Resolved, Some(&fill), Some("only tmp"), Some(&alice), 500)
            .await
            .expect("settle")
    );
    let resolved = Approval {
        status: ApprovalStatus::Resolved,
        decision: Some(fill),
        message: Some("only tmp".into()),
        actor: Some(alice),
        resolved_at: Some(500),
        ..approval.clone()
    };
    assert_eq!(stored_approval(store, &approval.id).await, Some((resolved.clone(), checkpoint.clone())));

    // The loser of the race changes nothing, whatever it carried.
    assert!(
        !store
            .settle_approval(
                &approval.id,
                ApprovalStatus::Cancelled,
                Some(&Decision::Reject),
                Some("no"),
                Some(&mallory),
                600
            )
            .await
            .expect("settle again")
    );
    assert!(
        !store
            .settle_approval(&approval.id, ApprovalStatus::Expired, None, None, None, 700)
            .await
            .expect("expire after the decision")
    );
    assert_eq!(stored_approval(store, &approval.id).await, Some((resolved, checkpoint)));
    assert!(
        !store
            .settle_approval(&ApprovalId::new(), ApprovalStatus::Resolved, Some(&Decision::Once), None, None, 800)
            .await
            .expect("settle absent")
    );

    // Every decision comes back as it went in, and expiry records no decision or actor.
    for (i, decision) in [Decision::Once, Decision::Always, Decision::Reject].into_iter().enumerate() {
        let (_, approval, _) = interrupted_run_in(store, &session, &format!("req-decision-{i}"), 300).await;
        assert!(
            store
                .settle_approval(
                    &approval.id,
                    ApprovalStatus::Resolved,
                    Some(&decision),
                    None,
                    Some(&session.owner_id),
                    400
                )
                .await
                .expect("settle")
        );
        let stored = stored_approval(store, &approval.id).await.expect("stored").0;
        assert_eq!((stored.decision, stored.message), (Some(decision), None));
    }
    let (_, expiring, _) = interrupted_run_in(store, &session, "req-expire", 300).await;
    assert!(store.settle_approval(&expiring.id, ApprovalStatus::Expired, None, None, None, 900).await.expect("expire"));
    let expected = Approval { status: ApprovalStatus::Expired, resolved_at: Some(900), ..expiring.clone() };
    assert_eq!(stored_approval(store, &expiring.id).await.expect("stored").0, expected);
    assert_eq!(store.pending_approvals(&session.id).await.expect("pending"), vec![]);
}

/// Re-check before acting: an approval whose call's file changed is replaced, in one
/// step, by a new pending one — only from the status the caller saw, and only while its
/// call has not started; the loser writes nothing, not even the new approval.
pub async fn supersede_replaces_an_approval_whose_call_has_not_started(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let (run, old, _) = interrupted_run_in(store, &session, "req-supersede", 200).await;
    let alice = new_user(store).await;
    let replacement = Approval { tool_call_id: old.tool_call_id.clone(), ..approval_for(&run, 201) };
    let checkpoint = json!({"resource": {"path": "a.txt", "fingerprint": "sha256:00"}});
    let run = Run { updated_at: 201, ..run };
    let from_pending = Supersede { id: &old.id, from: ApprovalStatus::Pending, actor: Some(&alice), at: 201 };
    assert!(store.supersede_approval(&from_pending, &run, &replacement, &checkpoint).await.expect("supersede"));
    let superseded = Approval {
        status: ApprovalStatus::Superseded,
        actor: Some(alice.clone()),
        resolved_at: Some(201),
        ..old.clone()
    };
    assert_eq!(stored_approval(store, &old.id).await.expect("old").0, superseded);
    assert_eq!(stored_approval(store, &replacement.id).await, Some((replacement.clone(), checkpoint.clone())));
    assert_eq!(store.pending_approvals(&session.id).await.expect("pending"), vec![replacement.clone()]);
    assert_eq!(store.get_run(&run.id).await.expect("run"), Some(run.clone()));

    // Twice, or from a status it no longer has: nothing is written.
    let another = approval_for(&run, 202);
    assert!(!store.supersede_approval(&from_pending, &run, &another, &checkpoint).await.expect("again"));
    assert_eq!(stored_approval(store, &another.id).await, None);

    // A decided call (a crash kept it from starting) may be superseded; a started one never.
    assert!(
        store
            .settle_approval(&replacement.id, ApprovalStatus::Resolved, Some(&Decision::Once), None, None, 203)
            .await
            .expect("decide")
    );
    store.mark_call_started(&replacement.id, 204).await.expect("started");
    let from_resolved = Supersede { id: &replacement.id, from: ApprovalStatus::Resolved, actor: None, at: 205 };
    assert!(!store.supersede_approval(&from_resolved, &run, &another, &checkpoint).await.expect("started"));
    assert_eq!(stored_approval(store, &replacement.id).await.expect("kept").0.status, ApprovalStatus::Resolved);
    assert_eq!(stored_approval(store, &another.id).await, None);
    let (run, decided, _) = interrupted_run_in(store, &session, "req-supersede-decided", 300).await;
    assert!(
        store
            .settle_approval(&decided.id, ApprovalStatus::Resolved, Some(&Decision::Once), None, None, 301)
            .await
            .expect("decide")
    );
    let from_resolved = Supersede { id: &decided.id, from: ApprovalStatus::Resolved, actor: None, at: 302 };
    let asked_again = approval_for(&run, 302);
    assert!(store.supersede_approval(&from_resolved, &run, &asked_again, &checkpoint).await.expect("supersede"));
    let stored = stored_approval(store, &decided.id).await.expect("old").0;
    assert_eq!((stored.status, stored.decision), (ApprovalStatus::Superseded, Some(Decision::Once)));
}

/// Many deciders at once (two tabs, a retry, the expiry timer): exactly one wins and
/// the stored outcome is the winner's.
pub async fn concurrent_settles_have_exactly_one_winner(stores: &[Arc<dyn Store>], racers: usize) {
    let store = &stores[0];
    let (_, session) = new_session(store.as_ref()).await;
    let (_, approval, _) = interrupted_run_in(store.as_ref(), &session, "req-race", 200).await;

    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let store = stores[i % stores.len()].clone();
            let id = approval.id.clone();
            tokio::spawn(async move {
                let actor = UserId::new();
                let decision = if i % 2 == 0 { Decision::Once } else { Decision::Reject };
                let message = format!("racer {i}");
                let won = store
                    .settle_approval(
                        &id,
                        ApprovalStatus::Resolved,
                        Some(&decision),
                        Some(&message),
                        Some(&actor),
                        1_000 + i as Millis,
                    )
                    .await
                    .expect("settle_approval");
                (won, decision, message, actor, 1_000 + i as Millis)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        let outcome = task.await.expect("task");
        if outcome.0 {
            winners.push(outcome);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one settle wins");
    let (_, decision, message, actor, at) = winners.remove(0);
    let stored = stored_approval(store.as_ref(), &approval.id).await.expect("stored").0;
    assert_eq!(
        (stored.status, stored.decision, stored.message, stored.actor, stored.resolved_at),
        (ApprovalStatus::Resolved, Some(decision), Some(message), Some(actor), Some(at)),
        "the stored outcome is the winner's"
    );
}
