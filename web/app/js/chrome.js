// The frame around the conversation: header title, plan-mode toggle, model picker and
// scripted badge, notices (offline at once; reconnect with Retry only after the 2 s
// grace), and the status line (connection, run state). Writes only what changed, since
// it runs on every paint while an answer streams. The tab's title is attention.js's.

import { h } from './dom.js';
import { waitingFor } from './cards.js';
import { icon } from './icons.js';
import { SessionTotals } from './usage.js';

const $ = (id) => document.getElementById(id);

function set(el, prop, value) {
  if (el[prop] !== value) el[prop] = value;
}

let totals = null; // the header's session totals (tokens, cost), see usage.js

export function renderChrome(page, { retry }) {
  const { view, models, connectivity } = page;
  const store = view?.store;
  set($('title'), 'textContent', view ? (store.session?.title || (store.loaded ? 'New session' : 'Loading…')) : 'Spool');

  totals ??= new SessionTotals($('session-usage'));
  totals.update(view, models);

  // Who is on the session (every node, every client): the server's `session.presence`.
  const presence = store?.presence;
  const chip = $('presence');
  set(chip, 'hidden', !presence);
  if (presence) {
    set(chip, 'textContent', presenceText(presence));
    set(chip, 'className', `presence-chip${presence.answerers === 0 ? ' is-unanswered' : ''}`);
  }

  set($('scripted'), 'hidden', !(models && !models.configured));
  const picker = $('model-picker');
  const select = $('model');
  set(picker, 'hidden', !view || !models || models.models.length < 2);
  if (models && select.options.length !== models.models.length) {
    select.replaceChildren(...models.models.map((m) => h('option', { value: m.name }, m.name)));
  }
  if (models && store?.session) set(select, 'value', store.session.model ?? models.default);
  set(select, 'disabled', !view?.connected);

  // Plan mode: pressed while the session only looks (see the exit_plan card).
  const plan = $('plan-mode');
  set(plan, 'hidden', !store?.session);
  const planning = store?.session?.mode === 'plan';
  if (plan.getAttribute('aria-pressed') !== String(planning)) plan.setAttribute('aria-pressed', String(planning));
  set(plan, 'disabled', !view?.connected);

  notices(view, connectivity.online, retry);

  const conn = $('conn');
  const state = !view ? '' : view.deleted ? 'gone' : !connectivity.online ? 'offline' : view.connected ? 'live' : view.showNotice ? 'reconnecting' : 'connecting';
  set(conn, 'className', `conn is-${state}`);
  set($('conn-text'), 'textContent', { live: 'Live', gone: 'Deleted', offline: 'Offline', reconnecting: 'Reconnecting…', connecting: 'Connecting…', '': '' }[state]);
  const run = !store ? '' : store.status !== 'busy' ? 'Idle' : store.activeRun?.status === 'interrupted' ? waitingFor(store.approvals[0]?.tool, store.approvals[0]) : 'Running';
  set($('run-state'), 'textContent', run);
  set($('run-state'), 'className', `run-state is-${run.split(' ')[0].toLowerCase()}`);
}

/** "2 views · 1 can answer" (a hidden page's answerer still counts: it is there). */
export function presenceText(p) {
  const views = `${p.viewers} ${p.viewers === 1 ? 'view' : 'views'}`;
  return `${views} · ${p.answerers === 0 ? 'nobody' : p.answerers} can answer`;
}

let shown = '';

function notices(view, online, retry) {
  const el = $('notices');
  let key = '';
  let node = null;
  if (!online) {
    key = 'offline';
    node = h('div', { class: 'notice offline', role: 'status' }, icon('wifiOff'),
      h('span', {}, 'You are offline. What is loaded stays here, and so does your text; the conversation reconnects when the network is back.'));
  } else if (view?.error) {
    key = `error:${view.error}`;
    node = h('div', { class: 'notice error', role: 'alert' }, h('span', {}, view.error));
  } else if (view?.showNotice) {
    key = 'reconnect';
    node = h('div', { class: 'notice reconnect', role: 'status', dataset: { testid: 'reconnect-notice' } },
      h('span', { class: 'spinner' }),
      h('span', {}, 'Connection lost. Reconnecting…'),
      h('button', { class: 'btn small', type: 'button', onclick: retry }, 'Retry'));
  }
  if (key === shown) return;
  shown = key;
  el.replaceChildren(...(node ? [node] : []));
}
