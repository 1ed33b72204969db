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

import { icon } from './icons.js';

const NOTIFY = 'spool.notify';
const LABEL = 'Notify me when a session needs me';

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
  }

  get supported() {
    return typeof window.Notification === 'function';
  }

  /** Notifications are on: the person said so here and the browser allows them. */
  get enabled() {
    return this.supported && Notification.permission === 'granted' && localStorage.getItem(NOTIFY) === 'on';
  }

  async toggle() {
    if (this.enabled) {
      localStorage.removeItem(NOTIFY);
    } else if (Notification.permission === 'denied') {
      this.toast('Notifications are blocked for this site; allow them in the browser’s site settings.');
    } else {
      const answer = Notification.permission === 'granted' ? 'granted' : await Notification.requestPermission();
      if (answer === 'granted') localStorage.setItem(NOTIFY, 'on');
    }
    this.paintButton();
  }

  paintButton() {
    const b = this.button;
    b.hidden = !this.supported;
    if (!this.supported) return;
    b.setAttribute('aria-pressed', String(this.enabled));
    b.title = this.enabled ? 'Notifications are on: click to turn them off' : Notification.permission === 'denied' ? 'Notifications are blocked in this browser' : LABEL;
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
    if (!this.enabled || (s.id === cur?.id && !document.hidden)) return;
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
