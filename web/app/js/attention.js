// Sessions waiting for a person: a run parked at an approval or a question. The tab
// title counts them ("(2) ● Needs you — Fix the tests"), so a waiting session shows in a
// tab strip; the open session's title says "Running" while it works. And when the
// person turned notifications on (the bell by "New session", which asks the browser on
// their click), each session that starts waiting while the page is hidden or another
// session is open gets one notification; clicking it opens that session.
//
// Who waits comes from the list rows' `waiting` flag (the server's pending approvals,
// kept fresh by the list stream) and, for the open session, from its live stream. A
// session notifies only on the change from "not waiting" to "waiting" seen here, so a
// page loaded with sessions already waiting shows them without a burst of notifications.
//
// The bell also subscribes this browser to Web Push (the service worker /sw.js, the
// server's VAPID key, the subscription registered with the server), so an approval
// reaches the person with no Spool tab open, with Approve / Deny on the notification
// itself. Then the server sends and the worker shows, and this page shows none of its
// own: one notification per wait, not two. A browser without a push service (Debian's
// Chromium, some privacy settings) or a server without push keeps the page's own
// notifications, and the bell says which of the two is on.

import { del, get, post } from './api.js';
import { icon } from './icons.js';

const NOTIFY = 'spool.notify';
// This browser's push subscription as the server knows it, `{id, endpoint}`.
const PUSH = 'spool.push';
const LABEL = 'Notify me when a session needs me';
const NO_PUSH = 'This browser has no push service, so Spool notifies you only while one of its tabs is open.';
const SERVER_NO_PUSH = 'This server does not send push notifications, so Spool notifies you only while one of its tabs is open.';

export class Attention {
  /**
   * lists: the ListSync; current(): {id, title, status, waiting} of the open session or
   * null; button: the notifications toggle; toast(text) says why it cannot turn on.
   */
  constructor({ lists, current, button, toast }) {
    Object.assign(this, { lists, current, button, toast });
    this.seen = new Map(); // sessionId → waiting, as last seen
    this.shown = new Map(); // sessionId → the notification shown for its wait
    button.append(icon('bell'));
    button.setAttribute('aria-label', LABEL);
    button.addEventListener('click', () => this.toggle());
    this.paintButton();
    // The worker made a new subscription on its own (the push service rotated it).
    navigator.serviceWorker?.addEventListener('message', (e) => {
      if (e.data?.type === 'spool.push' && this.pushing) remember({ id: e.data.id, endpoint: e.data.endpoint });
    });
  }

  get supported() {
    return typeof window.Notification === 'function';
  }

  /** Notifications are on: the person said so here and the browser allows them. */
  get enabled() {
    return this.supported && Notification.permission === 'granted' && localStorage.getItem(NOTIFY) === 'on';
  }

  /** Push is on for this browser: the server sends, the worker shows. */
  get pushing() {
    return this.enabled && saved() !== null;
  }

  async toggle() {
    if (this.busy) return; // a subscription on its way: one click at a time
    this.busy = true;
    try {
      if (this.enabled) {
        localStorage.removeItem(NOTIFY);
        await unsubscribe();
      } else if (Notification.permission === 'denied') {
        this.toast('Notifications are blocked for this site; allow them in the browser’s site settings.');
      } else {
        const answer = Notification.permission === 'granted' ? 'granted' : await Notification.requestPermission();
        if (answer === 'granted') {
          localStorage.setItem(NOTIFY, 'on');
          const fallback = await subscribe();
          if (fallback) this.toast(fallback);
        }
      }
    } finally {
      this.busy = false;
      this.paintButton();
    }
  }

  /**
   * On load: the browser may have dropped the subscription since the bell made it (site
   * data cleared, the push service expired it), or the server may have (a logout ends
   * the subscriptions made with that login; a push service's 410). Then this page's own
   * notifications take over until the bell is clicked again.
   */
  async recheck() {
    const mine = this.pushing && saved();
    if (!mine) return;
    const subscription = await currentSubscription().catch(() => null);
    let known = true;
    try {
      const { subscriptions } = await get('/api/push/subscriptions');
      known = subscriptions.some((s) => s.id === mine.id);
    } catch {
      // unreachable now: keep what we know
    }
    if (subscription?.endpoint !== mine.endpoint || !known) {
      // Half gone is gone: drop the other half too, so no push arrives that the bell says is off.
      await unsubscribe();
      this.paintButton();
    }
  }

  paintButton() {
    const b = this.button;
    b.hidden = !this.supported;
    if (!this.supported) return;
    b.setAttribute('aria-pressed', String(this.enabled));
    b.dataset.push = String(this.pushing);
    b.title = this.pushing
      ? 'Notifications are on, also with no Spool tab open: click to turn them off'
      : this.enabled
        ? 'Notifications are on while a Spool tab is open: click to turn them off'
        : Notification.permission === 'denied'
          ? 'Notifications are blocked in this browser'
          : LABEL;
  }

  /** Every session we know of, the open one as its stream shows it. */
  sessions() {
    const all = new Map();
    for (const list of this.lists.sessions.values()) for (const s of list) all.set(s.id, { id: s.id, title: s.title, waiting: Boolean(s.waiting), status: s.status });
    const cur = this.current();
    if (cur) all.set(cur.id, { ...all.get(cur.id), ...cur, title: cur.title ?? all.get(cur.id)?.title });
    return [...all.values()];
  }

  /** Repaints the tab title and notifies sessions that started waiting. */
  update() {
    // The first update comes with the first lists, so after any sign-in.
    if (!this.rechecked) {
      this.rechecked = true;
      this.recheck();
    }
    const sessions = this.sessions();
    const cur = this.current();
    const waiting = sessions.filter((s) => s.waiting);
    const name = (s) => s?.title || 'New session';
    let title = cur?.title ? `${cur.title} · Spool` : 'Spool';
    if (waiting.length) {
      // The open session when it is one of them, else the first listed.
      const first = waiting.find((s) => s.id === cur?.id) ?? waiting[0];
      title = `(${waiting.length}) ● Needs you — ${name(first)}`;
    } else if (cur?.status === 'busy') {
      title = `Running — ${title}`;
    }
    if (document.title !== title) document.title = title;

    for (const s of sessions) {
      const before = this.seen.get(s.id);
      this.seen.set(s.id, s.waiting);
      if (s.waiting && before === false) this.notify(s, cur);
      if (!s.waiting) this.shown.get(s.id)?.close();
      if (!s.waiting) this.shown.delete(s.id);
    }
  }

  notify(s, cur) {
    // With push on, the worker shows the server's notification for this wait.
    if (!this.enabled || this.pushing || (s.id === cur?.id && !document.hidden)) return;
    const note = new Notification(`${s.title || 'A session'} needs you`, {
      body: 'A tool call or a question waits for your answer.',
      tag: `spool-waiting-${s.id}`,
      icon: '/ui/favicon.svg',
    });
    note.onclick = () => {
      window.focus();
      location.hash = `#/s/${s.id}`;
      note.close();
    };
    this.shown.set(s.id, note);
  }
}

/** The remembered subscription, or null. */
function saved() {
  try {
    const value = JSON.parse(localStorage.getItem(PUSH));
    return value?.id ? value : null;
  } catch {
    return null;
  }
}

function remember(subscription) {
  localStorage.setItem(PUSH, JSON.stringify(subscription));
}

async function currentSubscription() {
  const registration = await navigator.serviceWorker?.getRegistration('/');
  return (await registration?.pushManager?.getSubscription()) ?? null;
}

/**
 * Subscribes this browser to the server's pushes: registers the worker, subscribes with
 * the server's key and registers the subscription. Resolves to null when push is on, or
 * to the words that say why this page's own notifications stand in for it.
 */
async function subscribe() {
  if (!('serviceWorker' in navigator) || typeof window.PushManager !== 'function') return NO_PUSH;
  let publicKey;
  try {
    ({ publicKey } = await get('/api/push/key'));
  } catch {
    return SERVER_NO_PUSH;
  }
  let subscription;
  try {
    await navigator.serviceWorker.register('/sw.js', { scope: '/' });
    const registration = await navigator.serviceWorker.ready; // subscribing needs an active worker
    subscription = await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: fromBase64Url(publicKey) });
  } catch {
    // Chromium without a push service rejects here ("Registration failed").
    return NO_PUSH;
  }
  try {
    const { id } = await post('/api/push/subscriptions', subscription.toJSON());
    remember({ id, endpoint: subscription.endpoint });
    return null;
  } catch (e) {
    await subscription.unsubscribe().catch(() => {});
    return `Spool could not turn push on for this browser (${e.message}), so it notifies you only while one of its tabs is open.`;
  }
}

/** Turns push off here: the server forgets the subscription, the browser drops it. */
async function unsubscribe() {
  const mine = saved();
  localStorage.removeItem(PUSH);
  // Gone already (404) or unreachable: the push service's 410 removes it later anyway.
  if (mine) await del(`/api/push/subscriptions/${encodeURIComponent(mine.id)}`).catch(() => {});
  const subscription = await currentSubscription().catch(() => null);
  await subscription?.unsubscribe().catch(() => {});
}

/** The key as bytes: every browser takes a BufferSource, not all a base64url string. */
function fromBase64Url(text) {
  const base64 = text.replace(/-/g, '+').replace(/_/g, '/');
  return Uint8Array.from(atob(base64.padEnd(Math.ceil(base64.length / 4) * 4, '=')), (c) => c.charCodeAt(0));
}
