// The permissions panel (issue 17, point 8): the session's own permission rules, with
// where each came from and a way to remove it, so an "Always allow" clicked on an
// approval card can be undone. It opens from a "Rules" button in the session header.
//
// The rules are the session's `permissions` as the session stream delivers them: an
// "Always allow" (and any PATCH) publishes a `session.state` frame, so the panel follows
// another tab's decisions live, without fetching. Removing a rule is
// `DELETE /api/sessions/:id/permissions/:index?tool=…&action=…`: the server removes that
// one rule under the session's lock, so an "Always allow" clicked in another tab at the
// same moment is kept (sending the whole list minus the rule would drop it), and it
// refuses with 409 when the rule at that index is no longer the one shown here. The
// frame that follows repaints the panel. The server's own rules (built-in defaults, then the config
// file) come from `GET /api/sessions/:id/permissions` when the panel opens; they cannot
// change while the server runs, and they cannot be undone from here. Below them, the MCP
// servers and a switch for each (mcp_servers.js).

import { del, get } from './api.js';
import { h } from './dom.js';
import { icon } from './icons.js';
import { McpServers } from './mcp_servers.js';

/**
 * What a person reads as a rule's origin. `always` puts in `allow` rules: `{tool}` for a
 * tool that is not a command, the exact command or the chosen prefix patterns for one.
 */
function origin(rule) {
  return rule.action === 'allow'
    ? '“Always allow” on an approval (or set for this session)'
    : 'Set for this session';
}

const ACTIONS = { allow: 'Allowed', ask: 'Asks first', deny: 'Denied' };

export class PermissionsPanel {
  /** topbar: the session header; before: the element the Rules button goes in front of. */
  constructor({ topbar, before }) {
    this.view = null;
    this.shown = null; // the JSON of the rules last painted, so repaints happen on change only
    this.removing = false;
    this.error = null;
    this.server = null; // the server's rules, once fetched (the same for every session)
    this.button = h('button', {
      class: 'btn small', type: 'button', id: 'permissions', hidden: true,
      'aria-haspopup': 'dialog', title: 'Permission rules of this session',
      onclick: () => this.open(),
    }, icon('shield'), 'Rules');
    topbar.insertBefore(this.button, before);
    this.list = h('div', { class: 'rules-list own' });
    this.serverList = h('div', { class: 'rules-list server' });
    this.dialog = h('dialog', { class: 'dialog rules-dialog', 'aria-labelledby': 'rules-title' },
      h('h2', { id: 'rules-title' }, 'Permission rules'),
      h('h3', { class: 'rules-heading' }, 'This session’s own'),
      h('p', { class: 'muted small-print' }, 'What this session may do without asking. The last matching rule wins.'),
      this.list,
      h('h3', { class: 'rules-heading' }, 'Set by the server'),
      h('p', { class: 'muted small-print' }, 'The built-in defaults, then the server’s config file. A deny here always wins; the rules above decide within the rest.'),
      this.serverList,
      this.mcpPlace = h('div', { class: 'mcp-place' }),
      h('div', { class: 'dialog-actions' },
        h('button', { class: 'btn', type: 'button', onclick: () => this.dialog.close() }, 'Close')));
    this.mcp = new McpServers(this.mcpPlace);
    this.dialog.addEventListener('close', () => {
      this.error = null;
      this.mcp.close();
    });
    document.body.append(this.dialog);
  }

  open() {
    if (!this.view?.store.session) return;
    this.shown = null;
    this.paint();
    this.dialog.showModal();
    if (!this.server) this.fetchServerRules(this.view);
    this.mcp.open(this.view.id);
  }

  async fetchServerRules(view) {
    try {
      const rules = await get(`/api/sessions/${encodeURIComponent(view.id)}/permissions`);
      this.server = rules.server;
    } catch (e) {
      this.server = null;
      this.serverList.replaceChildren(h('p', { class: 'form-error', role: 'alert' }, `Could not load the server's rules: ${e.message}`));
      return;
    }
    this.shown = null;
    this.paint();
  }

  /** Called on every view change: shows the button, repaints an open panel when its rules changed. */
  render(view) {
    if (view !== this.view) {
      this.view = view;
      this.error = null;
      if (this.dialog.open) this.dialog.close();
    }
    this.button.hidden = !view?.store.session;
    if (this.dialog.open) this.paint();
  }

  rules() {
    return this.view?.store.session?.permissions ?? [];
  }

  paint() {
    const rules = this.rules();
    const key = JSON.stringify([rules, this.removing, this.error, this.view?.connected]);
    if (key === this.shown) return;
    this.shown = key;
    if (rules.length === 0) {
      this.list.replaceChildren(h('p', { class: 'rules-empty' },
        'No rules of its own yet. “Always allow” on an approval card adds one here.'));
    } else {
      this.list.replaceChildren(h('ul', { class: 'rules' }, rules.map((r, i) => h('li', { class: 'rule', dataset: { tool: r.tool, action: r.action } },
        this.what(r),
        h('div', { class: 'rule-origin muted' }, origin(r)),
        h('button', {
          class: 'btn small rule-remove', type: 'button', disabled: this.removing || !this.view?.connected,
          'aria-label': `Undo: remove the rule ${r.action} ${r.tool}`,
          onclick: () => this.remove(i, r),
        }, 'Undo')))));
    }
    if (this.error) this.list.append(h('p', { class: 'form-error', role: 'alert' }, this.error));
    if (this.server) {
      // One origin for the whole list (its heading says it), so each row is one line.
      this.serverList.replaceChildren(h('ul', { class: 'rules' }, this.server.map((r) =>
        h('li', { class: 'rule', dataset: { tool: r.tool, action: r.action }, title: 'Set by the server: a built-in default or its config file' }, this.what(r)))));
    } else if (!this.serverList.firstChild) {
      this.serverList.replaceChildren(h('p', { class: 'rules-empty' }, 'Loading…'));
    }
  }

  what(r) {
    return h('div', { class: 'rule-what' },
      h('code', {}, r.tool), (r.pattern ?? '*') === '*' ? ' · any argument' : h('span', {}, ' · ', h('code', {}, r.pattern)),
      h('span', { class: `rule-action is-${r.action}` }, ACTIONS[r.action] ?? r.action),
      timeout(r));
  }

  /** Removes rule `i` (checked to still be `rule`, in case another tab changed the list). */
  async remove(i, rule) {
    const view = this.view;
    const rules = this.rules();
    if (this.removing || !view || JSON.stringify(rules[i]) !== JSON.stringify(rule)) return;
    this.removing = true;
    this.error = null;
    this.paint();
    try {
      const query = new URLSearchParams({ tool: rule.tool, action: rule.action });
      await del(`/api/sessions/${encodeURIComponent(view.id)}/permissions/${i}?${query}`);
    } catch (e) {
      this.error = e.uncertain
        ? 'No answer from the server; the list shows what it has.'
        : e.code === 'rule_changed' ? 'The rules changed meanwhile; nothing was removed. Try again on the list as it is now.' : e.message;
      if (e.uncertain) view.resync('removing a rule answered nothing');
    } finally {
      this.removing = false;
      this.paint();
    }
  }
}

/** What an ask rule says about its wait (README "Timeouts"), or nothing. */
function timeout(r) {
  if (!r.timeout && !r.onTimeout) return '';
  const after = r.timeout === 'never' ? 'never times out' : `after ${r.timeout ?? 'the server TTL'}`;
  const then = { deny: 'deny', allow: 'allow', wait: 'keep waiting' }[r.onTimeout] ?? 'cancel the run';
  return h('span', { class: 'rule-timeout muted' }, r.timeout === 'never' ? ` · ${after}` : ` · ${after}: ${then}`);
}
