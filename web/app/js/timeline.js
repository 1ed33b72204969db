// Timeline: paints one SessionStore as the conversation column. Rows are cached by
// message index and rebuilt only when the store bumped that row's revision (or after a
// snapshot), so streaming repaints one row per animation frame, not the whole history.
// Open/closed toggles and an approval card's half-typed message survive repaints.
// Prompts queued behind the run (Enter while it goes) show last, each with a remove button;
// the queue box and its rows are kept and updated in place by message id, so a ✕ under
// the pointer is the same element from mouse down to mouse up while a run streams.
// Following: the view stays at the live end until the reader scrolls up (then "Jump to
// latest" brings them back), whatever changes the timeline's height or its content's —
// a todo list opening above the composer, a card unfolding, Markdown swapped in.
// An answer's text is a TextView kept per message and block (text.js): Markdown HTML from
// the server, swapped in place when it arrives, without repainting the rows.
// Message times, Edit, Regenerate, Retry, a turn's versions and "Undo to here" come from
// message_actions.js (with branches.js and undo_dialog.js); a pending undo's banner, with
// Redo, ends the conversation.
// A model's reasoning is not part of the conversation (seed 001): a draft that thinks
// says "Thinking…", and a finished answer's footer offers "Show thinking".
// The focus follows the approvals (issue 36): a new card takes it unless the person is
// busy elsewhere, and a decided card hands it to the next waiting card, else the prompt.
// A card that takes the focus by itself holds its keys a moment (KEY_HOLD_MS), so a
// letter typed just as it came decides nothing; typed from the prompt, it lands there.

import { h, reconcile } from './dom.js';
import { icon } from './icons.js';
import { TextView, copyButton } from './text.js';
import { onRendered } from './markdown.js';
import { toolCard, approvalCard, updateApproval, waitingFor } from './cards.js';
import { callArguments } from './tool_diff.js';
import { duration } from './format.js';
import { messageTime } from './message_actions.js';
import { fileLinks, messageFiles } from './attachments.js';
import { usageLines } from './usage.js';
import { focusPrompt, typing } from './keys.js';

/**
 * How long a card that took the focus by itself ignores its keys: about the time browsers
 * wait before a permission prompt's buttons work. Long enough for a letter already on its
 * way, short enough that a person who means to decide is not kept waiting.
 */
export const KEY_HOLD_MS = 600;

/** What a person should do about a run that ended this way (by its error code). */
const ENDINGS = {
  tool_outcome_unknown: 'Check whether its change happened before asking for it again.',
  server_restarted: 'What streamed before the restart is kept above; send the prompt again to continue.',
};

/** Sets a text node's content only when it differs (no mutation, no layout, when not). */
function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

export class Timeline {
  constructor(scroller, { onLoadEarlier, decide, removeQueued, resumeQueue, examples, actions, connected, prompt }) {
    this.scroller = scroller;
    this.list = h('div', { class: 'rows' });
    this.jump = h('button', { class: 'btn jump-latest', type: 'button', hidden: true, onclick: () => this.toLatest() },
      icon('chevron'), 'Jump to latest');
    // A sticky strip of no height after the rows: the button floats over the bottom of
    // the visible conversation without adding to what scrolls.
    scroller.replaceChildren(this.list, h('div', { class: 'jump-strip' }, this.jump));
    this.follow = true; // keep the live end in view (until the reader scrolls up)
    this.lastTop = 0;
    this.listen(scroller);
    this.onLoadEarlier = onLoadEarlier;
    this.decide = decide;
    this.removeQueued = removeQueued;
    this.resumeQueue = resumeQueue;
    this.resuming = false;
    this.queueBox = null; // the queue's section, kept while the queue has prompts
    this.queueRows = new Map(); // queued message id → {li, remove}
    this.removing = new Set(); // ids of queued prompts whose removal is on its way
    this.examples = examples;
    this.actions = actions; // MessageActions: times, Edit, Regenerate, Retry (message_actions.js)
    this.connected = connected ?? (() => true);
    this.rows = new Map(); // index → {key, el}
    this.open = new Map(); // details key → open
    this.cards = new Map(); // approvalId → element
    this.prompt = prompt ?? null; // the composer's textarea: where the focus goes after the last card
    this.unseen = false; // a card came and has not had the focus yet
    this.decided = false; // a card left with the focus in it since the last paint
    this.hold = null; // {card, from, timer}: the card whose keys wait (see takeFocus)
    this.list.addEventListener('keydown', (e) => this.heldKey(e), true);
    this.list.addEventListener('pointerdown', () => this.release()); // a click is the person's own move
    this.ui = new Map(); // approvalId → {busy, error}
    this.loadingEarlier = false;
    this.texts = new Map(); // `${index}:${block}` → TextView
    this.thoughts = new Set(); // indexes of answers whose thinking the reader unfolded
    this.shells = new Map(); // index → an answer's {article, body}, refilled on change
    const stop = onRendered(() => (this.list.isConnected ? this.refreshTexts() : stop()));
  }

  /**
   * Following is a state, changed only by the reader: a scroll that moves up (wheel,
   * keys, scroll bar, touch) stops it, reaching the bottom or "Jump to latest" resumes
   * it. (Measuring "near the bottom?" before each paint, as before, lost the end for
   * good whenever something other than the rows grew — the todo panel took 538 px and
   * every later paint saw the reader "scrolled up".) A ResizeObserver on the timeline
   * and on its rows keeps a following view at the end after any change of size, before
   * the browser paints it.
   */
  listen(scroller) {
    const onScroll = () => {
      const top = scroller.scrollTop;
      if (this.gap() <= 2) this.follow = true;
      else if (top < this.lastTop - 1) this.follow = false;
      this.lastTop = top;
      this.showJump();
    };
    // A wheel turned up stops following at once, before a paint could pin it back down
    // (a paint setting scrollTop would cancel the browser's smooth scroll), whenever
    // there is anything above to scroll to.
    const onWheel = (e) => {
      if (e.deltaY < 0 && scroller.scrollTop > 0) {
        this.follow = false;
        this.showJump();
      }
    };
    // So do the keys that scroll up, and a finger dragging the conversation down.
    const onKey = (e) => {
      if (['PageUp', 'ArrowUp', 'Home'].includes(e.key) && !e.target.closest?.('textarea, input, select')) onWheel({ deltaY: -1 });
    };
    let touchY = null;
    const onTouchStart = (e) => (touchY = e.touches[0]?.clientY ?? null);
    const onTouchMove = (e) => {
      const y = e.touches[0]?.clientY;
      if (touchY !== null && y !== undefined && y > touchY + 4) onWheel({ deltaY: -1 });
    };
    scroller.addEventListener('scroll', onScroll, { passive: true });
    scroller.addEventListener('wheel', onWheel, { passive: true });
    scroller.addEventListener('keydown', onKey);
    scroller.addEventListener('touchstart', onTouchStart, { passive: true });
    scroller.addEventListener('touchmove', onTouchMove, { passive: true });
    const resized = new ResizeObserver(() => this.pin());
    resized.observe(scroller);
    resized.observe(this.list);
    this.unlisten = () => {
      scroller.removeEventListener('scroll', onScroll);
      scroller.removeEventListener('wheel', onWheel);
      scroller.removeEventListener('keydown', onKey);
      scroller.removeEventListener('touchstart', onTouchStart);
      scroller.removeEventListener('touchmove', onTouchMove);
      resized.disconnect();
    };
  }

  /** Pixels of conversation below the visible part. */
  gap() {
    return this.scroller.scrollHeight - this.scroller.scrollTop - this.scroller.clientHeight;
  }

  /** Keeps a following view at the live end. */
  pin() {
    if (this.follow && this.gap() > 0) this.scroller.scrollTop = this.scroller.scrollHeight;
    this.lastTop = this.scroller.scrollTop;
    this.showJump();
  }

  showJump() {
    const hidden = this.follow || this.gap() <= 40;
    if (this.jump.hidden !== hidden) this.jump.hidden = hidden;
  }

  /** "Jump to latest": back to the live end, following again. */
  toLatest() {
    this.follow = true;
    this.pin();
    this.scroller.focus({ preventScroll: true }); // the button hides; keep the focus in the conversation
  }

  dispose() {
    this.unlisten();
  }

  /** Swaps in the Markdown HTML that arrived, keeping a following reader at the end. */
  refreshTexts() {
    let changed = false;
    for (const view of this.texts.values()) changed = view.refresh() || changed;
    if (changed) this.pin();
  }

  textView(i, ci) {
    const key = `${i}:${ci}`;
    let view = this.texts.get(key);
    if (!view) this.texts.set(key, (view = new TextView()));
    return view;
  }

  paint(store) {
    this.actions?.sync(store, this.connected());
    const nodes = [];
    if (!store.loaded) nodes.push(h('div', { class: 'placeholder' }, h('span', { class: 'spinner' }), 'Loading the conversation…'));
    const known = store.firstKnown();
    if (store.loaded && known > 0) nodes.push(this.earlierButton(known));
    const calls = new Set();
    for (const m of [...store.messages.values(), ...store.drafts.values()]) {
      if (m.role === 'assistant') for (const c of m.content) if (c.type === 'toolCall') calls.add(c.id);
    }
    // The call each waiting approval is about, with the approval (a server's question
    // asked while its call runs reads differently).
    const waiting = new Map(store.approvals.map((a) => [a.toolCallId, a]));
    // A guardrail stopped the run before the calls of its last answer it has not run:
    // they wait on it (not "Running").
    const guard = store.approvals.find((a) => a.tool === 'guardrail' && a.payload?.guardrail);
    const last = guard && [...store.messages.values()].findLast((m) => m.role === 'assistant');
    for (const c of last?.content ?? []) {
      const unrun = (store.tools.get(c.id)?.status ?? 'running') === 'running';
      if (c.type === 'toolCall' && unrun && !waiting.has(c.id)) waiting.set(c.id, guard);
    }
    let round = null;
    const usage = usageLines(store);
    const indexes = store.indexes();
    this.indexes = indexes;
    for (const i of indexes) {
      const m = store.drafts.get(i) ?? store.messages.get(i);
      if (m.role === 'user') {
        if (round !== null) nodes.push(this.timing(store, round), usage.get(round));
        round = i;
      }
      if (m.role === 'toolResult' && calls.has(m.toolCallId)) continue;
      nodes.push(this.row(store, i, m, waiting));
    }
    // The waiting cards come right under the call they ask about, before the round's
    // clock and usage (below them, the card was cut off from its call).
    nodes.push(...this.approvals(store));
    if (round !== null) nodes.push(this.timing(store, round), usage.get(round));
    if (store.loaded && indexes.length === 0) nodes.push(this.empty());
    const running = [...store.tools.values()].some((t) => t.status === 'running' && calls.has(t.toolCallId));
    if (store.status === 'busy' && store.drafts.size === 0 && !running && store.approvals.length === 0) {
      nodes.push(h('div', { class: 'working' }, h('span', { class: 'dots' }, h('i'), h('i'), h('i')), 'Working…'));
    }
    if (store.notice) nodes.push(h('div', { class: 'run-notice', role: 'status' }, store.notice));
    if (this.actions && store.loaded) nodes.push(this.actions.undo.banner(store, this.connected()));
    nodes.push(this.queued(store));
    reconcile(this.list, nodes);
    this.pin();
    this.moveFocus();
  }

  /**
   * Where the focus goes when cards come and go. A card that left with the focus in it
   * (decided here or in another tab) hands it to the oldest waiting card, else to the
   * prompt. A new card takes it unless the person is busy elsewhere (see free()).
   */
  moveFocus() {
    const oldest = this.list.querySelector('.approval-card');
    if (!oldest) this.unseen = false;
    if (this.decided) {
      this.decided = this.unseen = false;
      if (oldest) this.takeFocus(oldest, { preventScroll: this.follow });
      else if (this.prompt) focusPrompt(this.prompt);
    } else {
      this.offerFocus();
    }
  }

  /**
   * Gives a card that came the focus, now or, when the person was busy, later: the
   * composer calls this once it has sent the prompt and emptied the box (a run's card
   * often comes before the answer to the send that started it).
   */
  offerFocus() {
    const oldest = this.list.querySelector('.approval-card');
    if (!this.unseen || !oldest || !this.free()) return;
    this.unseen = false;
    this.takeFocus(oldest, { preventScroll: true });
  }

  /**
   * Gives `card` the focus without the person asking for it (a card that came, or the
   * next one after a decision), and holds its keys for KEY_HOLD_MS: someone who was about
   * to type must not approve or reject what they never read with their first letter
   * ("no thanks", "yes"). While held, the card says so (`data-keys="held"`: its key hints
   * show dimmed). Tab, a click or Alt+A are the person's own moves and end the hold.
   */
  takeFocus(card, options) {
    const from = document.activeElement === this.prompt ? this.prompt : null;
    card.focus(options);
    if (document.activeElement !== card) return;
    this.release();
    card.dataset.keys = 'held';
    this.hold = { card, from, timer: setTimeout(() => this.release(), KEY_HOLD_MS) };
  }

  /** Ends the hold: the held card's keys work. */
  release() {
    if (!this.hold) return;
    clearTimeout(this.hold.timer);
    delete this.hold.card.dataset.keys;
    this.hold = null;
  }

  /**
   * A key on a held card (capture phase, before the card's own keys in cards.js and the
   * page's in keys.js). A character or Backspace typed while the card took the focus from
   * the prompt goes back to the prompt with the focus: the browser inserts it where the
   * focus is once keydown is handled, so "no thanks" reads "no thanks" in the box, and
   * the card, not lost, takes the focus again once that is sent (offerFocus). Taken from
   * anywhere else, the key is dropped. Other keys (Tab, arrows, Esc, shortcuts) act.
   */
  heldKey(e) {
    const hold = this.hold;
    if (!hold || e.target !== hold.card) return; // on one of its buttons: tabbed or clicked to
    if (e.ctrlKey || e.metaKey || e.altKey || e.isComposing) return;
    if (e.key.length !== 1 && e.key !== 'Backspace') return;
    e.stopPropagation();
    if (hold.from) {
      this.release();
      this.unseen = true;
      hold.from.focus({ preventScroll: true });
    } else {
      e.preventDefault();
    }
  }

  /**
   * True when a new card may take the focus: the person is not typing (text in the
   * prompt, or any other text box), not in the sidebar, the header or a dialog, and not
   * reading history (the view follows the live end).
   */
  free() {
    const el = document.activeElement;
    if (!this.follow) return false;
    if (!el || el === document.body || el === this.scroller) return true;
    if (el === this.prompt) return !el.value;
    return this.list.contains(el) && !typing(el);
  }

  /** Alt+A: the focus to the oldest waiting card, scrolled into view. False when none waits. */
  focusApproval() {
    const card = this.list.querySelector('.approval-card');
    this.release(); // asked for: its keys work at once
    card?.focus();
    return Boolean(card);
  }

  row(store, i, m, waiting) {
    const draft = store.drafts.has(i);
    // A prompt being edited keeps its element (and the box's focus and caret) through
    // snapshots and state frames: only its own Edit state or the connection rebuild it.
    const editing = m.role === 'user' && this.actions?.editing.has(i);
    const key = editing
      ? `edit:${this.actionKey(store, i, m)}`
      : `${store.epoch}:${store.revs.get(i) ?? 0}:${draft}:${m.role === 'assistant' ? this.waitKey(m, waiting) : ''}:${this.actionKey(store, i, m)}`;
    const cached = this.rows.get(i);
    if (cached && cached.key === key) return cached.el;
    const el = this.message(store, i, m, draft, waiting);
    this.rows.set(i, { key, el });
    return el;
  }

  /** What a row's actions depend on (message_actions.js), so the cached row rebuilds when it changes. */
  actionKey(store, i, m) {
    if (!this.actions || m.role === 'toolResult') return '';
    if (m.role === 'user') return `${this.actions.rowKey(i, store)}:${this.connected()}`;
    return `${this.actions.rev}:${this.connected()}:${this.actions.lastAnswer(store, this.indexes) === i}`;
  }

  waitKey(m, waiting) {
    return m.content.filter((c) => c.type === 'toolCall' && waiting.has(c.id)).map((c) => c.id).join(',');
  }

  message(store, i, m, draft, waiting) {
    const attrs = { class: `msg ${m.role}${draft ? ' is-draft' : ''}`, dataset: { index: i, role: m.role } };
    if (m.role === 'user') {
      if (this.actions && !draft) return h('article', attrs, this.actions.userRow(store, i, m, this.connected()));
      const text = m.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
      const files = messageFiles(m);
      const bubble = h('div', { class: 'bubble' }, text);
      return h('article', attrs, files ? h('div', { class: 'msg-col' }, files, bubble) : bubble);
    }
    if (m.role === 'toolResult') {
      const exec = store.tools.get(m.toolCallId);
      return h('article', attrs, toolCard({ id: m.toolCallId, name: m.toolName, args: exec?.args, exec, open: this.open }));
    }
    const blocks = m.content.map((c, ci) => this.block(store, i, ci, c, draft, waiting));
    if (draft && m.content.length === 0) blocks.push(h('span', { class: 'dots' }, h('i'), h('i'), h('i')));
    // The reasoning itself is not shown (seed 001), only that the model is at it.
    if (draft && m.content.at(-1)?.type === 'thinking') {
      blocks.push(h('div', { class: 'thinking-status', role: 'status' }, h('span', { class: 'dots' }, h('i'), h('i'), h('i')), 'Thinking…'));
    }
    if (m.stopReason === 'error') blocks.push(h('p', { class: 'msg-error' }, m.errorMessage ?? 'The model failed.'));
    if (m.stopReason === 'aborted') blocks.push(h('p', { class: 'msg-note' }, 'Stopped.'));
    if (!draft) {
      // One footer row: the time, Show thinking and Copy, then Regenerate
      // (message_actions.js), which shows only while the pointer is on the answer: placed
      // before the others, its room was a hole between the time and Copy.
      const footer = (this.actions ? this.actions.answerFooter(store, this.indexes, i, m, this.connected()) : null)
        ?? h('div', { class: 'msg-actions' }, messageTime(m.timestamp));
      const regenerate = footer.querySelector('[data-action="regenerate"]');
      if (m.content.some((c) => c.type === 'thinking' && c.thinking)) footer.insertBefore(this.thinkingToggle(i), regenerate);
      const source = m.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n\n');
      if (source) footer.insertBefore(copyButton('Copy the answer as Markdown', () => source, 'Copy'), regenerate);
      blocks.push(footer);
    }
    return this.answerShell(i, attrs, blocks);
  }

  /**
   * An answer's article, kept per index and refilled rather than built anew: a streaming
   * answer's text element then stays in the document between deltas, and the browser
   * lays out only what changed (moving it into a new article costs a layout of the whole
   * answer, every frame).
   */
  answerShell(i, attrs, blocks) {
    let shell = this.shells.get(i);
    if (!shell) {
      const body = h('div', { class: 'body' });
      shell = { article: h('article', {}, h('div', { class: 'avatar', 'aria-hidden': 'true' }, 'S'), body), body };
      this.shells.set(i, shell);
    }
    shell.article.className = attrs.class;
    Object.assign(shell.article.dataset, attrs.dataset);
    reconcile(shell.body, blocks);
    return shell.article;
  }

  block(store, i, ci, c, draft, waiting) {
    if (c.type === 'text') return this.textView(i, ci).update(c.text, draft);
    if (c.type === 'thinking') {
      // Seed 001: reasoning stays in events and snapshots but is hidden from the
      // conversation; the answer's "Show thinking" unfolds it (thinkingToggle).
      return h('div', { class: 'thinking', hidden: draft || !this.thoughts.has(i), dataset: { testid: 'thinking' } }, c.thinking);
    }
    if (c.type === 'toolCall') {
      const exec = store.tools.get(c.id);
      if (c.name === 'exit_plan' && exec?.status === 'success') return this.planBlock(i, ci, exec.args ?? c.arguments);
      const streaming = draft && typeof c.arguments === 'string';
      return toolCard({ id: c.id, name: c.name, args: c.arguments, exec: store.tools.get(c.id), waiting: waiting.get(c.id) ?? null, streaming, open: this.open });
    }
    return null;
  }

  /**
   * "Show thinking" / "Hide thinking" in an answer's footer: the answer's reasoning,
   * hidden from the conversation, unfolds above its text on demand. Remembered per
   * answer while the session is open; the row is not rebuilt, only its blocks shown.
   */
  thinkingToggle(i) {
    const label = h('span', {});
    const button = h('button', { class: 'msg-action thinking-toggle', type: 'button' }, label);
    const show = (shown) => {
      label.textContent = shown ? 'Hide thinking' : 'Show thinking';
      button.setAttribute('aria-expanded', String(shown));
      for (const el of button.closest('article')?.querySelectorAll('.thinking') ?? []) el.hidden = !shown;
    };
    button.addEventListener('click', () => {
      const shown = !this.thoughts.has(i);
      if (shown) this.thoughts.add(i);
      else this.thoughts.delete(i);
      show(shown);
    });
    show(this.thoughts.has(i));
    return button;
  }

  /**
   * A plan the person accepted (`exit_plan`), open where its call was: what the agent
   * then carries out stays readable, not folded into a tool card's arguments.
   */
  planBlock(i, ci, args) {
    const plan = typeof args?.plan === 'string' ? args.plan : '';
    return h('section', { class: 'plan-accepted', 'aria-label': 'The accepted plan' },
      h('div', { class: 'plan-accepted-head' }, icon('check'), h('strong', {}, 'Plan accepted')),
      this.textView(i, `${ci}:plan`).update(plan, false));
  }

  timing(store, u) {
    const t = store.timings.get(u);
    if (!t) return null;
    const end = t.endedAt ?? Date.now();
    const first = t.firstTokenAt ? ` · first token after ${duration(t.firstTokenAt - t.startedAt)}` : '';
    const took = duration(end - t.startedAt);
    if (t.endedAt && (t.status === 'failed' || t.status === 'cancelled')) return this.ending(t, took, store);
    // A run parked at a card is not working: it waits for the person (for as long as
    // they take, which read as "Working for 14 min").
    const waiting = !t.endedAt && store.activeRun?.status === 'interrupted' ? store.approvals[0] : null;
    const text = t.endedAt
      ? `Answered in ${took}${first}`
      : waiting ? `${waitingFor(waiting.tool, waiting)} · ${took} since the prompt` : `Working for ${took}${first}`;
    return h('div', { class: 'timing', dataset: { userIndex: u } }, icon('clock'), text);
  }

  /** A run that did not complete says how it ended and what that means for the person. */
  ending(t, took, store) {
    const verb = t.status === 'failed' ? 'Failed' : 'Stopped';
    const why = t.error?.message ? `: ${t.error.message}` : '';
    const hint = ENDINGS[t.error?.code] ?? null;
    return h('div', { class: `timing ended ${t.status}`, dataset: { userIndex: t.userMessageIndex, code: t.error?.code ?? '' } },
      icon('clock'),
      h('span', {}, `${verb} after ${took}${why}.`, hint ? h('span', { class: 'hint-text' }, ` ${hint}`) : null),
      this.actions?.retryButton(store, t.userMessageIndex, this.connected()) ?? null);
  }

  earlierButton(known) {
    return h('div', { class: 'earlier' },
      h('button', { class: 'btn ghost', type: 'button', disabled: this.loadingEarlier, onclick: () => this.onLoadEarlier() },
        this.loadingEarlier ? 'Loading…' : `Load earlier messages (${known} more)`));
  }

  empty() {
    return h('div', { class: 'empty-chat' },
      icon('chat', 'big'),
      h('h2', {}, 'Start the conversation'),
      h('p', {}, 'Ask for something below. Tool calls, approvals and answers appear here as they happen.'),
      this.examples?.() ?? null);
  }

  approvals(store) {
    const ids = new Set(store.approvals.map((a) => a.id));
    for (const [id, card] of this.cards) {
      if (ids.has(id)) continue;
      if (card.contains(document.activeElement)) this.decided = true;
      this.cards.delete(id);
    }
    return store.approvals.map((a) => {
      let card = this.cards.get(a.id);
      if (!card) {
        card = approvalCard(a, (decision, message, extra) => this.decide(a, decision, message, extra), callArguments(store, a.toolCallId));
        this.cards.set(a.id, card);
        this.unseen = true;
      }
      updateApproval(card, a, this.ui.get(a.id) ?? {}, store.presence);
      return card;
    });
  }

  /**
   * The prompts waiting for the run, next first; each can be removed before it runs.
   * The box and each prompt's row are built once and updated in place (rows keyed by
   * the queued message's id): this runs on every paint of a streaming answer, and a
   * rebuilt ✕ between mouse down and up loses the click. A paused queue (Stop with
   * prompts waiting) says so and offers Resume.
   */
  queued(store) {
    if (store.queue.length === 0) {
      this.queueRows = new Map();
      this.queueBox = null;
      return null;
    }
    if (!this.queueBox) {
      const count = h('span', { class: 'queue-count' });
      const note = h('span', { class: 'muted' });
      const resume = h('button', { class: 'btn small queue-resume', type: 'button', onclick: () => this.resumeQueue?.() }, 'Resume');
      const list = h('ol', { class: 'queue-list' });
      const box = h('section', { class: 'queue', 'aria-label': 'Queued prompts' },
        h('h3', { class: 'queue-title' }, count, note, resume), list);
      this.queueBox = { box, count, note, resume, list };
      this.queueRows = new Map();
    }
    const { box, count, note, resume, list } = this.queueBox;
    const paused = !!store.queuePaused;
    const n = store.queue.length;
    setText(count, `${n === 1 ? '1 prompt' : `${n} prompts`} queued${paused ? ' · paused' : ''}`);
    setText(note, paused
      ? ' · by Stop: nothing runs until you resume it or send a prompt'
      : ' · each runs when the one before it has finished');
    resume.hidden = !paused;
    resume.disabled = !!this.resuming;
    box.classList.toggle('is-paused', paused);
    const rows = new Map();
    for (const q of store.queue) {
      let row = this.queueRows.get(q.id);
      if (!row) {
        // A prompt of files alone is named by its files.
        const files = q.files ?? [];
        const label = q.text.trim() || files.map((f) => f.name).join(', ');
        const remove = h('button', {
          class: 'icon-btn queued-remove',
          type: 'button',
          'aria-label': `Remove from the queue: ${label.slice(0, 60)}`,
          title: 'Remove from the queue',
          onclick: () => this.removeQueued(q),
        }, icon('cross'));
        const body = h('div', { class: 'queued-body' },
          fileLinks(files, { className: 'queued-files' }),
          q.text ? h('span', { class: 'queued-text' }, q.text) : null);
        row = { li: h('li', { class: 'queued', dataset: { messageId: q.id } }, body, remove), remove };
      }
      const removing = this.removing.has(q.id);
      if (row.remove.disabled !== removing) row.remove.disabled = removing;
      rows.set(q.id, row);
    }
    this.queueRows = rows;
    reconcile(list, [...rows.values()].map((r) => r.li));
    return box;
  }

  /**
   * Scrolls to message `index` and marks it a moment (a search result's match). A tool
   * result shows inside its call's card, so the nearest row at or before it stands in.
   * The reader is then reading history: following stops, as when they scroll up.
   */
  reveal(index) {
    const rows = [...this.list.querySelectorAll('article[data-index]')];
    const row = rows.filter((r) => Number(r.dataset.index) <= index).at(-1);
    if (!row) return;
    this.follow = false;
    row.scrollIntoView({ block: 'center' });
    this.lastTop = this.scroller.scrollTop;
    this.showJump();
    row.classList.remove('found');
    void row.offsetWidth; // restart the animation when the same row is found again
    row.classList.add('found');
    setTimeout(() => row.classList.remove('found'), 2500);
  }

  /** Runs `change` (which prepends rows) without moving what the reader is looking at. */
  keepPosition(change) {
    const before = this.scroller.scrollHeight - this.scroller.scrollTop;
    change();
    this.scroller.scrollTop = this.scroller.scrollHeight - before;
  }
}
