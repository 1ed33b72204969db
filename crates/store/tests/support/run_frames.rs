//! Checks of a run's frame log: chunks come back in order and byte for byte, a retried
//! chunk replaces itself, retention deletes by age, and the log goes with its run.

use super::fixtures::*;
use spool_engine::Store;
use spool_engine::store::RunFrameChunk;
use spool_protocol::*;

fn chunk(run: &Run, n: u64, created_at: time::Millis, complete: bool) -> RunFrameChunk {
    RunFrameChunk {
        run_id: run.id.clone(),
        chunk: n,
        session_id: run.session_id.clone(),
        stream_id: StreamId::new(),
        first_seq: n * 10 + 1,
        last_seq: n * 10 + 10,
        frames: 10,
        complete,
        // Every byte value, as deflate output may hold any.
        data: (0..=255u8).chain([n as u8]).collect(),
        created_at,
    }
}

pub async fn run_frames_come_back_in_order_and_retention_prunes_them_by_age(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let (old, new) =
        (run_in(&session, "frames-old", RunStatus::Completed), run_in(&session, "frames-new", RunStatus::Completed));
    for run in [&old, &new] {
        store.insert_run(run).await.expect("insert_run");
    }
    assert_eq!(store.run_frames(&old.id).await.expect("read"), vec![], "no log until one is written");
    // Written out of order, and chunk 1 twice (a retry): read back in chunk order, the
    // retry's bytes kept.
    let (c1, c0) = (chunk(&old, 1, 1_000, true), chunk(&old, 0, 1_000, false));
    store.append_run_frames(&chunk(&old, 1, 1_000, false)).await.expect("append");
    store.append_run_frames(&c1).await.expect("retry");
    store.append_run_frames(&c0).await.expect("append");
    assert_eq!(store.run_frames(&old.id).await.expect("read"), vec![c0, c1.clone()]);
    // A chunk written now is kept; those from before the cut go.
    let now = time::now_ms();
    let kept = chunk(&new, 0, now, true);
    store.append_run_frames(&kept).await.expect("append");
    assert!(store.prune_run_frames(now - 1).await.expect("prune") >= 2);
    assert_eq!(store.run_frames(&old.id).await.expect("read"), vec![], "pruned");
    assert_eq!(store.run_frames(&new.id).await.expect("read"), vec![kept], "younger than the cut");
    assert!(store.delete_session(&session.id).await.expect("delete"));
    assert_eq!(store.run_frames(&new.id).await.expect("read"), vec![], "deleted with its run");
}
