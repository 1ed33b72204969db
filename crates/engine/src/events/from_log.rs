//! A reconnect whose cursor the ring can no longer serve, served from the run frame
//! log ([`crate::run_log`]) instead of a snapshot where that is exact.
//!
//! * Same stream, the frames after the cursor left the ring: when one logged run holds
//!   the frame right after the cursor and its logged frames reach back into the
//!   replay window, the client gets those frames, then the ring from the last of
//!   them: every frame after its cursor once, in order.
//! * Another stream (the server restarted since): when a run of that stream, logged
//!   to its end, holds the frame after the cursor, the client gets the rest of that
//!   run, then a snapshot of the stream now, which covers whatever followed the run.
//! * Anything else (a cursor between runs, on frames no run logged; a log that is not
//!   whole): the snapshot, as before.
//!
//! The log is read without the stream's lock; the join with the ring is checked again
//! under it, so frames evicted meanwhile fall back to the snapshot, never to a hole. A
//! run still going is logged a chunk at a time: when what is written ends before the
//! ring begins, the log is read again as the writer flushes, for a few seconds at most
//! (`run_log::JOIN_WAIT`). In bus mode the log is the running node's, in the shared
//! store, and the ring is filled from the bus's log up to the join first.

use super::{SessionEvents, Start, Subscription, Viewer};
use crate::run_log::Reach;
use spool_protocol::Cursor;
use tokio_util::sync::CancellationToken;

impl SessionEvents {
    /// The cursor of the stream's last frame: a subscription from it starts with
    /// nothing to replay.
    pub(crate) fn head(&self) -> Cursor {
        self.shared.cursor()
    }

    /// A subscription right after the frame at `join` (the last frame a client got from
    /// the log), when the ring holds every frame after it, filled from the bus's log
    /// first in bus mode; `None` when it does not (yet).
    pub(crate) async fn subscribe_joined(
        &self,
        join: &Cursor,
        kill: CancellationToken,
        viewer: Viewer,
    ) -> Option<Subscription> {
        self.backfill(join).await;
        let inner = self.lock();
        inner.replay_from(&self.shared, Some(join))?;
        Some(self.subscribe_locked(inner, Some(join), kill, viewer).0)
    }

    /// Like [`subscribe`](Self::subscribe), replaying from the run frame log a cursor
    /// the ring cannot serve (see the module doc). A replay that joins the ring says
    /// [`Start::Replay`] from the cursor; one that ends in a snapshot says
    /// [`Start::Snapshot`].
    pub async fn subscribe_logged(
        &self,
        cursor: Option<&Cursor>,
        kill: CancellationToken,
        viewer: Viewer,
    ) -> (Subscription, Start) {
        let Some(cursor) = cursor else { return self.subscribe(None, kill, viewer) };
        let deadline = tokio::time::Instant::now() + crate::run_log::JOIN_WAIT;
        loop {
            let (log, same) = {
                let inner = self.lock();
                let same = cursor.stream_id == inner.stream_id;
                let log = inner.log.as_ref().map(|l| l.log().clone());
                match log {
                    Some(log)
                        if inner.replay_from(&self.shared, Some(cursor)).is_none()
                            && !(same && cursor.seq >= inner.seq) =>
                    {
                        (log, same)
                    }
                    _ => return self.subscribe_locked(inner, Some(cursor), kill, viewer),
                }
            };
            let logged = match log.after_cursor(&self.shared.session_id, cursor, same).await {
                Ok(logged) => logged,
                Err(error) => {
                    tracing::warn!(session = %self.shared.session_id, %error, "could not read the run frame log");
                    None
                }
            };
            let Some((frames, reach)) = logged else { return self.subscribe(Some(cursor), kill, viewer) };
            // The log ends before the ring begins (or before the cursor): its writer has
            // not flushed the frames in between yet. Read it again, or take the snapshot.
            let wait = reach == Reach::Writing && tokio::time::Instant::now() < deadline;
            let Some(last) = frames.last().map(|f| f.seq) else {
                if wait {
                    tokio::time::sleep(crate::run_log::JOIN_POLL).await;
                    continue;
                }
                return self.subscribe(Some(cursor), kill, viewer);
            };
            let (mut subscription, start) = if same {
                let join = self.lock().cursor_at(last);
                match self.subscribe_joined(&join, kill.clone(), viewer).await {
                    Some(subscription) => (subscription, Start::Replay { from_seq: cursor.seq, frames: 0 }),
                    None if wait => {
                        tokio::time::sleep(crate::run_log::JOIN_POLL).await;
                        continue;
                    }
                    None => return self.subscribe(Some(cursor), kill, viewer),
                }
            } else if reach == Reach::Whole {
                self.subscribe(None, kill, viewer)
            } else {
                return self.subscribe(Some(cursor), kill, viewer);
            };
            let start = match start {
                Start::Replay { from_seq, .. } => {
                    Start::Replay { from_seq, frames: self.lock().seq.saturating_sub(from_seq) }
                }
                snapshot => snapshot,
            };
            subscription.logged = frames.into();
            return (subscription, start);
        }
    }
}
