// The MCP servers part of the Rules panel (issue 38): each server the config names, its
// state (idle until a session starts it, starting, ready, or failed with the reason), its
// tools, and a switch that offers it to this session or not.
//
// It reads `GET /api/mcp?session=…` when the panel opens and again every few seconds
// while it stays open: a server's state changes on its own (a session's turn starts it,
// it crashes, it is retried), and no stream carries it. A server given up on after
// failing again and again has a "Try again" (`POST /api/mcp/:server/retry`). The switch is
// `PUT /api/sessions/:id/mcp/:server {enabled}`, which the session keeps; it counts
// from the session's next model turn. A server without a choice follows its config
// (its `projects`), which the row says when the choice differs from it.

import { api, get } from './api.js';
import { h } from './dom.js';

/** How often an open panel asks again, in ms. */
const REFRESH_MS = 3000;

const STATES = { idle: 'Idle', starting: 'Starting…', ready: 'Ready', failed: 'Failed' };

export class McpServers {
  /** parent: where the section goes (inside the Rules dialog). */
  constructor(parent) {
    this.session = null;
    this.servers = null; // the list last fetched for `session`
    this.error = null;
    this.busy = new Set(); // servers whose switch is on its way
    this.shown = null; // what was last painted: a refresh that changed nothing repaints nothing (the focus stays)
    this.timer = null;
    this.list = h('div', { class: 'rules-list mcp' });
    this.section = h('section', { class: 'mcp-section', hidden: true, 'aria-labelledby': 'mcp-title' },
      h('h3', { class: 'rules-heading', id: 'mcp-title' }, 'MCP servers'),
      h('p', { class: 'muted small-print' }, 'Tools from the servers the config names. Their calls ask like any tool unless a rule says otherwise. Turning one off here counts from this session’s next turn.'),
      this.list);
    parent.append(this.section);
  }

  /** The panel opened on `session` (an id): fetch now and keep fetching until `close`. */
  open(session) {
    if (session !== this.session) {
      this.session = session;
      this.servers = null;
    }
    this.error = null;
    this.refresh();
    clearInterval(this.timer);
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  close() {
    clearInterval(this.timer);
    this.timer = null;
  }

  async refresh() {
    const session = this.session;
    let servers;
    try {
      servers = await get(`/api/mcp?session=${encodeURIComponent(session)}`);
    } catch (e) {
      if (session !== this.session) return;
      this.error = `Could not load the MCP servers: ${e.message}`;
      this.paint();
      return;
    }
    if (session !== this.session) return;
    this.servers = servers;
    this.paint();
  }

  paint() {
    const servers = this.servers ?? [];
    const key = JSON.stringify([servers, this.error, [...this.busy]]);
    if (key === this.shown) return;
    this.shown = key;
    // A server without any MCP server configured shows nothing of this.
    this.section.hidden = servers.length === 0 && !this.error;
    this.list.replaceChildren(
      ...(servers.length ? [h('ul', { class: 'rules' }, servers.map((s) => this.row(s)))] : []),
      ...(this.error ? [h('p', { class: 'form-error', role: 'alert' }, this.error)] : []));
  }

  row(s) {
    const use = s.session ?? { enabled: false, by_default: false };
    const id = `mcp-switch-${s.name}`;
    const state = h('span', { class: `mcp-state is-${s.state}` }, STATES[s.state] ?? s.state);
    const tools = s.tools.length
      ? h('div', { class: 'mcp-tools muted' }, `${s.tools.length} tool${s.tools.length === 1 ? '' : 's'}: `,
        ...s.tools.flatMap((t, i) => [i ? ', ' : '', h('code', { title: t.description }, t.name)]))
      : h('div', { class: 'mcp-tools muted' }, s.state === 'idle' ? 'Tools are listed once a session starts it.' : 'No tools listed.');
    const differs = use.choice !== undefined && use.choice !== use.by_default;
    return h('li', { class: 'rule mcp-server', dataset: { server: s.name, state: s.state } },
      h('div', { class: 'rule-what' }, h('strong', {}, s.name), ' ', state,
        h('div', { class: 'mcp-target muted' }, `${s.transport} · `, h('code', {}, s.target))),
      h('label', { class: 'mcp-switch', for: id },
        h('input', {
          id, type: 'checkbox', role: 'switch', checked: use.enabled, disabled: this.busy.has(s.name),
          onchange: (e) => this.choose(s.name, e.target.checked),
        }),
        'Offer to this session'),
      ...(s.state === 'failed' ? [h('div', { class: 'mcp-reason', role: 'status' }, s.reason ?? 'It failed.',
        s.retry_at_ms
          ? ` Next try at ${new Date(s.retry_at_ms).toLocaleTimeString()}.`
          : ' Given up after failing again and again. ',
        s.retry_at_ms ? null : h('button', {
          class: 'btn small mcp-retry', type: 'button', disabled: this.busy.has(s.name),
          'aria-label': `Try ${s.name} again`, onclick: () => this.retry(s.name),
        }, 'Try again'))] : []),
      tools,
      ...(differs ? [h('div', { class: 'rule-origin muted' },
        `Set for this session; the config ${use.by_default ? 'offers it' : 'does not offer it'} to this project.`)] : []));
  }

  /** Forgets a given-up server's failures: the session's next turn starts it again. */
  async retry(name) {
    this.busy.add(name);
    this.error = null;
    this.paint();
    try {
      const { server } = await api('POST', `/api/mcp/${encodeURIComponent(name)}/retry`, {});
      if (this.servers) this.servers = this.servers.map((s) => (s.name === name ? { ...server, session: s.session } : s));
    } catch (e) {
      this.error = e.uncertain ? 'No answer from the server; try again.' : e.message;
    } finally {
      this.busy.delete(name);
      this.paint();
      this.refresh();
    }
  }

  async choose(name, enabled) {
    const session = this.session;
    this.busy.add(name);
    this.error = null;
    this.paint();
    try {
      const server = await api('PUT', `/api/sessions/${encodeURIComponent(session)}/mcp/${encodeURIComponent(name)}`, { enabled });
      if (session === this.session && this.servers) {
        this.servers = this.servers.map((s) => (s.name === name ? server : s));
      }
    } catch (e) {
      this.error = e.uncertain ? 'No answer from the server; the switch shows what it had.' : e.message;
    } finally {
      this.busy.delete(name);
      this.paint();
      if (session === this.session) this.refresh();
    }
  }
}
