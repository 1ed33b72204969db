//! Checks of session leases: taken, renewed and released, taken over once expired,
//! and won by exactly one of racing nodes; and of the writes held to a lease's fence,
//! which stop the moment the lease changes hands.

use super::fixtures::*;
use spool_engine::{Lease, LeaseFence, Store, StoreError};
use spool_protocol::time::Millis;
use spool_protocol::*;
use std::sync::Arc;

/// The lease's life: taken when free, refused while another node holds it, extended by
/// its holder, lost on expiry (renewal then fails: the holder must stop), taken over
/// once expired, released only by its holder, and gone with its session.
pub async fn leases_are_taken_renewed_and_released(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), None);

    let a = store.acquire_lease(&session.id, "node-a", 1_000, 500).await.expect("acquire free").expect("taken");
    assert_eq!((a.session_id.clone(), a.node_id.as_str()), (session.id.clone(), "node-a"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&a, 1_500));
    assert_eq!(store.acquire_lease(&session.id, "node-b", 1_100, 500).await.expect("acquire held"), None);
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&a, 1_500), "the loser wrote nothing");
    let again = store.acquire_lease(&session.id, "node-a", 1_200, 500).await.expect("acquire ours again");
    assert_eq!(again.as_ref(), Some(&a), "extended by its own node, the lease keeps its epoch");
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&a, 1_700));

    assert!(store.renew_lease(&a, 1_600, 500).await.expect("renew"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&a, 2_100));
    let b_would_be = LeaseFence { node_id: "node-b".into(), ..a.clone() };
    assert!(!store.renew_lease(&b_would_be, 1_700, 500).await.expect("renew someone else's"));
    let older = LeaseFence { epoch: a.epoch ^ 1, ..a.clone() };
    assert!(!store.renew_lease(&older, 1_700, 500).await.expect("renew another taking's"));
    assert!(!store.release_lease(&session.id, "node-b").await.expect("release someone else's"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&a, 2_100));

    // node-a stops renewing: at its expiry the lease is listed as expired, its own late
    // renewal fails, and another node takes it over, with a new epoch.
    let session_id = &session.id;
    let expired_at = |now: Millis| async move {
        let all = store.expired_leases(now).await.expect("expired_leases");
        assert!(all.windows(2).all(|w| w[0].expires_at <= w[1].expires_at), "oldest expiry first");
        all.into_iter().filter(|l| l.session_id == *session_id).collect::<Vec<_>>()
    };
    assert_eq!(expired_at(2_099).await, vec![], "live until its expiry");
    assert_eq!(expired_at(2_100).await, lease_of(&a, 2_100).into_iter().collect::<Vec<_>>());
    assert!(!store.renew_lease(&a, 2_100, 500).await.expect("renew expired"));
    let b = store.acquire_lease(&session.id, "node-b", 2_200, 500).await.expect("take over").expect("taken over");
    assert_ne!(b.epoch, a.epoch, "a lease that changes hands gets a new epoch");
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&b, 2_700));
    assert_eq!(expired_at(2_200).await, vec![]);
    assert_eq!(store.acquire_lease(&session.id, "node-a", 2_300, 500).await.expect("the old holder is refused"), None);

    assert!(store.release_lease(&session.id, "node-b").await.expect("release"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), None);
    assert!(!store.release_lease(&session.id, "node-b").await.expect("release twice"));
    let a2 = store.acquire_lease(&session.id, "node-a", 2_400, 500).await.expect("acquire released").expect("taken");
    assert_ne!(a2.epoch, a.epoch, "taken afresh after a release: node-a's earlier taking is not this one");

    // Leases are per session, and go with their session.
    let (_, other) = new_session(store).await;
    let o =
        store.acquire_lease(&other.id, "node-b", 2_400, 500).await.expect("acquire another session").expect("taken");
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), None);
    assert_eq!(store.get_lease(&other.id).await.expect("get_lease"), lease_of(&o, 2_900));
    // A lease for a session that does not exist is refused, not stored.
    assert!(store.acquire_lease(&SessionId::new(), "node-a", 2_400, 500).await.is_err());
}

fn lease_of(fence: &LeaseFence, expires_at: Millis) -> Option<Lease> {
    Some(Lease { session_id: fence.session_id.clone(), node_id: fence.node_id.clone(), expires_at, epoch: fence.epoch })
}

/// A run's writes go through a store held to its lease's taking: they land while that
/// taking holds the lease (expired or not: nobody else acted), and once another node
/// took it over, or it was given up, each fails `Fenced` and writes nothing — the
/// message, the settled run, the draft, the session record, its notes, a steer.
pub async fn writes_held_to_a_lease_stop_when_it_changes_hands(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let a = store.acquire_lease(&session.id, "node-a", 1_000, 500).await.expect("acquire").expect("taken");
    let held = store.fenced(a.clone());
    let run = run_in(&session, "fenced", RunStatus::Running);
    let prompt = prompt_of(&run, MessageId::new(), "go");
    assert!(matches!(held.start_run(&run, &prompt).await, Ok(spool_engine::RunInsert::Created)));
    let answer = indexed(1, Message::user_text("an answer", 1_000));
    held.insert_message(&session.id, &session.owner_id, &answer).await.expect("held: written");
    // Expired, not taken over: still this taking's, so its writes still land.
    let late = indexed(2, Message::user_text("late but first", 1_000));
    held.insert_message(&session.id, &session.owner_id, &late).await.expect("expired but not taken over");

    let b = store.acquire_lease(&session.id, "node-b", 2_000, 500).await.expect("take over").expect("taken over");
    let fenced = |what: &str, result: Result<(), StoreError>| {
        assert!(matches!(result, Err(StoreError::Fenced(_))), "{what}: {result:?}");
    };
    let stale = indexed(3, Message::user_text("from the node that lost", 2_000));
    fenced("a message", held.insert_message(&session.id, &session.owner_id, &stale).await);
    let mut settled = run.clone();
    settled.status = RunStatus::Failed;
    settled.error = Some(RunError { code: "storage_error".into(), message: "late".into() });
    fenced("the settled run", held.update_run(&settled).await);
    let mut renamed = store.get_session(&session.id).await.expect("get").expect("session");
    renamed.title = "renamed by the node that lost".into();
    fenced("the session record", held.update_session(&renamed).await);
    let memory = SessionMemory { summary: Some("stale".into()), ..SessionMemory::default() };
    fenced("the memory", held.put_memory(&session.id, &session.owner_id, &memory).await);
    let draft = spool_engine::Draft {
        session_id: session.id.clone(),
        run_id: run.id.clone(),
        owner_id: session.owner_id.clone(),
        message: indexed(3, Message::user_text("draft", 2_000)),
    };
    assert!(matches!(held.append_draft(&draft, 0, &[]).await, Err(StoreError::Fenced(_))));
    fenced("a draft's deletion", held.delete_draft(&session.id).await);

    // Nothing of it landed; the new holder's own writes do.
    assert_eq!(store.count_messages(&session.id).await.expect("count"), 3);
    assert_eq!(store.get_run(&run.id).await.expect("get").expect("run").status, RunStatus::Running);
    assert_eq!(store.get_session(&session.id).await.expect("get").expect("session").title, session.title);
    assert_eq!(store.get_memory(&session.id).await.expect("memory"), SessionMemory::default());
    assert_eq!(store.orphaned_drafts().await.expect("drafts").len(), 0);
    store.fenced(b.clone()).insert_message(&session.id, &session.owner_id, &stale).await.expect("the new holder");
    // Given up: nobody's writes are held to it any more.
    assert!(store.release_lease(&session.id, "node-b").await.expect("release"));
    let next = indexed(4, Message::user_text("after the release", 3_000));
    let result = store.fenced(b).insert_message(&session.id, &session.owner_id, &next).await;
    fenced("after the release", result);
}

/// Several nodes wanting one session at once (a prompt reaching each): exactly one
/// takes it, and the stored lease names that one; after it expires the race repeats
/// with one new winner.
pub async fn concurrent_lease_acquisitions_have_exactly_one_winner(stores: &[Arc<dyn Store>], racers: usize) {
    let (_, session) = new_session(stores[0].as_ref()).await;
    let race = |now: Millis| {
        let tasks: Vec<_> = (0..racers)
            .map(|i| {
                let store = stores[i % stores.len()].clone();
                let id = session.id.clone();
                tokio::spawn(async move {
                    let node = format!("node-{i}");
                    let won = store.acquire_lease(&id, &node, now, 1_000).await.expect("acquire_lease");
                    let won = won.inspect(|fence| assert_eq!(fence.node_id, node));
                    (won, node)
                })
            })
            .collect::<Vec<_>>();
        async move {
            let mut winners = Vec::new();
            for task in tasks {
                let (won, _) = task.await.expect("task");
                winners.extend(won);
            }
            winners
        }
    };
    for now in [10_000, 11_000] {
        let winners = race(now).await;
        assert_eq!(winners.len(), 1, "exactly one node takes the lease at {now}: {winners:?}");
        assert_eq!(
            stores[0].get_lease(&session.id).await.expect("get_lease"),
            lease_of(&winners[0], now + 1_000),
            "the stored lease is the winner's, with its epoch"
        );
    }
}

/// A node writing through its fence while another node takes the lease over (as a
/// reaper does once it expired): every write the old holder got through committed
/// before the takeover — the new holder, reading right after it, sees all of them —
/// and none lands after it. The database orders the two; no write slips in between.
pub async fn a_fenced_writer_racing_a_takeover_lands_nothing_after_it(stores: &[Arc<dyn Store>]) {
    let store = stores[0].clone();
    let (_, session) = new_session(store.as_ref()).await;
    let a = store.acquire_lease(&session.id, "node-a", 1_000, 500).await.expect("acquire").expect("taken");
    let held = stores[stores.len() - 1].fenced(a);
    let (id, owner) = (session.id.clone(), session.owner_id.clone());
    let writer = tokio::spawn(async move {
        let mut index = 0;
        loop {
            let message = indexed(index, Message::user_text("written while held", 1_000));
            match held.insert_message(&id, &owner, &message).await {
                Ok(()) => index += 1,
                Err(StoreError::Fenced(_)) => return index,
                Err(e) => panic!("message {index}: {e}"),
            }
        }
    });
    while store.count_messages(&session.id).await.expect("count") < 5 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    store.acquire_lease(&session.id, "node-b", 2_000, 500).await.expect("take over").expect("taken over");
    let seen = store.count_messages(&session.id).await.expect("count");
    let written = tokio::time::timeout(std::time::Duration::from_secs(30), writer)
        .await
        .expect("the old holder's next write is refused")
        .expect("writer");
    assert_eq!(written, seen, "what the old holder wrote is what the new one saw at its takeover");
    assert_eq!(store.count_messages(&session.id).await.expect("count"), seen, "nothing landed after the takeover");
}
