//! Checks of Web Push's records: a shared key is kept from its first writer, and a
//! browser's subscription is keyed by its endpoint.

use super::fixtures::*;
use spool_engine::Store;
use spool_engine::store::PushSubscription;

pub async fn a_server_key_keeps_its_first_writers_secret(store: &dyn Store) {
    let name = unique_name("key");
    assert_eq!(store.server_key(&name, b"first", 1).await.expect("store"), b"first");
    assert_eq!(store.server_key(&name, b"second", 2).await.expect("read"), b"first", "every caller gets the first");
    assert!(store.delete_server_key(&name).await.expect("delete"));
    assert_eq!(store.server_key(&name, b"third", 3).await.expect("rotated"), b"third", "rotation stores a new one");
}

pub async fn a_push_subscription_is_kept_per_endpoint_and_removed_with_its_login(store: &dyn Store) {
    let owner = store.ensure_user(&unique_name("push")).await.expect("user");
    let other = store.ensure_user(&unique_name("push2")).await.expect("user");
    let endpoint = format!("https://push.example/{}", unique_name("ep"));
    let first = PushSubscription {
        id: unique_name("psub"),
        owner_id: owner.clone(),
        login_id: Some(unique_name("lgn")),
        endpoint: endpoint.clone(),
        p256dh: "key-1".into(),
        auth: "auth-1".into(),
        user_agent: Some("Firefox".into()),
        created_at: 10,
        last_ok_at: None,
        failures: 0,
    };
    assert_eq!(store.save_push_subscription(&first).await.expect("save"), first);
    // The same browser subscribing again (new keys, another login): one row, same id.
    let again = PushSubscription { id: unique_name("psub"), p256dh: "key-2".into(), created_at: 20, ..first.clone() };
    let kept = store.save_push_subscription(&again).await.expect("save again");
    assert_eq!((kept.id.as_str(), kept.p256dh.as_str(), kept.created_at), (first.id.as_str(), "key-2", 10));
    assert_eq!(store.get_push_subscription(&first.id).await.expect("get"), Some(kept.clone()));
    assert_eq!(store.push_subscriptions(&owner).await.expect("list"), std::slice::from_ref(&kept));
    assert_eq!(store.push_subscriptions(&other).await.expect("list"), []);

    store.record_push_attempt(&first.id, false, 30).await.expect("failure");
    store.record_push_attempt(&first.id, false, 31).await.expect("failure");
    let failed = store.get_push_subscription(&first.id).await.expect("get").expect("there");
    assert_eq!((failed.failures, failed.last_ok_at), (2, None));
    store.record_push_attempt(&first.id, true, 40).await.expect("success");
    let ok = store.get_push_subscription(&first.id).await.expect("get").expect("there");
    assert_eq!((ok.failures, ok.last_ok_at), (0, Some(40)));

    let login = first.login_id.clone().expect("a login");
    assert_eq!(store.delete_push_subscriptions_of(&login).await.expect("logout"), 1);
    assert_eq!(store.get_push_subscription(&first.id).await.expect("get"), None);
    assert!(!store.delete_push_subscription(&first.id).await.expect("delete"), "already gone");
}
