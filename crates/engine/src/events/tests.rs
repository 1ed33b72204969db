//! Tests of a session stream on its own (no engine, no bus): replay and snapshot
//! choices, slow-client cuts, run subscriptions, closing and the state fold.

use super::*;
use crate::view::test_state;
use futures::{FutureExt, Stream, StreamExt};
use spool_protocol::sse::Decoder;
use spool_protocol::*;
use std::pin::Pin;
use std::task::{Context, Poll};

fn events(limits: EventLimits) -> SessionEvents {
    let state = test_state();
    SessionEvents::new(state.session.id.clone(), state, limits)
}

fn publish_n(ev: &SessionEvents, n: usize, payload: usize) {
    for _ in 0..n {
        ev.publish_body(FrameBody::RunAccepted { request_id: "x".repeat(payload), run_id: RunId::new() });
    }
}

/// Everything the subscription has ready now, decoded into frames.
fn drain(sub: &mut Subscription) -> (Vec<Frame>, bool) {
    let mut dec = Decoder::new();
    let mut frames = Vec::new();
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    loop {
        match Pin::new(&mut *sub).poll_next(&mut cx) {
            Poll::Ready(Some(bytes)) => {
                for ev in dec.push(&bytes) {
                    let frame: Frame = serde_json::from_str(&ev.data).unwrap();
                    assert_eq!(ev.id, Some(frame.cursor().to_string()));
                    frames.push(frame);
                }
            }
            Poll::Ready(None) => return (frames, true),
            Poll::Pending => return (frames, false),
        }
    }
}

fn cursor(ev: &SessionEvents, seq: u64) -> Cursor {
    Cursor { stream_id: ev.stream_id(), seq }
}

#[test]
fn replays_exactly_the_missed_frames_within_the_buffer() {
    let ev = events(EventLimits::default());
    publish_n(&ev, 10, 10);
    let (mut sub, start) = ev.subscribe(Some(&cursor(&ev, 4)), CancellationToken::new(), watcher());
    assert_eq!(start, Start::Replay { from_seq: 4, frames: 6 });
    let (frames, ended) = drain(&mut sub);
    assert!(!ended);
    assert_eq!(frames.iter().map(|f| f.seq).collect::<Vec<_>>(), (5..=10).collect::<Vec<_>>());
    publish_n(&ev, 1, 10);
    assert_eq!(drain(&mut sub).0.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![11]);
}

#[test]
fn unusable_cursors_get_one_snapshot_at_the_current_seq() {
    let ev = events(EventLimits::default());
    publish_n(&ev, 300, 10);
    let other = Cursor { stream_id: StreamId::new(), seq: 299 };
    for (c, why) in [
        (Some(cursor(&ev, 10)), "older than the 256-frame buffer"),
        (Some(other), "foreign stream"),
        (Some(cursor(&ev, 301)), "ahead of seq"),
        (None, "no cursor"),
    ] {
        let (mut sub, start) = ev.subscribe(c.as_ref(), CancellationToken::new(), watcher());
        assert_eq!(start, Start::Snapshot { seq: 300 }, "{why}");
        let (frames, _) = drain(&mut sub);
        assert_eq!(frames.len(), 1, "{why}");
        assert_eq!(frames[0].seq, 300);
        assert!(matches!(frames[0].body, FrameBody::Snapshot { .. }), "{why}");
    }
    // The oldest frame still replayable: 256 frames behind.
    let (_, start) = ev.subscribe(Some(&cursor(&ev, 44)), CancellationToken::new(), watcher());
    assert_eq!(start, Start::Replay { from_seq: 44, frames: 256 });
    // A client at the current seq missed nothing: zero frames, then live.
    let (mut sub, start) = ev.subscribe(Some(&cursor(&ev, 300)), CancellationToken::new(), watcher());
    assert_eq!(start, Start::Replay { from_seq: 300, frames: 0 });
    assert_eq!(drain(&mut sub), (Vec::new(), false));
    publish_n(&ev, 1, 10);
    assert_eq!(drain(&mut sub).0.iter().map(|f| f.seq).collect::<Vec<_>>(), vec![301]);
}

#[test]
fn replay_window_is_also_bounded_by_bytes() {
    let ev = events(EventLimits { replay_frames: 256, replay_bytes: 4096, queue_bytes: 1 << 20 });
    publish_n(&ev, 20, 400);
    let (_, start) = ev.subscribe(Some(&cursor(&ev, 5)), CancellationToken::new(), watcher());
    assert_eq!(start, Start::Snapshot { seq: 20 });
    let (_, start) = ev.subscribe(Some(&cursor(&ev, 15)), CancellationToken::new(), watcher());
    assert!(matches!(start, Start::Replay { .. }));
}

#[test]
fn a_lagging_subscriber_is_cut_while_a_reading_one_gets_every_frame() {
    let limits = EventLimits { replay_frames: 16, replay_bytes: 1 << 20, queue_bytes: 16 * 1024 };
    let ev = events(limits);
    let slow_kill = CancellationToken::new();
    let (mut slow, _) = ev.subscribe(None, slow_kill.clone(), watcher());
    let (mut fast, _) = ev.subscribe(None, CancellationToken::new(), watcher());
    drain(&mut slow);
    let mut seen = drain(&mut fast).0.len();
    for _ in 0..200 {
        publish_n(&ev, 1, 500);
        seen += drain(&mut fast).0.len();
    }
    assert_eq!(seen, 201, "snapshot plus every published frame");
    assert!(slow_kill.is_cancelled(), "the lagging subscriber's connection is killed");
    assert!(drain(&mut slow).1, "and its stream ends");
    assert!(slow.is_cut() && !fast.is_cut(), "it knows it was cut, the reader that it was not");
    assert_eq!((slow.ended(), fast.ended()), (Some(Ended::Lagged), None));
    // The ring stays bounded by the queue limit, not by the slow reader.
    let inner = ev.lock();
    assert!(inner.ring_bytes <= limits.queue_bytes + 1024, "{}", inner.ring_bytes);
    assert_eq!(inner.subscribers.len(), 2);
}

#[test]
fn a_run_subscription_starts_at_the_clients_last_event_or_a_snapshot_at_the_runs_count() {
    let ev = events(EventLimits::default());
    let run = RunId::new();
    let delta = |i: usize| FrameBody::LoopEvent {
        run_id: run.clone(),
        message_index: Some(1),
        message_id: None,
        event: AgentEvent::MessageUpdate {
            assistant_message_event: StreamDelta::TextDelta { content_index: 0, offset: i, delta: "w".into() },
        },
    };
    publish_n(&ev, 3, 10);
    ev.publish_body(FrameBody::RunAccepted { request_id: "r".into(), run_id: run.clone() });
    for i in 0..10 {
        ev.publish_body(delta(i));
    }
    // Event 6 is the sixth frame of the run (seq 9): the replay starts after it.
    let (mut sub, start) = ev.subscribe_from_run(&run, RunAfter::Seq(6), CancellationToken::new(), watcher());
    assert_eq!(start.from, RunFrom::Replay(RunCount::after(run.clone(), 6)));
    assert_eq!(drain(&mut sub).0.iter().map(|f| f.seq).collect::<Vec<_>>(), (10..=14).collect::<Vec<_>>());
    // From the start: the frame before `run.accepted`.
    let (mut sub, _) = ev.subscribe_from_run(&run, RunAfter::Seq(0), CancellationToken::new(), watcher());
    assert_eq!(drain(&mut sub).0.first().map(|f| f.seq), Some(4));
    // 300 deltas later, event 6 is gone: a snapshot, at the run's count.
    for i in 10..310 {
        ev.publish_body(delta(i));
    }
    let (mut sub, start) = ev.subscribe_from_run(&run, RunAfter::Seq(6), CancellationToken::new(), watcher());
    let RunFrom::Snapshot(Some(count)) = &start.from else { panic!("{start:?}") };
    assert_eq!(count.sequence(), 311);
    assert!(matches!(drain(&mut sub).0[0].body, FrameBody::Snapshot { .. }));
    // A run this stream never saw start: a snapshot, numbers unknown.
    let (_, start) = ev.subscribe_from_run(&RunId::new(), RunAfter::Seq(6), CancellationToken::new(), watcher());
    assert_eq!(start.from, RunFrom::Snapshot(None));
}

#[test]
fn a_parked_run_counted_on_after_a_reload_replays_from_its_interrupt() {
    let ev = events(EventLimits::default());
    let run = RunId::new();
    let approval = ApprovalId::new();
    publish_n(&ev, 2, 10);
    // Loaded after a restart: the run's events 1‥7 (7 its interrupt) are no frames here.
    ev.resume_run_count(RunCount::parked(run.clone(), 7, approval.clone()));
    publish_n(&ev, 1, 10);
    let start_tool = AgentEvent::ToolExecutionStart {
        tool_call_id: "c".into(),
        tool_name: "write".into(),
        args: serde_json::Value::Null,
    };
    ev.publish_body(FrameBody::LoopEvent {
        run_id: run.clone(),
        message_index: None,
        message_id: None,
        event: start_tool,
    });
    // The continuation numbers on from the interrupt, and a client with it replays
    // every frame counted since, by sequence or by the approval it decided.
    for after in [RunAfter::Seq(7), RunAfter::Interrupt(approval)] {
        let (mut sub, start) = ev.subscribe_from_run(&run, after, CancellationToken::new(), watcher());
        assert_eq!((start.after, &start.from), (7, &RunFrom::Replay(RunCount::after(run.clone(), 7))));
        let frames = drain(&mut sub).0;
        assert_eq!(frames.iter().map(|f| f.seq).collect::<Vec<_>>(), [3, 4]);
        let mut count = RunCount::after(run.clone(), 7);
        assert_eq!(frames.iter().filter_map(|f| count.step(&f.body)).collect::<Vec<_>>(), [8]);
    }
}

#[tokio::test]
async fn close_ends_streams_and_drop_unregisters() {
    let ev = events(EventLimits::default());
    let kill = CancellationToken::new();
    let (mut sub, _) = ev.subscribe(None, kill.clone(), Viewer::answering(ClientKind::Web));
    assert!(sub.next().await.is_some());
    let (other, _) = ev.subscribe(None, CancellationToken::new(), watcher());
    assert_eq!(ev.interactive_views(), 1);
    drop(other);
    assert_eq!(ev.subscriber_count(), 1);
    assert_eq!(*ev.watch_subscribers().borrow(), 1);
    let waiter = tokio::spawn(async move { (sub.next().await, sub) });
    tokio::task::yield_now().await;
    ev.close(Ended::SessionDeleted);
    let (last, sub) = waiter.await.unwrap();
    assert_eq!(last, None);
    assert!(kill.is_cancelled());
    assert!(!sub.is_cut(), "closed, not cut");
    assert_eq!(sub.ended(), Some(Ended::SessionDeleted));
    assert!(!ev.publish_body(FrameBody::RunAccepted { request_id: "r".into(), run_id: RunId::new() }));
}

/// Every way the engine closes a stream reaches its subscribers, native and typed,
/// as the reason it was closed with; a subscriber cut before keeps its own.
#[tokio::test]
async fn a_closed_stream_tells_each_subscriber_why() {
    for why in [Ended::SessionDeleted, Ended::Unloaded, Ended::Shutdown] {
        let limits = EventLimits { replay_frames: 4, replay_bytes: 1 << 20, queue_bytes: 4 * 1024 };
        let ev = events(limits);
        let (mut native, _) = ev.subscribe(None, CancellationToken::new(), watcher());
        let (typed, _) = ev.subscribe(None, CancellationToken::new(), watcher());
        let mut typed = typed.typed();
        let (mut lagging, _) = ev.subscribe(None, CancellationToken::new(), watcher());
        drain(&mut native);
        drain(&mut lagging);
        assert!(typed.next().await.is_some());
        for _ in 0..40 {
            publish_n(&ev, 1, 500);
            drain(&mut native);
            while typed.next().now_or_never().flatten().is_some() {}
        }
        assert_eq!((native.ended(), typed.ended()), (None, None), "live: no reason yet");
        ev.close(why);
        ev.close(Ended::Shutdown);
        assert!(drain(&mut native).1 && typed.next().await.is_none(), "{why:?}: both end");
        assert_eq!((native.ended(), typed.ended()), (Some(why), Some(why)), "the first reason stays");
        assert_eq!(lagging.ended(), Some(Ended::Lagged), "{why:?}: cut before the close");
        let (late, _) = ev.subscribe(None, CancellationToken::new(), watcher());
        assert_eq!(late.ended(), Some(why), "subscribed after the close");
    }
}

#[test]
fn a_published_loop_event_changes_the_state_by_its_fold() {
    let ev = events(EventLimits::default());
    let run = RunId::new();
    let frame = |event| FrameBody::LoopEvent { run_id: run.clone(), message_index: None, message_id: None, event };
    let (tool_call_id, tool_name) = ("c1".to_owned(), "bash".to_owned());
    let args = serde_json::json!({"command": "ls"});
    ev.publish_body(frame(AgentEvent::ToolExecutionStart {
        tool_call_id: tool_call_id.clone(),
        tool_name: tool_name.clone(),
        args,
    }));
    assert_eq!(ev.state().1.tool_executions["c1"].status, frame::ToolStatus::Running, "a snapshot shows it running");
    ev.publish_body(frame(AgentEvent::ToolExecutionEnd {
        tool_call_id,
        tool_name,
        result: "a.txt".into(),
        is_error: false,
    }));
    let (_, state) = ev.state();
    assert_eq!(state.tool_executions["c1"].status, frame::ToolStatus::Success);
    assert_eq!(state.tool_executions["c1"].result.as_deref(), Some("a.txt"));
}

/// A view that answers nothing, of no particular client.
fn watcher() -> Viewer {
    Viewer::watching(ClientKind::Other)
}

#[test]
fn presence_counts_views_answerers_and_visible_ones_by_kind() {
    let ev = SessionEvents::new(SessionId::new(), crate::view::test_state(), EventLimits::default());
    let (web, _) = ev.subscribe(None, CancellationToken::new(), Viewer::answering(ClientKind::Web));
    let (cli, _) = ev.subscribe(None, CancellationToken::new(), Viewer::watching(ClientKind::Cli));
    let presence = ev.watchers_here().presence();
    assert_eq!((presence.viewers, presence.answerers, presence.visible), (2, 1, 1));
    assert_eq!(presence.clients, [(ClientKind::Web, 1), (ClientKind::Cli, 1)].into_iter().collect());
    web.set_visible(false);
    assert_eq!(ev.watchers_here().visible, 0, "a hidden page sees nothing");
    drop(cli);
    let presence = ev.watchers_here().presence();
    assert_eq!((presence.viewers, presence.answerers, presence.visible), (1, 1, 0));
    drop(web);
    assert!(ev.watchers_here().presence().is_empty());
}

#[tokio::test]
async fn a_settled_change_is_announced_once_and_folded_into_the_state() {
    let ev = SessionEvents::new(SessionId::new(), crate::view::test_state(), EventLimits::default());
    ev.announce_presence(std::time::Duration::from_millis(20), None);
    let (watcher, _) = ev.subscribe(None, CancellationToken::new(), watcher());
    let mut frames = watcher.typed();
    assert!(matches!(only(&mut frames).await, FrameBody::Snapshot { .. }));
    let (web, _) = ev.subscribe(None, CancellationToken::new(), Viewer::answering(ClientKind::Web));
    let FrameBody::Presence { presence } = &only(&mut frames).await else { panic!("not presence") };
    assert_eq!((presence.viewers, presence.answerers, presence.visible), (2, 1, 1));
    assert_eq!(ev.state().1.presence, *presence, "snapshots carry it");
    web.set_visible(false);
    let FrameBody::Presence { presence } = &only(&mut frames).await else { panic!("not presence") };
    assert_eq!(presence.visible, 0);
    // Gone and back within the settling time: one frame, of where it ended.
    drop(web);
    let (_again, _) = ev.subscribe(None, CancellationToken::new(), Viewer::answering(ClientKind::Web));
    let FrameBody::Presence { presence } = &only(&mut frames).await else { panic!("not presence") };
    assert_eq!(presence.visible, 1, "the new page is visible: {presence:?}");
}

/// The next batch of a typed subscription, which must be one frame.
async fn only(frames: &mut TypedSubscription) -> FrameBody {
    let batch = frames.next().await.expect("a frame");
    assert_eq!(batch.len(), 1, "one frame at a time: {batch:?}");
    batch[0].body.clone()
}
