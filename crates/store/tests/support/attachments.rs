//! Checks of attachments: a row round-trips, binds to one session once, counts toward
//! its owner's bytes, says whether its blob is still named, and leaves with its
//! session; a user message's `file` part is stored like any other block.

use super::fixtures::*;
use spool_engine::Store;
use spool_engine::store::Attachment;
use spool_protocol::{AttachmentId, Content, Message};

pub async fn attachments_bind_once_count_per_owner_and_leave_with_their_session(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let sha = "ab".repeat(32);
    let upload = Attachment {
        id: AttachmentId::new(),
        owner_id: session.owner_id.clone(),
        session_id: None,
        sha256: sha.clone(),
        size: 1234,
        media_type: "image/png".into(),
        name: "shot.png".into(),
        created_at: 1_000,
    };
    store.insert_attachment(&upload).await.expect("insert");
    assert_eq!(store.get_attachment(&upload.id).await.expect("get"), Some(upload.clone()));
    assert_eq!(store.attachment_bytes(&session.owner_id).await.expect("bytes"), 1234);
    let again = Attachment { id: AttachmentId::new(), ..upload.clone() };
    store.insert_attachment(&again).await.expect("insert the same bytes again");
    assert_eq!(store.attachment_bytes(&session.owner_id).await.expect("bytes"), 2468, "each row counts");

    assert!(store.bind_attachment(&upload.id, &session.id).await.expect("bind"));
    assert!(!store.bind_attachment(&upload.id, &session.id).await.expect("bind again"), "bound once");
    let bound = store.get_attachment(&upload.id).await.expect("get").expect("there");
    assert_eq!(bound.session_id.as_ref(), Some(&session.id));
    assert_eq!(store.session_attachment_shas(&session.id).await.expect("shas"), std::slice::from_ref(&sha));

    let file = Content::File {
        id: upload.id.clone(),
        name: upload.name.clone(),
        media_type: upload.media_type.clone(),
        size: upload.size,
        sha256: sha.clone(),
        url: format!("/api/attachments/{}", upload.id),
    };
    let message = Message::User { content: vec![file, Content::Text { text: "look".into() }], timestamp: 5 };
    store.insert_message(&session.id, &session.owner_id, &indexed(0, message.clone())).await.expect("insert");
    let page = store.list_messages(&session.id, None, 10).await.expect("list");
    assert_eq!(page[0].message, message, "a file part round-trips");

    assert!(store.delete_session(&session.id).await.expect("delete session"));
    assert_eq!(store.get_attachment(&upload.id).await.expect("get"), None, "gone with its session");
    assert!(store.blob_in_use(&sha).await.expect("in use"), "the unbound row still names the blob");
    assert!(store.delete_attachment(&again.id).await.expect("delete"));
    assert!(!store.blob_in_use(&sha).await.expect("in use"), "no row names it any more");
    assert_eq!(store.attachment_bytes(&session.owner_id).await.expect("bytes"), 0);
}

/// An upload no prompt sent is deleted alone (the composer's ✕) or with the others made
/// before a time (the expiry); a bound one is never, and each delete names the blobs
/// it may have freed.
pub async fn unbound_attachments_are_deleted_one_by_one_or_by_age_and_bound_ones_never(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let row = |sha: &str, created_at: i64| Attachment {
        id: AttachmentId::new(),
        owner_id: session.owner_id.clone(),
        session_id: None,
        sha256: sha.repeat(32),
        size: 10,
        media_type: "text/plain".into(),
        name: "notes.txt".into(),
        created_at,
    };
    let (old, older, fresh, sent, removed) =
        (row("01", 100), row("02", 50), row("03", 1_000), row("04", 10), row("05", 10));
    for a in [&old, &older, &fresh, &sent, &removed] {
        store.insert_attachment(a).await.expect("insert");
    }
    assert!(store.bind_attachment(&sent.id, &session.id).await.expect("bind"));

    assert!(!store.delete_unbound_attachment(&sent.id).await.expect("delete bound"), "a sent file stays");
    assert!(store.get_attachment(&sent.id).await.expect("get").is_some());
    assert!(store.delete_unbound_attachment(&removed.id).await.expect("delete"));
    assert!(!store.delete_unbound_attachment(&removed.id).await.expect("delete again"), "gone already");
    assert_eq!(store.get_attachment(&removed.id).await.expect("get"), None);

    let mut expired = store.delete_unbound_attachments_before(1_000).await.expect("expire");
    expired.sort();
    assert_eq!(expired, [old.sha256.clone(), older.sha256.clone()], "made before the time, never sent");
    for (a, kept) in [(&old, false), (&older, false), (&fresh, true), (&sent, true)] {
        assert_eq!(store.get_attachment(&a.id).await.expect("get").is_some(), kept, "{}", a.sha256);
    }
    assert!(store.delete_unbound_attachments_before(1_000).await.expect("again").is_empty());
    assert!(store.delete_session(&session.id).await.expect("delete session"));
    assert!(store.delete_unbound_attachment(&fresh.id).await.expect("delete"));
}
