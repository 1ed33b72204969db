//! Checks of session leases: taken, renewed and released, taken over once expired,
//! and won by exactly one of racing nodes.

use super::fixtures::*;
use spool_engine::{Lease, Store};
use spool_protocol::time::Millis;
use spool_protocol::*;
use std::sync::Arc;

/// The lease's life: taken when free, refused while another node holds it, extended by
/// its holder, lost on expiry (renewal then fails: the holder must stop), taken over
/// once expired, released only by its holder, and gone with its session.
pub async fn leases_are_taken_renewed_and_released(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), None);

    assert!(store.acquire_lease(&session.id, "node-a", 1_000, 500).await.expect("acquire free"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&session, "node-a", 1_500));
    assert!(!store.acquire_lease(&session.id, "node-b", 1_100, 500).await.expect("acquire held"));
    assert_eq!(
        store.get_lease(&session.id).await.expect("get_lease"),
        lease_of(&session, "node-a", 1_500),
        "the loser wrote nothing"
    );
    assert!(store.acquire_lease(&session.id, "node-a", 1_200, 500).await.expect("acquire ours again"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&session, "node-a", 1_700));

    assert!(store.renew_lease(&session.id, "node-a", 1_600, 500).await.expect("renew"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&session, "node-a", 2_100));
    assert!(!store.renew_lease(&session.id, "node-b", 1_700, 500).await.expect("renew someone else's"));
    assert!(!store.release_lease(&session.id, "node-b").await.expect("release someone else's"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&session, "node-a", 2_100));

    // node-a stops renewing: at its expiry the lease is listed as expired, its own late
    // renewal fails, and another node takes it over.
    let session_id = &session.id;
    let expired_at = |now: Millis| async move {
        let all = store.expired_leases(now).await.expect("expired_leases");
        assert!(all.windows(2).all(|w| w[0].expires_at <= w[1].expires_at), "oldest expiry first");
        all.into_iter().filter(|l| l.session_id == *session_id).collect::<Vec<_>>()
    };
    assert_eq!(expired_at(2_099).await, vec![], "live until its expiry");
    assert_eq!(expired_at(2_100).await, lease_of(&session, "node-a", 2_100).into_iter().collect::<Vec<_>>());
    assert!(!store.renew_lease(&session.id, "node-a", 2_100, 500).await.expect("renew expired"));
    assert!(store.acquire_lease(&session.id, "node-b", 2_200, 500).await.expect("take over"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), lease_of(&session, "node-b", 2_700));
    assert_eq!(expired_at(2_200).await, vec![]);
    assert!(!store.acquire_lease(&session.id, "node-a", 2_300, 500).await.expect("the old holder is refused"));

    assert!(store.release_lease(&session.id, "node-b").await.expect("release"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), None);
    assert!(!store.release_lease(&session.id, "node-b").await.expect("release twice"));
    assert!(store.acquire_lease(&session.id, "node-a", 2_400, 500).await.expect("acquire released"));

    // Leases are per session, and go with their session.
    let (_, other) = new_session(store).await;
    assert!(store.acquire_lease(&other.id, "node-b", 2_400, 500).await.expect("acquire another session"));
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
    assert_eq!(store.get_lease(&session.id).await.expect("get_lease"), None);
    assert_eq!(store.get_lease(&other.id).await.expect("get_lease"), lease_of(&other, "node-b", 2_900));
    // A lease for a session that does not exist is refused, not stored.
    assert!(store.acquire_lease(&SessionId::new(), "node-a", 2_400, 500).await.is_err());
}

fn lease_of(session: &Session, node: &str, expires_at: Millis) -> Option<Lease> {
    Some(Lease { session_id: session.id.clone(), node_id: node.into(), expires_at })
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
                    (won, node)
                })
            })
            .collect::<Vec<_>>();
        async move {
            let mut winners = Vec::new();
            for task in tasks {
                let (won, node) = task.await.expect("task");
                if won {
                    winners.push(node);
                }
            }
            winners
        }
    };
    for now in [10_000, 11_000] {
        let winners = race(now).await;
        assert_eq!(winners.len(), 1, "exactly one node takes the lease at {now}: {winners:?}");
        assert_eq!(
            stores[0].get_lease(&session.id).await.expect("get_lease"),
            lease_of(&session, &winners[0], now + 1_000),
            "the stored lease is the winner's"
        );
    }
}
