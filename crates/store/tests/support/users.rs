//! Checks of users and their credentials: users made once, tokens found by hash until
//! revoked, login sessions that end, and the sticky auth flag (with the listeners
//! `spool auth disable` reads).

use super::fixtures::*;
use spool_engine::{Listener, LoginSession, Store};
use spool_protocol::*;

pub async fn users_are_created_once(store: &dyn Store) {
    let name = unique_name("alice");
    let first = store.ensure_user(&name).await.expect("ensure_user");
    let again = store.ensure_user(&name).await.expect("ensure_user again");
    assert_eq!(first, again, "the same name must map to the same user");
    let other = store.ensure_user(&unique_name("bob")).await.expect("ensure_user bob");
    assert_ne!(first, other);
}

pub async fn tokens_are_found_by_hash_until_revoked(store: &dyn Store) {
    let name = unique_name("tok");
    let user = store.ensure_user(&name).await.expect("user");
    let hash = format!("{:064x}", u128::from_str_radix(&UserId::new().as_str()[4..20], 36).unwrap_or(7));
    let token = ApiToken {
        id: TokenId::new(),
        user_id: user.clone(),
        user_name: name.clone(),
        hash: hash.clone(),
        created_at: 10,
        revoked_at: None,
    };
    store.insert_token(&token).await.expect("insert");
    assert_eq!(store.find_token(&hash).await.expect("find"), Some(token.clone()));
    assert_eq!(store.find_token(&"0".repeat(64)).await.expect("find"), None);
    assert!(store.list_tokens().await.expect("list").contains(&token));
    assert!(store.revoke_token(&token.id, 20).await.expect("revoke"));
    assert!(!store.revoke_token(&token.id, 30).await.expect("revoke twice"), "revoking twice changes nothing");
    assert_eq!(store.find_token(&hash).await.expect("find"), None, "a revoked token authenticates nobody");
    let listed = store.list_tokens().await.expect("list");
    assert_eq!(listed.iter().find(|t| t.id == token.id).and_then(|t| t.revoked_at), Some(20));
}

/// A 64-hex-digit hash no other check uses.
fn unique_hash() -> String {
    use std::fmt::Write;
    UserId::new().as_str().bytes().chain(UserId::new().as_str().bytes()).take(32).fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

pub async fn login_sessions_end_by_logout_expiry_and_revocation(store: &dyn Store) {
    let name = unique_name("login");
    let user = store.ensure_user(&name).await.expect("user");
    let token = ApiToken {
        id: TokenId::new(),
        user_id: user.clone(),
        user_name: name,
        hash: unique_hash(),
        created_at: 1_000,
        revoked_at: None,
    };
    store.insert_token(&token).await.expect("token");
    let login = |expires_at| LoginSession {
        id: LoginId::new(),
        token_id: token.id.clone(),
        user_id: user.clone(),
        hash: unique_hash(),
        created_at: 1_000,
        expires_at,
        ended_at: None,
    };
    let (kept, ended, expiring) = (login(9_000), login(9_000), login(3_000));
    for l in [&kept, &ended, &expiring] {
        store.insert_login(l).await.expect("insert login");
    }
    assert_eq!(store.find_login(&kept.hash, 2_000).await.expect("find"), Some(kept.clone()));
    assert_eq!(store.find_login(&expiring.hash, 3_000).await.expect("find"), None, "expired at 3000");
    assert!(store.end_login(&ended.id, 2_500).await.expect("end"));
    assert!(!store.end_login(&ended.id, 2_600).await.expect("end twice"), "ending twice changes nothing");
    assert_eq!(store.find_login(&ended.hash, 2_700).await.expect("find"), None, "logged out");
    let since = store.credentials_ended_since(2_000, 3_500).await.expect("ended since");
    assert!(since.contains(&ended.id.to_string()) && since.contains(&expiring.id.to_string()), "{since:?}");
    assert!(!since.contains(&kept.id.to_string()), "{since:?}");
    let later = store.credentials_ended_since(3_000, 3_500).await.expect("ended since");
    assert!(!later.contains(&ended.id.to_string()) && !later.contains(&expiring.id.to_string()), "{later:?}");

    assert!(store.revoke_token(&token.id, 4_000).await.expect("revoke"));
    assert_eq!(store.find_login(&kept.hash, 4_001).await.expect("find"), None, "a revoked token's logins end");
    let since = store.credentials_ended_since(3_999, 4_001).await.expect("ended since");
    assert!(since.contains(&token.id.to_string()), "{since:?}");
}

pub async fn the_auth_flag_and_listeners_are_kept(store: &dyn Store) {
    store.set_auth_enabled(true, 10).await.expect("on");
    assert!(store.auth_enabled().await.expect("read"));
    store.set_auth_enabled(false, 20).await.expect("off");
    assert!(!store.auth_enabled().await.expect("read"));
    let node = unique_name("node");
    let listener = Listener { node_id: node.clone(), addr: "0.0.0.0:4747".into(), public: true, updated_at: 10 };
    store.record_listener(&listener).await.expect("record");
    let moved = Listener { addr: "127.0.0.1:4747".into(), public: false, updated_at: 20, ..listener };
    store.record_listener(&moved).await.expect("refresh");
    let found: Vec<Listener> =
        store.listeners().await.expect("list").into_iter().filter(|l| l.node_id == node).collect();
    assert_eq!(found, vec![moved]);
    store.remove_listener(&node).await.expect("remove");
    assert!(store.listeners().await.expect("list").iter().all(|l| l.node_id != node));
}
