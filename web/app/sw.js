// Spool's service worker, served at /sw.js so its scope is the whole site: it shows the
// server's Web Push messages as notifications and answers their Approve / Deny buttons
// while no Spool tab is open (a phone in a pocket, a closed laptop lid).
//
// Why it is shaped this way:
// * Every push shows a notification: browsers subscribe with `userVisibleOnly`, and a
//   push that shows nothing may cost the site its subscription. So `resolved` (the
//   approval was decided elsewhere) replaces the ask under the same tag with a quiet
//   "Decided" instead of closing it in silence.
// * One tag per approval (`spool-approval-<id>`): the ask, its outcome and any repeat of
//   the same push stack as one notification, never as a pile.
// * An action button sends the message's decision token, not a login: the token is the
//   capability (single use, bound to the approval, its user and this subscription), so
//   a tap decides even when the login cookie has lapsed. The server decides at most
//   once; what it answered comes back as a new notification, since the tap has no page
//   to show it on.
// * No `fetch` handler: pages load straight from the network, as they did before this
//   worker, and nothing is cached here that could go stale against a newer server.
// * A classic script, not a module: module service workers are newer than push in some
//   browsers.

const TAG = 'spool-approval-';
const ICON = '/ui/favicon.svg';
// The decisions behind the two buttons, as the decision-token route names them.
const DECISIONS = { approve: 'once', deny: 'reject' };

// A new version takes over at once: it keeps no state that an old page relies on.
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

self.addEventListener('push', (event) => {
  event.waitUntil(showMessage(readMessage(event.data)));
});

self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  event.waitUntil(handleClick(event.action, event.notification.data ?? {}));
});

self.addEventListener('pushsubscriptionchange', (event) => {
  event.waitUntil(resubscribe(event.oldSubscription, event.newSubscription));
});

/** The push's JSON message, or a plain stand-in when it is not one we can read. */
function readMessage(data) {
  try {
    const message = data?.json();
    if (message && typeof message === 'object' && message.v === 1) return message;
  } catch {
    // not JSON: still show something (see above)
  }
  return { kind: 'unknown', title: 'Spool', body: 'A session may need you.', url: '/' };
}

/** Shows one message; `resolved` replaces the ask it answers. */
async function showMessage(m) {
  const url = sameOrigin(m.url) ?? '/';
  const tag = m.approvalId ? TAG + m.approvalId : 'spool-message';
  if (m.kind === 'resolved') {
    // Decided from this notification: its outcome ("Approved — the run goes on") says
    // more than "Decided", so it stays, shown again quietly (every push shows something).
    const [mine] = (await self.registration.getNotifications({ tag })).filter((n) => n.data?.outcome);
    if (mine) return self.registration.showNotification(mine.title, { body: mine.body, tag, icon: ICON, silent: true, data: mine.data });
    return self.registration.showNotification(m.title || 'Decided', {
      body: m.body || 'Someone answered this already.',
      tag,
      icon: ICON,
      silent: true,
      data: { url },
    });
  }
  // Buttons only with a token to send, and only for the decisions it allows; a question
  // needs its answer typed, so it has none and a tap opens the session.
  const allowed = m.kind === 'approval' && m.token ? (Array.isArray(m.actions) ? m.actions : ['once', 'reject']) : [];
  const actions = [];
  if (allowed.includes('once')) actions.push({ action: 'approve', title: 'Approve' });
  if (allowed.includes('reject')) actions.push({ action: 'deny', title: 'Deny' });
  return self.registration.showNotification(m.title || 'A session needs you', {
    body: m.body || '',
    tag,
    icon: ICON,
    requireInteraction: m.kind === 'approval' || m.kind === 'question',
    renotify: true,
    actions,
    data: { url, token: m.token ?? null, approvalId: m.approvalId ?? null, sessionId: m.sessionId ?? null },
  });
}

/**
 * A click on a notification: `action` is the button ("approve", "deny") or "" for the
 * body. A button decides through the token and shows what the server said; the body
 * opens the session. Resolves to what it showed, `{title, body}`, or `{opened: url}`.
 * Named, and exposed as `self.spoolHandleClick`, because no browser automation can click
 * a notification: the browser tests call it as the click would.
 */
async function handleClick(action, data = {}) {
  const decision = DECISIONS[action];
  const url = sameOrigin(data.url) ?? '/';
  if (!decision || !data.token) return { opened: await openSession(url) };
  const outcome = await decide(data.token, decision);
  const tag = data.approvalId ? TAG + data.approvalId : 'spool-message';
  // The outcome has no buttons: the token is spent either way, and a tap opens the session.
  await self.registration.showNotification(outcome.title, { body: outcome.body, tag, icon: ICON, data: { url, outcome: true } });
  return outcome;
}
self.spoolHandleClick = handleClick;

/** POSTs one decision and says, in a notification's words, what came of it. */
async function decide(token, decision) {
  let res;
  try {
    res = await fetch('/api/decision-tokens/decide', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token, decision }),
    });
  } catch {
    return { status: 0, title: 'Spool could not be reached', body: 'Nothing was decided. Open the session to answer.' };
  }
  const status = res.status;
  if (res.ok) {
    return decision === 'once'
      ? { status, title: 'Approved — the run goes on', body: 'The tool call runs now.' }
      : { status, title: 'Denied — the run goes on without it', body: 'The agent is told you said no.' };
  }
  // 409: this token was used, or the approval was answered elsewhere (another device, a tab).
  if (status === 409) return { status, title: 'Already decided', body: 'This was answered already; nothing changed.' };
  if (status === 410) return { status, title: 'Expired: open the session', body: 'The approval or this notification’s link has expired.' };
  return { status, title: 'Not decided: open the session', body: 'This notification’s link no longer works here.' };
}

/**
 * Focuses a Spool window at `url` (or any Spool window, sent there), else opens one.
 * Browsers allow focusing and opening only inside a notification click, so outside one
 * (a test calling `spoolHandleClick`) the refusal is not an error.
 */
async function openSession(url) {
  const target = new URL(url, self.location.origin).href;
  const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  const exact = windows.find((w) => w.url === target);
  if (exact) return (await allowed(() => exact.focus())) && target;
  for (const w of windows) {
    // Only a window this worker controls can be navigated; one it does not is left alone.
    if (new URL(w.url).origin !== self.location.origin || !w.navigate) continue;
    const moved = await allowed(() => w.navigate(target));
    if (moved === null) continue;
    await allowed(() => (moved ?? w).focus());
    return target;
  }
  return (await allowed(() => self.clients.openWindow(target))) === null ? null : target;
}

/** `act()`'s result, or null when the browser refused it. */
async function allowed(act) {
  try {
    return (await act()) ?? undefined;
  } catch {
    return null;
  }
}

/** `url` if it is a path on this site, else null: a message never sends anyone elsewhere. */
function sameOrigin(url) {
  if (typeof url !== 'string') return null;
  try {
    const u = new URL(url, self.location.origin);
    return u.origin === self.location.origin ? u.pathname + u.search + u.hash : null;
  } catch {
    return null;
  }
}

/**
 * The browser replaced or dropped the subscription (its push service rotated keys): make
 * a new one with the server's key and register it, so pushes keep coming without a tab.
 * The old one fails at the push service (410) and the server drops it then. Open pages
 * hear of the new id so the bell can turn it off later.
 */
async function resubscribe(old, fresh) {
  let subscription = fresh;
  if (!subscription) {
    const res = await fetch('/api/push/key');
    if (!res.ok) return;
    const { publicKey } = await res.json();
    subscription = await self.registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: publicKey });
  }
  const res = await fetch('/api/push/subscriptions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(subscription.toJSON()),
  });
  if (!res.ok) return;
  const { id } = await res.json();
  const pages = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  for (const page of pages) page.postMessage({ type: 'spool.push', id, endpoint: subscription.endpoint, replaced: old?.endpoint ?? null });
}
