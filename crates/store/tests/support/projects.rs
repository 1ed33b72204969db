//! Checks of projects: kept in creation order, counted and listed for every owner,
//! compared by whole path components, and deleted with everything under them.

use super::fixtures::*;
use spool_engine::{Store, StoreError};
use spool_protocol::*;

pub async fn projects_round_trip_in_creation_order(store: &dyn Store) {
    let owner = new_user(store).await;
    let older = project_for(&owner, 100);
    let newer = project_for(&owner, 200);
    // Inserted newest first, so the list order has to come from created_at.
    store.insert_project(&newer).await.expect("insert newer");
    store.insert_project(&older).await.expect("insert older");
    let stranger = new_user(store).await;
    let theirs = Project { path: older.path.clone(), ..project_for(&stranger, 50) };
    store.insert_project(&theirs).await.expect("another owner may register the same path");

    assert_eq!(store.list_projects(&owner).await.expect("list"), vec![older.clone(), newer.clone()]);
    assert_eq!(store.list_projects(&stranger).await.expect("list"), vec![theirs.clone()]);
    assert_eq!(store.get_project(&older.id).await.expect("get"), Some(older.clone()));
    assert_eq!(store.get_project(&ProjectId::new()).await.expect("get absent"), None);

    let duplicate = Project { path: older.path.clone(), ..project_for(&owner, 300) };
    match store.insert_project(&duplicate).await {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("registering a path twice must be a Conflict, got {other:?}"),
    }
    assert_eq!(store.list_projects(&owner).await.expect("list").len(), 2, "the duplicate must not be stored");

    // update_project writes the name and updated_at, and nothing else.
    let edited =
        Project { name: "renamed".into(), updated_at: 999, path: "/elsewhere".into(), created_at: 7, ..older.clone() };
    store.update_project(&edited).await.expect("update");
    let expected = Project { name: "renamed".into(), updated_at: 999, ..older.clone() };
    assert_eq!(store.get_project(&older.id).await.expect("get"), Some(expected));
}

pub async fn sessions_are_counted_per_owner_and_projects_listed_for_all(store: &dyn Store) {
    let (project, _) = new_session(store).await;
    let other_project = project_for(&project.owner_id, 2_000);
    store.insert_project(&other_project).await.expect("insert_project");
    for archived in [false, true, true] {
        store.insert_session(&session_in(&other_project, 3_000, archived)).await.expect("insert_session");
    }
    let (strangers, _) = new_session(store).await;
    assert_eq!(store.count_sessions(&project.owner_id, false).await.expect("count"), 2, "in every project");
    assert_eq!(store.count_sessions(&project.owner_id, true).await.expect("count"), 2);
    assert_eq!(store.count_sessions(&strangers.owner_id, false).await.expect("count"), 1);
    let all: Vec<ProjectId> = store.all_projects().await.expect("all").into_iter().map(|p| p.id).collect();
    for id in [&project.id, &other_project.id, &strangers.id] {
        assert!(all.contains(id), "{id} in {all:?}");
    }

    // Overlap is by whole path components: `x_` is not inside `x`, and `%`/`_` are
    // plain characters.
    let base = format!("/srv/{}", ProjectId::new());
    let at = |path: String, owner: &UserId| Project { path, ..project_for(owner, 5_000) };
    let (x, inside, holder, beside, wild) = (
        at(format!("{base}/x"), &project.owner_id),
        at(format!("{base}/x/y"), &strangers.owner_id),
        at(base.clone(), &strangers.owner_id),
        at(format!("{base}/x_"), &strangers.owner_id),
        at(format!("{base}/%"), &strangers.owner_id),
    );
    for p in [&x, &inside, &holder, &beside, &wild] {
        store.insert_project(p).await.expect("insert_project");
    }
    let ids = |found: Vec<Project>| found.into_iter().map(|p| p.id).collect::<Vec<_>>();
    let found = ids(store.projects_overlapping(&x.path).await.expect("overlapping"));
    assert_eq!(found.len(), 3, "{found:?}");
    for p in [&x, &inside, &holder] {
        assert!(found.contains(&p.id), "{} in {found:?}", p.path);
    }
    assert_eq!(ids(store.projects_overlapping(&format!("{base}/y")).await.expect("overlapping")), vec![holder.id]);
}

pub async fn deleting_a_project_removes_everything_under_it(store: &dyn Store) {
    let (project, first) = new_session(store).await;
    let second = session_in(&project, 2_000, true);
    store.insert_session(&second).await.expect("insert_session");
    append_all(store, &first, vec![user("a"), assistant("b")]).await;
    append_all(store, &second, vec![user("c")]).await;
    let run = run_in(&second, "req", RunStatus::Running);
    store.insert_run(&run).await.expect("insert_run");
    let (_, approval, _) = interrupted_run_in(store, &first, "req-ask", 200).await;
    let sibling = project_for(&project.owner_id, 2_000);
    store.insert_project(&sibling).await.expect("insert sibling");
    let (_, unrelated) = new_session(store).await;
    let unrelated_messages = append_all(store, &unrelated, vec![user("safe")]).await;

    assert!(store.delete_project(&project.id).await.expect("delete_project"));
    assert_eq!(store.get_project(&project.id).await.expect("get"), None);
    assert_eq!(store.list_projects(&project.owner_id).await.expect("list"), vec![sibling]);
    for session in [&first, &second] {
        assert_eq!(store.get_session(&session.id).await.expect("get_session"), None);
        assert_eq!(store.count_messages(&session.id).await.expect("count"), 0);
    }
    assert_eq!(store.list_sessions(&project.id, false).await.expect("list"), vec![]);
    assert_eq!(store.list_sessions(&project.id, true).await.expect("list"), vec![]);
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), None);
    assert_eq!(stored_approval(store, &approval.id).await, None);
    assert!(!store.delete_project(&project.id).await.expect("delete again"));

    assert_eq!(all_messages(store, &unrelated).await, unrelated_messages, "other projects are untouched");
}
