//! The socket mux: the one loop every WebSocket dialect runs, so that a dialect writes
//! only its mapping — what a client's message does, what its subscriptions' items and
//! its other sources become on the wire ([`Dialect`]).
//!
//! # Shape
//!
//! One task per socket, and it alone writes: writes to a socket are serialized by
//! construction, and a failed write ends the task, which unregisters everything. The
//! task holds the socket's subscriptions as one [`Subs`] set — each a cursor into a
//! shared ring, not a queue — polled round-robin, so a busy one cannot starve the
//! others, and copies items out when it is ready to write them.
//!
//! # Slow clients
//!
//! A socket that stops reading blocks only its own task, in a write. Its subscriptions
//! fall behind, and the engine cuts one once it lags by the queue limit, firing that
//! subscription's kill token. Every write races the tokens: when the one that fired
//! was a cut, the write gives up and the socket closes (the dialect says how,
//! [`Dialect::LAGGING`]), and the client comes back with its cursors. The engine fires
//! the tokens of a session's subscribers when it closes the session's stream too, so a
//! fired token is judged by asking the subscriptions whether one was cut: a closed
//! stream is not the socket's fault. A subscription that ends says why (the engine's
//! [`Ended`]), and that alone picks the ending, with no store read: a deleted session is
//! the dialect's to tell ([`Polled::Deleted`]); a stopping server closes the socket
//! with 1001; cut, or closed under a session that is still there (a node's stale view
//! in a cluster), closes it like a cut, since only a reconnect with cursors can pick it
//! up without a hole. A write that makes no progress for [`WRITE_TIMEOUT`] closes the
//! socket too.

use super::{REVOKED, STOPPING, Why};
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures::stream::{FuturesUnordered, SelectAll, SplitSink};
use futures::{SinkExt, Stream, StreamExt};
use spool_engine::{Ended, TypedSubscription};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// A write that makes no progress for this long closes the socket.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a closing socket waits to say why (a client that stopped reading never
/// takes the close frame, and must not hold the task).
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Why a socket's task stops.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Closing {
    /// The client went away, a write failed, or the dialect closes without a word.
    Gone,
    /// Said to the client in a close frame.
    Say(Why),
}

/// What the task writes next, in order: text messages.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Outbox(pub(crate) Vec<Utf8Bytes>);

impl Outbox {
    pub(crate) fn push(&mut self, text: impl Into<Utf8Bytes>) {
        self.0.push(text.into());
    }

    pub(crate) fn extend<T: Into<Utf8Bytes>>(&mut self, texts: impl IntoIterator<Item = T>) {
        self.0.extend(texts.into_iter().map(Into::into));
    }
}

/// How a dialect keeps the client's watchdog fed.
pub(crate) enum Heartbeat {
    /// A WebSocket ping.
    Ping,
    /// A text message of the dialect's own.
    Text(Utf8Bytes),
}

/// What a socket follows: a stream of items that says why it ended.
pub(crate) trait Feed: Stream + Unpin + Send {
    /// Why it ended, asked once it has (`None`: it does not say).
    fn ended(&self) -> Option<Ended>;

    /// Whether the engine cut it for lagging: what a blocked write asks when a kill
    /// token fires.
    fn is_cut(&self) -> bool {
        self.ended() == Some(Ended::Lagged)
    }
}

impl Feed for TypedSubscription {
    fn ended(&self) -> Option<Ended> {
        TypedSubscription::ended(self)
    }
}

/// One subscription of a socket: the dialect's key for it (a session, a client's stream
/// id), its feed, the kill token the engine fires to cut it, and the dialect's own
/// state for it.
pub(crate) struct Sub<K, F, T> {
    pub(crate) key: K,
    pub(crate) feed: F,
    kill: Option<CancellationToken>,
    /// Its feed ended and the end was told, or the dialect stopped taking from it: not
    /// polled again, but still in the set (and still able to say why it ended) until
    /// the dialect drops it.
    pub(crate) ended: bool,
    pub(crate) state: T,
}

/// `(key, Some(item))` for each item, then one `(key, None)` when the feed ends: the
/// end is an item of its own, so the socket hears which subscription ended while it
/// (and why it ended) is still in the set. An ended subscription stays pending.
impl<K: Clone + Unpin, F: Feed, T: Unpin> Stream for Sub<K, F, T> {
    type Item = (K, Option<F::Item>);

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Pending;
        }
        this.feed.poll_next_unpin(cx).map(|item| {
            this.ended = item.is_none();
            Some((this.key.clone(), item))
        })
    }
}

/// What a socket's subscriptions bring.
pub(crate) enum Polled<K, I> {
    /// An item of the subscription `K`.
    Item(K, I),
    /// The session of subscription `K` was deleted: the dialect tells the client its
    /// own way, and drops the subscription.
    Deleted(K),
    /// A subscription was cut or closed under the socket, or the server is stopping.
    Close(Closing),
}

/// A socket's subscriptions, polled as one (round-robin: one that gave an item goes to
/// the back of the queue), with their kill tokens.
pub(crate) struct Subs<K, F, T> {
    set: SelectAll<Sub<K, F, T>>,
    /// The kill tokens of the subscriptions (and of some dropped since), raced against
    /// every write.
    kills: FuturesUnordered<WaitForCancellationFutureOwned>,
}

impl<K: Clone + Unpin, F: Feed, T: Unpin> Default for Subs<K, F, T> {
    fn default() -> Self {
        Self { set: SelectAll::new(), kills: FuturesUnordered::new() }
    }
}

impl<K: Clone + PartialEq + Unpin, F: Feed, T: Unpin> Subs<K, F, T> {
    /// Adds a subscription; `kill` is the token the engine fires to cut it.
    pub(crate) fn add(&mut self, key: K, feed: F, kill: Option<CancellationToken>, state: T) {
        if let Some(kill) = &kill {
            self.kills.push(kill.clone().cancelled_owned());
        }
        self.set.push(Sub { key, feed, kill, ended: false, state });
    }

    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Sub<K, F, T>> {
        self.set.iter()
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.set.iter().any(|s| s.key == *key)
    }

    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut Sub<K, F, T>> {
        self.set.iter_mut().find(|s| s.key == *key)
    }

    /// Drops every subscription `keep` refuses.
    pub(crate) fn retain(&mut self, keep: impl Fn(&Sub<K, F, T>) -> bool) {
        if !self.set.iter().all(&keep) {
            self.set = std::mem::take(&mut self.set).into_iter().filter(|s| keep(s)).collect();
            self.forget_dropped_kills();
        }
    }

    /// Drops the subscription `key`, if there is one.
    pub(crate) fn remove(&mut self, key: &K) {
        self.retain(|s| s.key != *key);
    }

    /// Rebuilds the kill set when dropped subscriptions' tokens pile up in it.
    fn forget_dropped_kills(&mut self) {
        if self.kills.len() > 2 * self.set.len() + 16 {
            self.kills = self.set.iter().filter_map(|s| s.kill.clone()).map(|k| k.cancelled_owned()).collect();
        }
    }

    fn any_cut(&self) -> bool {
        self.set.iter().any(|s| s.feed.is_cut())
    }

    /// The next item or ending; `lagging` is how the dialect closes for a cut.
    /// Cancel safe: nothing is taken until it returns.
    pub(crate) async fn next(&mut self, lagging: Closing) -> Polled<K, F::Item> {
        loop {
            tokio::select! {
                Some((key, item)) = self.set.next() => match item {
                    Some(item) => return Polled::Item(key, item),
                    None => match self.set.iter().find(|s| s.key == key).and_then(|s| s.feed.ended()) {
                        Some(Ended::SessionDeleted) => return Polled::Deleted(key),
                        Some(Ended::Shutdown) => return Polled::Close(Closing::Say(STOPPING)),
                        // Cut for lagging, or closed under a session that is still
                        // there (this node's view of it went stale): the client comes
                        // back with its cursors.
                        Some(Ended::Lagged | Ended::Unloaded) | None => return Polled::Close(lagging),
                    },
                },
                // A token that fired outside a write: a cut closes the socket now (its
                // feed's end would say the same a poll later); a closed stream's end
                // says the rest.
                Some(()) = self.kills.next() => {
                    if self.any_cut() {
                        return Polled::Close(lagging);
                    }
                }
                else => return std::future::pending().await,
            }
        }
    }

    /// Writes messages and flushes once, unless a kill token fires first and a
    /// subscription was cut (a write that cannot finish while a subscription is being
    /// cut means the client stopped reading), or the write takes longer than
    /// [`WRITE_TIMEOUT`]. A token that fires for another reason (a session's stream
    /// closing) lets the write go on. False closes the socket.
    async fn write(&mut self, tx: &mut SplitSink<WebSocket, Message>, messages: impl Iterator<Item = Message>) -> bool {
        let mut messages = messages.peekable();
        if messages.peek().is_none() {
            return true;
        }
        let write = tokio::time::timeout(WRITE_TIMEOUT, async {
            for message in messages {
                tx.feed(message).await?;
            }
            tx.flush().await
        });
        tokio::pin!(write);
        loop {
            tokio::select! {
                biased;
                written = &mut write => return matches!(written, Ok(Ok(()))),
                Some(()) = self.kills.next() => {
                    if self.any_cut() {
                        return false;
                    }
                }
            }
        }
    }
}

/// What a socket dialect does; [`run`] does the rest.
pub(crate) trait Dialect: Send {
    /// Names a subscription on this socket.
    type Key: Clone + PartialEq + Send + Unpin;
    type Feed: Feed<Item: Send>;
    /// What the dialect keeps per subscription.
    type State: Send + Unpin;
    /// What [`next`](Self::next) brings.
    type Event: Send;
    /// Names the socket in logs.
    const NAME: &'static str;
    /// How the socket closes when a subscription is cut for lagging.
    const LAGGING: Closing;

    fn subs(&mut self) -> &mut Subs<Self::Key, Self::Feed, Self::State>;

    /// The next event of the dialect's sources: its subscriptions ([`Subs::next`]) and
    /// whatever else it follows. Raced against the client and the heartbeat, so it must
    /// be cancel safe.
    fn next(&mut self) -> impl Future<Output = Self::Event> + Send;

    /// Handles an event; `Err` closes the socket.
    fn on_event(&mut self, event: Self::Event, out: &mut Outbox) -> impl Future<Output = Result<(), Closing>> + Send;

    /// Handles a client's text message.
    fn on_message(&mut self, text: &str, out: &mut Outbox) -> impl Future<Output = ()> + Send;

    /// Answers a binary message (the client messages are JSON text).
    fn on_binary(&mut self, out: &mut Outbox);

    fn heartbeat(&self) -> Heartbeat;
}

/// The tokens that stop a socket from outside it.
pub(crate) struct Stops {
    /// The server is stopping.
    pub(crate) closing: CancellationToken,
    /// The credential the socket was opened with was revoked.
    pub(crate) revoked: CancellationToken,
}

/// Serves the socket until it closes, a write fails, a subscription is cut, or a stop
/// fires. `out` holds what the dialect already has to say.
pub(crate) async fn run<D: Dialect>(mut dialect: D, socket: WebSocket, mut out: Outbox, every: Duration, stops: Stops) {
    let (mut tx, mut rx) = socket.split();
    let mut beats = crate::http::sse::heartbeat(every);
    let why = loop {
        // The write and the handling of an event or a client message are boxed: this
        // task's future is as large as its largest state, and an idle socket sits in
        // the `select!` below, which needs none of theirs (issue 19: per-socket RSS).
        let messages = out.0.drain(..).map(Message::Text);
        if !Box::pin(dialect.subs().write(&mut tx, messages)).await {
            // Stuck for the write timeout, or cut while a write was blocked.
            break Closing::Gone;
        }
        tokio::select! {
            message = rx.next() => match message {
                Some(Ok(Message::Text(text))) => Box::pin(dialect.on_message(text.as_str(), &mut out)).await,
                Some(Ok(Message::Binary(_))) => dialect.on_binary(&mut out),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_)) | Err(_)) | None => break Closing::Gone,
            },
            event = dialect.next() => {
                if let Err(why) = Box::pin(dialect.on_event(event, &mut out)).await {
                    break why;
                }
            }
            // The server is stopping: say goodbye (1001 going away) rather than vanish
            // when the process ends.
            () = stops.closing.cancelled() => break Closing::Say(STOPPING),
            () = stops.revoked.cancelled() => {
                tracing::debug!(socket = D::NAME, "closing a socket: its credential was revoked");
                break Closing::Say(REVOKED);
            }
            _ = beats.tick() => match dialect.heartbeat() {
                Heartbeat::Text(text) => out.push(text),
                Heartbeat::Ping => {
                    let ping = std::iter::once(Message::Ping(bytes::Bytes::new()));
                    if !Box::pin(dialect.subs().write(&mut tx, ping)).await {
                        break Closing::Gone;
                    }
                }
            },
        }
    };
    // Subscriptions go first: nothing of theirs is queued for a socket that closes.
    drop(dialect);
    if let Closing::Say((code, reason)) = why {
        let close = Message::Close(Some(CloseFrame { code, reason: reason.into() }));
        let _ = tokio::time::timeout(CLOSE_GRACE, tx.send(close)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use futures::channel::mpsc;
    use std::sync::{Arc, Mutex};

    /// A feed the test drives: items through a channel, and the reason it ended.
    struct Fake {
        items: mpsc::UnboundedReceiver<u32>,
        ended: Arc<Mutex<Option<Ended>>>,
    }

    impl Stream for Fake {
        type Item = u32;

        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<u32>> {
            self.items.poll_next_unpin(cx)
        }
    }

    impl Feed for Fake {
        fn ended(&self) -> Option<Ended> {
            *self.ended.lock().expect("not poisoned")
        }
    }

    /// The test's handle on a fake feed: send items, end it for a reason, cut it.
    struct Remote {
        items: mpsc::UnboundedSender<u32>,
        ended: Arc<Mutex<Option<Ended>>>,
        kill: CancellationToken,
    }

    impl Remote {
        /// Ends the feed as the engine does: the reason first, then the token, then the stream.
        fn end(self, why: Ended) {
            *self.ended.lock().expect("not poisoned") = Some(why);
            self.kill.cancel();
            drop(self.items);
        }
    }

    fn add(subs: &mut Subs<&'static str, Fake, ()>, key: &'static str) -> Remote {
        let (tx, rx) = mpsc::unbounded();
        let ended = Arc::new(Mutex::new(None));
        let kill = CancellationToken::new();
        subs.add(key, Fake { items: rx, ended: ended.clone() }, Some(kill.clone()), ());
        Remote { items: tx, ended, kill }
    }

    const LAGGING: Closing = Closing::Say((4000, "behind"));

    /// What `next` has ready now, without waiting.
    fn ready(subs: &mut Subs<&'static str, Fake, ()>) -> Option<Polled<&'static str, u32>> {
        subs.next(LAGGING).now_or_never()
    }

    #[tokio::test]
    async fn items_come_round_robin_and_an_ending_says_why() {
        let mut subs = Subs::default();
        let a = add(&mut subs, "a");
        let b = add(&mut subs, "b");
        for n in 0..3 {
            a.items.unbounded_send(n).expect("open");
        }
        b.items.unbounded_send(10).expect("open");
        let mut got = Vec::new();
        while let Some(Polled::Item(key, n)) = ready(&mut subs) {
            got.push((key, n));
        }
        assert_eq!(got.len(), 4);
        let at = |item| got.iter().position(|g| *g == item).expect("every item comes");
        assert!(at(("b", 10)) < at(("a", 2)), "a busy subscription does not starve another: {got:?}");
        a.end(Ended::SessionDeleted);
        assert!(matches!(ready(&mut subs), Some(Polled::Deleted("a"))));
        assert!(ready(&mut subs).is_none(), "an ended subscription stays pending until it is dropped");
        assert!(subs.contains(&"a"));
        subs.remove(&"a");
        assert!(!subs.contains(&"a") && subs.contains(&"b"));
        b.end(Ended::Shutdown);
        assert!(matches!(ready(&mut subs), Some(Polled::Close(Closing::Say(STOPPING)))));
    }

    #[tokio::test]
    async fn a_fired_token_closes_only_for_a_cut() {
        let mut subs = Subs::default();
        let a = add(&mut subs, "a");
        *a.ended.lock().expect("not poisoned") = Some(Ended::Lagged);
        a.kill.cancel();
        assert!(matches!(ready(&mut subs), Some(Polled::Close(LAGGING))), "a cut closes on its token");

        for (why, ending) in [(Ended::Unloaded, "close"), (Ended::SessionDeleted, "deleted")] {
            let mut subs = Subs::default();
            let a = add(&mut subs, "a");
            *a.ended.lock().expect("not poisoned") = Some(why);
            a.kill.cancel();
            assert!(ready(&mut subs).is_none(), "{why:?}: the token of a closed stream says nothing");
            drop(a.items);
            match ready(&mut subs) {
                Some(Polled::Close(LAGGING)) => assert_eq!(ending, "close"),
                Some(Polled::Deleted("a")) => assert_eq!(ending, "deleted"),
                _ => panic!("{why:?}: its end says why"),
            }
        }
    }

    #[test]
    fn dropped_subscriptions_do_not_pile_up_their_tokens() {
        let mut subs = Subs::default();
        let remotes: Vec<Remote> = (0..100).map(|_| add(&mut subs, "x")).collect();
        subs.remove(&"x");
        assert_eq!(subs.len(), 0);
        assert!(subs.kills.len() <= 16, "{} tokens kept for no subscription", subs.kills.len());
        drop(remotes);
    }
}
