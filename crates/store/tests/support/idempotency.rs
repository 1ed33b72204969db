//! Checks of idempotency keys: the first response replayed, and one winner of racing
//! claims.

use super::fixtures::*;
use spool_engine::{IdempotencyClaim, Store, StoreError};
use std::sync::Arc;

pub async fn idempotency_keys_replay_the_first_response(store: &dyn Store) {
    let scope = unique_name("user");
    let claim = |scope: &str, key: &str| {
        let (scope, key) = (scope.to_owned(), key.to_owned());
        async move { store.claim_idempotency(&scope, &key, 1_000).await.expect("claim_idempotency") }
    };

    assert_eq!(claim(&scope, "k1").await, IdempotencyClaim::Claimed);
    assert_eq!(claim(&scope, "k1").await, IdempotencyClaim::InProgress, "the first request is still working");
    // Keys are per scope: the same key under another scope is free.
    assert_eq!(claim(&unique_name("user"), "k1").await, IdempotencyClaim::Claimed);

    // A body that a lossy store would mangle: escapes, CRLF, tabs, non-ASCII,
    // trailing whitespace, and enough of it to leave any inline limit behind.
    let body = format!("{{\"title\":\"\\\"ünï\\\" 🦀\"}}\r\n\t  {}  \n", "x".repeat(100_000));
    store.complete_idempotency(&scope, "k1", &body).await.expect("complete_idempotency");
    match claim(&scope, "k1").await {
        IdempotencyClaim::Done(stored) => assert_eq!(stored.as_bytes(), body.as_bytes(), "byte for byte"),
        other => panic!("a completed key replays its response, got {other:?}"),
    }

    // The response is written once; a second completion and a late release change nothing.
    assert!(matches!(store.complete_idempotency(&scope, "k1", "different").await, Err(StoreError::Conflict(_))));
    store.release_idempotency(&scope, "k1").await.expect("release_idempotency");
    assert_eq!(claim(&scope, "k1").await, IdempotencyClaim::Done(body.clone()));

    // A failed request releases its claim and the retry runs it again.
    assert_eq!(claim(&scope, "k2").await, IdempotencyClaim::Claimed);
    store.release_idempotency(&scope, "k2").await.expect("release_idempotency");
    assert_eq!(claim(&scope, "k2").await, IdempotencyClaim::Claimed, "released keys can be claimed again");
    assert_eq!(claim(&scope, "k2").await, IdempotencyClaim::InProgress);
    // Releasing or completing a key nobody claimed writes nothing.
    store.release_idempotency(&scope, "never").await.expect("release unclaimed");
    assert!(matches!(store.complete_idempotency(&scope, "never", "different").await, Err(StoreError::Conflict(_))));
    assert_eq!(claim(&scope, "never").await, IdempotencyClaim::Claimed);
}

/// A client retrying a request over a flaky network: one retry does the work, every
/// other one sees it in progress, and after completion every one sees its response.
pub async fn concurrent_claims_of_one_key_have_exactly_one_winner(stores: &[Arc<dyn Store>], racers: usize) {
    let store = &stores[0];
    let scope = unique_name("user");
    let race = || async {
        let tasks: Vec<_> = (0..racers)
            .map(|i| {
                let store = stores[i % stores.len()].clone();
                let scope = scope.clone();
                tokio::spawn(async move { store.claim_idempotency(&scope, "retry", 1_000).await.expect("claim") })
            })
            .collect();
        let mut claims = Vec::new();
        for task in tasks {
            claims.push(task.await.expect("task"));
        }
        claims
    };

    let claims = race().await;
    assert_eq!(claims.iter().filter(|c| **c == IdempotencyClaim::Claimed).count(), 1, "exactly one claim: {claims:?}");
    assert_eq!(claims.iter().filter(|c| **c == IdempotencyClaim::InProgress).count(), racers - 1);

    let answer = "{\"ok\":true}";
    store.complete_idempotency(&scope, "retry", answer).await.expect("complete_idempotency");
    let claims = race().await;
    assert!(claims.iter().all(|c| *c == IdempotencyClaim::Done(answer.into())), "{claims:?}");
}
