//! A run's `sequence`: the run stream (seed 003; the mapping is the server's
//! `dialect::run_stream`) numbers a run's events 1, 2, 3 …, and every stream of one run
//! — the first `POST /api/chat`, a retried one, a re-attach, a resume's continuation —
//! continues the same numbers for the run's lifetime. So the numbering cannot belong to
//! a subscription: a session's `SessionEvents` counts once, as each frame enters its
//! ring, marks the frame with the sequence it gives, and finds a client's `after` by
//! these marks ([`SessionEvents::subscribe_from_run`]). The server's mapping folds with
//! the same [`RunCount`], so the two cannot disagree on which frame is which event.
//!
//! Which frames are a run's events (the mapping's table, in counting terms): the run's
//! `run.accepted`; its `text_delta` updates, `tool_execution_start`,
//! `tool_execution_end` and `approval_requested`; the `message_end` of a user message it
//! took while running (a steer, the `user_message` event: not its prompt, the first user
//! message after its `agent_start`); its `agent_end` unless completed (the
//! `error` event); and after a completed `agent_end`, the session's next
//! `session.state` (the `done` event, which names the stored message). Pure: no clock,
//! no I/O.
//!
//! The counts live in memory, with the loaded session. The one kind of run that lives
//! across a restart (or an unload) is one parked at an approval: its checkpoint keeps
//! the sequence of its `interrupt`, and the session, loaded again, goes on counting the
//! run from there ([`RunCount::parked`]), so its continuation keeps the run's numbers.
//!
//! Only frames counted as they enter the ring carry a run's sequence: frames a bus-mode
//! node fills its ring's front with from the bus's log (`SessionEvents::backfill`) do
//! not, because counting needs every frame of the run from its `run.accepted` on. So a
//! run-stream subscription never backfills: it could not replay from those frames.
//!
//! [`SessionEvents::subscribe_from_run`]: crate::SessionEvents::subscribe_from_run

use spool_protocol::frame::FrameBody;
use spool_protocol::{AgentEvent, ApprovalId, Message, RunId, RunStatus, StreamDelta};
use std::collections::VecDeque;

/// One run's event counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunCount {
    run_id: RunId,
    sequence: u64,
    /// Seen the run's `run.accepted` (or counting from the middle of the run).
    started: bool,
    /// `agent_end` said completed: the next `session.state` is `done`.
    completing: bool,
    /// `done` or `error` was counted: nothing follows.
    ended: bool,
    /// `agent_start` was counted and the prompt's `message_end` not yet: the next user
    /// message is the prompt, not an event. A run resumed from an approval has no
    /// `agent_start`: each user message it takes is a steer.
    prompt_pending: bool,
    /// The sequence of each approval the run asked for, in order.
    interrupts: Vec<(ApprovalId, u64)>,
    /// The tool calls whose `tool_started` was counted, in order: a snapshot shows a
    /// call the model announced as running only once it has started (see the server's
    /// `dialect::run_stream`).
    started_calls: Vec<String>,
}

impl RunCount {
    /// A counter that starts at the run's `run.accepted` frame and counts nothing before.
    pub fn new(run_id: RunId) -> Self {
        Self {
            run_id,
            sequence: 0,
            started: false,
            completing: false,
            ended: false,
            prompt_pending: false,
            interrupts: Vec::new(),
            started_calls: Vec::new(),
        }
    }

    /// The counter of a run parked at `approval`, whose `interrupt` was its event
    /// `sequence`: what a session loaded after a restart knows of the run (the sequence
    /// is kept with the approval's checkpoint), so its continuation numbers on.
    pub fn parked(run_id: RunId, sequence: u64, approval: ApprovalId) -> Self {
        Self { interrupts: vec![(approval, sequence)], ..Self::after(run_id, sequence) }
    }

    /// A counter that goes on after the run's event `sequence` (0: from the run's start),
    /// for frames that follow that event's own frame.
    pub fn after(run_id: RunId, sequence: u64) -> Self {
        Self { started: sequence > 0, sequence, ..Self::new(run_id) }
    }

    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The sequence of the run's last event so far (0 before the first).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The run's last event (`done` or `error`) has been counted.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The sequence of the `interrupt` that asked for `approval`, if counted here.
    pub fn interrupt(&self, approval: &ApprovalId) -> Option<u64> {
        self.interrupts.iter().find(|(id, _)| id == approval).map(|(_, seq)| *seq)
    }

    /// Whether the `tool_started` of `call` was counted here.
    pub fn call_started(&self, call: &str) -> bool {
        self.started_calls.iter().any(|c| c == call)
    }

    /// Counts one frame of the run's session: the sequence it gives, if it is one of
    /// the run's events.
    pub fn step(&mut self, body: &FrameBody) -> Option<u64> {
        if self.ended {
            return None;
        }
        match body {
            FrameBody::RunAccepted { run_id, .. } if *run_id == self.run_id && !self.started => {
                self.started = true;
            }
            FrameBody::LoopEvent { run_id, event, .. } if *run_id == self.run_id && self.started => match event {
                AgentEvent::MessageUpdate { assistant_message_event: StreamDelta::TextDelta { .. } }
                | AgentEvent::ToolExecutionEnd { .. } => {}
                AgentEvent::ToolExecutionStart { tool_call_id, .. } => self.started_calls.push(tool_call_id.clone()),
                AgentEvent::AgentStart {} => {
                    self.prompt_pending = true;
                    return None;
                }
                AgentEvent::MessageEnd { message: Message::User { .. } } => {
                    if std::mem::take(&mut self.prompt_pending) {
                        return None;
                    }
                }
                AgentEvent::ApprovalRequested { approval } => {
                    self.interrupts.push((approval.id.clone(), self.sequence + 1));
                }
                AgentEvent::AgentEnd { status, .. } => {
                    if RunStatus::parse(status) == Some(RunStatus::Completed) {
                        self.completing = true;
                        return None;
                    }
                    self.ended = true;
                }
                _ => return None,
            },
            FrameBody::State { .. } if self.completing => {
                self.completing = false;
                self.ended = true;
            }
            _ => return None,
        }
        self.sequence += 1;
        Some(self.sequence)
    }
}

/// How many recent runs a session keeps counting for: a re-attach to a run that ended
/// a few runs ago still gets its numbers; older ones fall back to a snapshot numbered
/// after the client's own last sequence.
const KEPT_RUNS: usize = 8;

/// The counters of one session's recent runs: those whose `run.accepted` this stream
/// saw (a session loaded, or followed from the bus, in the middle of a run does not
/// know that run's numbers).
#[derive(Clone, Debug, Default)]
pub(crate) struct RunSequences {
    runs: VecDeque<RunCount>,
    /// Runs counted from the middle ([`Self::resume`]): `(run, sequence, seq)` — the
    /// run's event `sequence` has no frame in this stream, and the frames after `seq`
    /// are all counted, so a client that has that event replays from `seq`.
    anchors: Vec<(RunId, u64, u64)>,
}

impl RunSequences {
    /// Counts one frame: the run and sequence it gives, if it is a run's event.
    pub(crate) fn count(&mut self, body: &FrameBody) -> Option<(RunId, u64)> {
        if let FrameBody::RunAccepted { run_id, .. } = body
            && self.get(run_id).is_none()
        {
            if self.runs.len() == KEPT_RUNS {
                self.runs.pop_front();
            }
            self.runs.push_back(RunCount::new(run_id.clone()));
        }
        // One run is active at a time; only the newest ones can take a frame.
        self.runs.iter_mut().rev().filter(|r| !r.ended).find_map(|r| Some((r.run_id.clone(), r.step(body)?)))
    }

    pub(crate) fn get(&self, run: &RunId) -> Option<&RunCount> {
        self.runs.iter().find(|r| r.run_id == *run)
    }

    /// Goes on counting a run this stream did not see start (see [`RunCount::parked`])
    /// from the frame after `seq`.
    pub(crate) fn resume(&mut self, count: RunCount, seq: u64) {
        self.runs.retain(|r| r.run_id != count.run_id);
        self.anchors.retain(|(run, _, _)| *run != count.run_id);
        if self.runs.len() == KEPT_RUNS {
            let gone = self.runs.pop_front().map(|r| r.run_id);
            self.anchors.retain(|(run, _, _)| Some(run) != gone.as_ref());
        }
        self.anchors.push((count.run_id.clone(), count.sequence, seq));
        self.runs.push_back(count);
    }

    /// For a run counted from the middle: the seq after which the frames following its
    /// event `sequence` begin, when that event is where counting resumed.
    pub(crate) fn anchor(&self, run: &RunId, sequence: u64) -> Option<u64> {
        self.anchors.iter().find(|(r, s, _)| r == run && *s == sequence).map(|(_, _, seq)| *seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::test_state;
    use spool_protocol::Usage;

    fn ev(run: &RunId, event: AgentEvent) -> FrameBody {
        FrameBody::LoopEvent { run_id: run.clone(), message_index: None, message_id: None, event }
    }

    fn delta() -> AgentEvent {
        AgentEvent::MessageUpdate {
            assistant_message_event: StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "w".into() },
        }
    }

    #[test]
    fn a_counter_resumed_after_an_event_numbers_the_rest_as_the_whole_count_does() {
        let run = RunId::new();
        let end = AgentEvent::AgentEnd { status: "completed".into(), usage: Usage::default(), error: None };
        let frames = [
            FrameBody::RunAccepted { request_id: "r".into(), run_id: run.clone() },
            ev(&run, delta()),
            ev(&run, AgentEvent::TurnEnd {}),
            ev(&run, delta()),
            ev(&run, end),
            FrameBody::RunAccepted { request_id: "again".into(), run_id: run.clone() },
            ev(&run, AgentEvent::AgentSettled {}),
        ];
        let mut whole = RunSequences::default();
        let marks: Vec<Option<u64>> = frames.iter().map(|f| whole.count(f).map(|(_, s)| s)).collect();
        assert_eq!(marks, [Some(1), Some(2), None, Some(3), None, None, None]);
        // The `done` is the next state frame, whatever it shows.
        let state = spool_protocol::frame::FrameBody::State { state: Box::new(test_state()) };
        assert_eq!(whole.count(&state), Some((run.clone(), 4)));
        assert!(whole.get(&run).expect("kept").ended());
        // Resumed after event 2 (its frame is the second), the frames after it count the same.
        let mut resumed = RunCount::after(run.clone(), 2);
        let rest: Vec<Option<u64>> = frames[2..].iter().chain([&state]).map(|f| resumed.step(f)).collect();
        assert_eq!(rest, [None, Some(3), None, None, None, Some(4)]);
        assert_eq!(&resumed, whole.get(&run).expect("kept"), "and end in the same state");
    }

    #[test]
    fn a_steer_is_an_event_and_the_prompt_is_not() {
        let run = RunId::new();
        let user = |text: &str| ev(&run, AgentEvent::MessageEnd { message: Message::user_text(text, 0) });
        let frames = [
            FrameBody::RunAccepted { request_id: "r".into(), run_id: run.clone() },
            ev(&run, AgentEvent::AgentStart {}),
            user("the prompt"),
            ev(&run, delta()),
            user("a steer"),
            ev(&run, delta()),
        ];
        let mut whole = RunCount::new(run.clone());
        let marks: Vec<Option<u64>> = frames.iter().map(|f| whole.step(f)).collect();
        assert_eq!(marks, [Some(1), None, None, Some(2), Some(3), Some(4)]);
        // Replayed after `run_started`, the prompt is still no event.
        let mut replayed = RunCount::after(run.clone(), 1);
        let rest: Vec<Option<u64>> = frames[1..].iter().map(|f| replayed.step(f)).collect();
        assert_eq!(rest, [None, None, Some(2), Some(3), Some(4)]);
        // A run parked at an approval goes on without `agent_start`: its user messages are steers.
        let mut parked = RunCount::parked(run.clone(), 4, ApprovalId::new());
        assert_eq!(parked.step(&user("a steer after the decision")), Some(5));
    }
}
