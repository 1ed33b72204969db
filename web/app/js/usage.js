// Usage: what each answer and the whole session used — the model, tokens and cost.
// Per answer, the line under the answer sums the usage its assistant messages carry
// (each step's usage is on its message, and a run's total is their sum), so it streams
// in with the answer and survives a reload with the history. Per session, the header
// shows the totals of `GET /api/sessions/:id/runs`, refetched when a run settles: the
// loaded messages are only a window of a long session. Cost comes from the server's
// price table (`GET /api/models`); a model without a price says "no price set" rather
// than a misleading $0.00. A run stopped or failed mid-answer never heard the provider's
// count: the server estimates it (`usage.estimated`), and the numbers show with "≈".

import { get } from './api.js';
import { h } from './dom.js';

let prices = new Map(); // model name → price, or null when the config sets none

/** Takes the price table from `GET /api/models`. */
export function setModels(models) {
  prices = new Map((models?.models ?? []).map((m) => [m.name, m.price ?? null]));
}

const count = (n) => n.toLocaleString('en-US');

/** US dollars: four decimals below a dollar (answers cost fractions of a cent). */
export function money(cost) {
  return `$${cost < 1 ? cost.toFixed(4) : cost.toFixed(2)}`;
}

const ABOUT = '≈';
const ESTIMATED = 'Estimated: the answer was stopped or failed before the model reported what it used';

function tokens(u) {
  const about = u.estimated ? ABOUT : '';
  const parts = [`${about}${count(u.input)} in`, `${about}${count(u.output)} out`];
  if (u.cacheRead) parts.push(`${count(u.cacheRead)} cached`);
  if (u.cacheWrite) parts.push(`${count(u.cacheWrite)} cache write`);
  return parts.join(' · ');
}

function add(sum, u) {
  for (const k of ['input', 'output', 'reasoning', 'cacheRead', 'cacheWrite', 'cost']) sum[k] += u?.[k] ?? 0;
  sum.estimated ||= Boolean(u?.estimated);
}

const zero = () => ({ input: 0, output: 0, reasoning: 0, cacheRead: 0, cacheWrite: 0, cost: 0, estimated: false });

/**
 * The usage line of every answered round, by the index of the user message that starts
 * it: the models that answered, tokens, cost. One pass over the store per paint; a
 * round whose answer is still streaming has none yet.
 */
export function usageLines(store) {
  const lines = new Map();
  let round = null;
  const finish = () => {
    if (round && round.answered && !round.streaming) lines.set(round.u, line(round));
  };
  for (const i of store.indexes()) {
    const m = store.drafts.get(i) ?? store.messages.get(i);
    if (m.role === 'user') {
      finish();
      round = { u: i, sum: zero(), models: [], answered: false, streaming: false };
      continue;
    }
    if (!round || m.role !== 'assistant') continue;
    if (store.drafts.has(i)) round.streaming = true;
    round.answered = true;
    add(round.sum, m.usage);
    if (m.model && !round.models.includes(m.model)) round.models.push(m.model);
  }
  finish();
  return lines;
}

function line({ u, sum, models }) {
  const priced = models.some((name) => prices.get(name));
  const cost = priced ? `${sum.estimated ? ABOUT : ''}${money(sum.cost)}` : 'no price set';
  return h('div', { class: 'usage', title: sum.estimated ? ESTIMATED : null, dataset: { userIndex: u, testid: 'answer-usage' } },
    h('span', { class: 'usage-model' }, models.join(', ') || 'unknown model'),
    h('span', {}, ` · ${tokens(sum)} · `),
    h('span', { class: 'usage-cost' }, cost));
}

/**
 * Keeps `el` showing the session's totals. Call on every paint; it refetches the
 * session's runs only when the session or its run state changed and no run is going.
 */
export class SessionTotals {
  constructor(el) {
    this.el = el;
    this.key = '';
    this.for = null;
  }

  update(view, models) {
    const store = view?.store;
    const key = store?.session ? `${view.id}|${store.status}|${store.timings.size}` : '';
    if (key === this.key) return;
    this.key = key;
    if (!key || store.status === 'busy') {
      if (!key) this.el.hidden = true;
      return;
    }
    const id = view.id;
    this.for = id;
    get(`/api/sessions/${encodeURIComponent(id)}/runs`)
      .then((runs) => {
        if (this.for !== id) return;
        this.show(runs, store.session.model ?? models?.default);
      })
      .catch(() => {});
  }

  show(runs, model) {
    if (runs.length === 0) {
      this.el.hidden = true;
      return;
    }
    const sum = zero();
    for (const r of runs) add(sum, r.usage);
    const priced = sum.cost > 0 || Boolean(prices.get(model));
    const answers = `${runs.length} ${runs.length === 1 ? 'answer' : 'answers'}`;
    const cost = priced ? `${sum.estimated ? ABOUT : ''}${money(sum.cost)}` : 'no price set';
    this.el.textContent = `${answers} · ${tokens(sum)} · ${cost}`;
    this.el.title = `This session so far: tokens and cost of every answer${sum.estimated ? ' (≈: some were stopped or failed before the model reported what they used)' : ''}`;
    this.el.hidden = false;
  }
}
