// Sidebar: projects and their sessions from ListSync, with new / rename / archive /
// restore / delete. It repaints from the list caches whenever they change; the open
// session's live title, status and waiting (from its stream) override the list's copy.
// A row shows its session idle, running, or waiting for the person ("Needs you": a run
// parked at an approval or question, from the rows' `waiting` flag). Actions
// invalidate the lists they touch right away and the list stream confirms to every page.
//
// Keyboard: Tab reaches each session row once (its link); the row's icon buttons are
// out of the tab order (they keep their names for screen readers) and reached with →
// from the link (← and Esc go back), ↑/↓ move between sessions, F2 renames and Delete
// deletes. A repaint keeps the focused control focused.

import { h } from './dom.js';
import { icon } from './icons.js';
import { get, post, patch, del } from './api.js';
import { groupByDate } from './dates.js';

const COLLAPSED = 'spool.collapsed';
/** How often a waiting row asks again who can answer it. */
const REACH_EVERY = 5000;
/** What a waiting session, or its card, says when no view anywhere can answer it. */
export const NOBODY = 'Nobody can answer this right now';

export class Sidebar {
  /** current(): {id, title, status, waiting} of the open session or null; toast(text) reports errors. */
  constructor({ nav, lists, current, toast }) {
    Object.assign(this, { nav, lists, current, toast });
    this.collapsed = new Set(JSON.parse(localStorage.getItem(COLLAPSED) ?? '[]'));
    this.showArchived = new Set();
    this.editing = null; // {kind: 'session'|'project', id, value}
    this.adding = false;
    lists.active = (key) =>
      key === 'projects' ||
      (key.startsWith('s:') && !this.collapsed.has(key.slice(2))) ||
      (key.startsWith('a:') && this.showArchived.has(key.slice(2)));
    // Date groups move at midnight while the page stays open.
    setInterval(() => this.render(), 60_000);
    // Who can answer a waiting session nobody here has open (GET …/presence), by id:
    // {presence, at}. Asked again every REACH_EVERY while the row waits, since a tab
    // closing elsewhere changes no list row.
    this.reach = new Map();
    this.waitingRows = false;
    setInterval(() => this.waitingRows && this.render(), REACH_EVERY);
  }

  /** The presence of a waiting session shown here but not open here, fetched now and then. */
  reachOf(id) {
    const known = this.reach.get(id);
    if (!known || Date.now() - known.at >= REACH_EVERY) {
      this.reach.set(id, { presence: known?.presence ?? null, at: Date.now() });
      get(`/api/sessions/${encodeURIComponent(id)}/presence`).then(
        (presence) => {
          const before = this.reach.get(id)?.presence;
          this.reach.set(id, { presence, at: Date.now() });
          if (before?.answerers !== presence.answerers) this.render();
        },
        () => {}, // gone or unreachable: the row says nothing more
      );
    }
    return known?.presence ?? null;
  }

  render() {
    this.waitingRows = false;
    const projects = this.lists.projects;
    const focused = document.activeElement?.closest?.('.rename-input') ? document.activeElement : null;
    const keep = focused ? null : this.focusKey();
    const nodes = [];
    if (projects === null) nodes.push(h('p', { class: 'side-empty' }, 'Loading projects…'));
    else if (projects.length === 0 && !this.adding) nodes.push(this.welcome());
    for (const p of projects ?? []) nodes.push(this.project(p));
    this.nav.replaceChildren(...nodes);
    if (focused) this.focusEditor();
    else if (keep) this.restoreFocus(keep);
  }

  /** Names the focused control in the list (its row and its name), to find it after a repaint. */
  focusKey() {
    const el = document.activeElement;
    if (!el || !this.nav.contains(el)) return null;
    const session = el.closest('[data-session-id]');
    const row = session ?? el.closest('[data-project-id]');
    if (!row) return null;
    return { attr: session ? 'session-id' : 'project-id', id: session ? session.dataset.sessionId : row.dataset.projectId, cls: el.className, label: el.getAttribute('aria-label') };
  }

  restoreFocus(k) {
    const row = this.nav.querySelector(`[data-${k.attr}="${CSS.escape(k.id)}"]`);
    const el = [...(row?.querySelectorAll('a, button') ?? [])].find((e) => e.className === k.cls && e.getAttribute('aria-label') === k.label);
    el?.focus({ preventScroll: true });
  }

  /** ↑/↓ between sessions, → into the row's actions, F2 rename, Delete delete. */
  linkKeys(e, s, title, archived) {
    if (e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
    const links = [...this.nav.querySelectorAll('.session-link')];
    const at = links.indexOf(e.currentTarget);
    let handled = true;
    if (e.key === 'ArrowDown') links[at + 1]?.focus();
    else if (e.key === 'ArrowUp') links[at - 1]?.focus();
    else if (e.key === 'ArrowRight') e.currentTarget.closest('.session').querySelector('.row-actions button')?.focus();
    else if (e.key === 'F2' && !archived) this.edit('session', s.id, s.title);
    else if (e.key === 'Delete') this.deleteSession(s, title);
    else handled = false;
    if (handled) e.preventDefault();
  }

  /** Inside a row's actions: ←/→ between them, ← from the first and Esc back to the link. */
  actionKeys(e) {
    const row = e.currentTarget.closest('.session');
    const buttons = [...row.querySelectorAll('.row-actions button')];
    const at = buttons.indexOf(e.target.closest('button'));
    if (at < 0) return;
    const link = row.querySelector('.session-link');
    let handled = true;
    if (e.key === 'ArrowRight') (buttons[at + 1] ?? buttons[at]).focus();
    else if (e.key === 'ArrowLeft') (buttons[at - 1] ?? link).focus();
    else if (e.key === 'Escape') link.focus();
    else handled = false;
    if (handled) {
      e.preventDefault();
      e.stopPropagation(); // Esc here goes back to the row; it does not stop a run
    }
  }

  welcome() {
    return h('div', { class: 'side-empty' },
      h('p', {}, 'No projects yet. A project is a directory the agent may read and change.'),
      h('button', { class: 'btn primary', type: 'button', onclick: () => this.openProjectForm() }, icon('plus'), 'Add a project'));
  }

  project(p) {
    const open = !this.collapsed.has(p.id);
    if (open) this.lists.use(`s:${p.id}`);
    const sessions = this.lists.sessions.get(p.id);
    const editing = this.editing?.kind === 'project' && this.editing.id === p.id;
    return h('section', { class: 'project', dataset: { projectId: p.id } },
      h('div', { class: 'project-head' },
        editing
          ? this.editor()
          : h('button', { class: 'project-toggle', type: 'button', 'aria-expanded': String(open), title: p.path, onclick: () => this.toggle(p.id) },
              icon('chevron', open ? 'turned' : ''), h('span', { class: 'project-name' }, p.name)),
        h('span', { class: 'row-actions' },
          this.iconButton('pencil', `Rename project ${p.name}`, () => this.edit('project', p.id, p.name)),
          this.iconButton('trash', `Delete project ${p.name}`, () => this.deleteProject(p))),
        this.iconButton('plus', `New session in ${p.name}`, () => this.newSession(p.id), 'new-session')),
      open ? this.sessionList(p, sessions) : null);
  }

  sessionList(p, sessions) {
    const showArchived = this.showArchived.has(p.id);
    const archived = this.lists.archived.get(p.id);
    return h('div', { class: 'project-body' },
      sessions === undefined
        ? h('p', { class: 'side-note' }, 'Loading…')
        : sessions.length === 0
          ? h('p', { class: 'side-note' }, 'No sessions yet.')
          : h('ul', { class: 'sessions' }, groupByDate(sessions, (s) => this.session(s, false))),
      h('button', { class: 'archived-toggle', type: 'button', 'aria-expanded': String(showArchived), onclick: () => this.toggleArchived(p.id) },
        icon('archive'), showArchived ? 'Hide archived' : 'Archived'),
      showArchived
        ? archived === undefined
          ? h('p', { class: 'side-note' }, 'Loading…')
          : archived.length === 0
            ? h('p', { class: 'side-note' }, 'Nothing archived.')
            : h('ul', { class: 'sessions archived' }, archived.map((s) => this.session(s, true)))
        : null);
  }

  session(s, archived) {
    const cur = this.current();
    const live = cur?.id === s.id ? cur : null;
    const title = (live?.title ?? s.title) || 'New session';
    const status = live?.status ?? s.status;
    const waiting = live ? live.waiting : Boolean(s.waiting);
    const editing = this.editing?.kind === 'session' && this.editing.id === s.id;
    const state = waiting ? 'waiting' : status === 'busy' ? 'busy' : 'idle';
    if (state === 'waiting' && !live) this.waitingRows = true;
    // Nobody has it open where its approval could be answered (no tab, no client).
    const unreachable = state === 'waiting' && !live && this.reachOf(s.id)?.answerers === 0;
    return h('li', { class: `session${live ? ' is-active' : ''} is-${state}`, dataset: { sessionId: s.id } },
      editing
        ? this.editor()
        : h('a', {
            class: 'session-link',
            href: `#/s/${s.id}`,
            'aria-current': live ? 'page' : null,
            'aria-keyshortcuts': archived ? 'ArrowRight Delete' : 'ArrowRight F2 Delete',
            title,
            onkeydown: (e) => this.linkKeys(e, s, title, archived),
          },
            this.stateMark(state),
            h('span', { class: 'session-title' }, title),
            state === 'waiting'
              ? h('span', { class: 'session-flag' }, h('span', { class: 'visually-hidden' }, '— '), 'Needs you')
              : state === 'busy' ? h('span', { class: 'visually-hidden' }, ' — running') : null,
            unreachable
              ? h('span', { class: 'session-reach', dataset: { testid: 'nobody-can-answer' } }, NOBODY)
              : null),
      h('span', { class: 'row-actions', onkeydown: (e) => this.actionKeys(e) },
        archived
          ? [this.iconButton('restore', `Restore ${title}`, () => this.setArchived(s, false), '', -1),
             this.iconButton('trash', `Delete ${title}`, () => this.deleteSession(s, title), '', -1)]
          : [this.iconButton('pencil', `Rename ${title}`, () => this.edit('session', s.id, s.title), '', -1),
             this.iconButton('archive', `Archive ${title}`, () => this.setArchived(s, true), '', -1),
             this.iconButton('trash', `Delete ${title}`, () => this.deleteSession(s, title), '', -1)]));
  }

  /**
   * A row's state as a shape, not a colour alone: a dot when idle, a spinner while a run
   * works, an exclamation mark when a run waits for the person (an approval or a question),
   * with the row's words ("Needs you", "running") for screen readers.
   */
  stateMark(state) {
    if (state === 'waiting') return icon('alert', 'session-mark');
    return h('span', { class: 'status-dot', title: state === 'busy' ? 'Running' : null });
  }

  /** tabindex -1: out of the tab order, still clickable and named (a session row's actions). */
  iconButton(name, label, onclick, cls = '', tabindex = null) {
    return h('button', { class: `icon-btn ${cls}`.trim(), type: 'button', 'aria-label': label, title: label, tabindex, onclick }, icon(name));
  }

  editor() {
    const input = h('input', { class: 'rename-input', type: 'text', value: this.editing.value, 'aria-label': 'New name', maxlength: 200 });
    input.addEventListener('input', () => (this.editing.value = input.value));
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') this.commitEdit();
      if (e.key === 'Escape') {
        this.editing = null;
        this.render();
      }
    });
    // A repaint replaces the input; only a real blur of the live input commits.
    input.addEventListener('blur', () => setTimeout(() => input.isConnected && this.editing && this.commitEdit(), 0));
    return input;
  }

  edit(kind, id, value) {
    this.editing = { kind, id, value: value ?? '' };
    this.render();
    this.focusEditor(true);
  }

  focusEditor(select = false) {
    const input = this.nav.querySelector('.rename-input');
    if (!input) return;
    input.focus();
    if (select) input.select();
  }

  async commitEdit() {
    const { kind, id, value } = this.editing;
    this.editing = null;
    this.render();
    const name = value.trim();
    if (!name) return;
    try {
      if (kind === 'session') {
        await patch(`/api/sessions/${id}`, { title: name });
        this.refreshSessions(this.projectOf(id));
      } else {
        await patch(`/api/projects/${id}`, { name });
        this.lists.invalidate(['projects'], 0);
      }
    } catch (e) {
      this.toast(`Could not rename: ${e.message}`);
    }
  }

  projectOf(sessionId) {
    return this.lists.findSession(sessionId)?.projectId;
  }

  refreshSessions(projectId) {
    if (projectId) this.lists.invalidate([`s:${projectId}`, `a:${projectId}`], 0);
  }

  toggle(id) {
    if (this.collapsed.has(id)) this.collapsed.delete(id);
    else this.collapsed.add(id);
    localStorage.setItem(COLLAPSED, JSON.stringify([...this.collapsed]));
    this.render();
  }

  toggleArchived(id) {
    if (this.showArchived.has(id)) this.showArchived.delete(id);
    else {
      this.showArchived.add(id);
      this.lists.use(`a:${id}`);
    }
    this.render();
  }

  async newSession(projectId) {
    try {
      const s = await post('/api/sessions', { projectId });
      this.collapsed.delete(projectId);
      this.refreshSessions(projectId);
      location.hash = `#/s/${s.id}`;
    } catch (e) {
      this.toast(`Could not create a session: ${e.message}`);
    }
  }

  async setArchived(s, archived) {
    try {
      await patch(`/api/sessions/${s.id}`, { archived });
      this.refreshSessions(s.projectId);
    } catch (e) {
      this.toast(`Could not ${archived ? 'archive' : 'restore'}: ${e.message}`);
    }
  }

  async deleteSession(s, title) {
    if (!confirm(`Delete “${title}” with all its messages? This cannot be undone.`)) return;
    try {
      await del(`/api/sessions/${s.id}`);
      this.refreshSessions(s.projectId);
      if (this.current()?.id === s.id) location.hash = '';
    } catch (e) {
      this.toast(`Could not delete: ${e.message}`);
    }
  }

  async deleteProject(p) {
    if (!confirm(`Delete project “${p.name}” and all its sessions? Files on disk are not touched.`)) return;
    try {
      await del(`/api/projects/${p.id}`);
      this.lists.invalidate(['projects'], 0);
      const cur = this.current();
      if (cur && this.projectOf(cur.id) === p.id) location.hash = '';
    } catch (e) {
      this.toast(`Could not delete the project: ${e.message}`);
    }
  }

  openProjectForm() {
    this.adding = true;
    this.onAddProject?.();
  }
}
