// What a tool will change and what it changed (issue 17, point 2), for cards.js: on an
// approval card, the server's preview of a write/edit as a diff with line numbers, and
// an Edit action that opens the call's arguments (a write's content, an edit's two
// strings, a bash command, or the JSON) so the person can approve with changes — sent
// as the decision `{fill: arguments}`, which the server runs instead of the model's. On
// a finished edit/write card, the diff of what it did. Kept out of cards.js so the
// cards' other work merges around it.

import { h } from './dom.js';
import { icon } from './icons.js';
import { diffLines, diffTable, fold, oldFromPreview, parseUnified, splitLines } from './diff.js';

/** Largest edited text accepted (characters); the server has its own body limit. */
export const MAX_EDIT_CHARS = 1_000_000;

/**
 * The previews this tab was shown, by tool call id, with the arguments they were of: a
 * finished card of a call approved here shows the same diff, numbered as in the file.
 * Bounded: the oldest are forgotten first.
 */
const seen = new Map();
const SEEN_MAX = 200;

function remember(callId, preview, args, old = null, first = null) {
  seen.delete(callId);
  seen.set(callId, { preview, args, old, first });
  while (seen.size > SEEN_MAX) seen.delete(seen.keys().next().value);
}

/** The arguments of the call `id` as the store holds them (its assistant message). */
export function callArguments(store, id) {
  const owner = store.callOwner?.get(id);
  const message = owner === undefined ? null : (store.messages.get(owner) ?? store.drafts?.get(owner));
  const call = message?.content?.find((c) => c.type === 'toolCall' && c.id === id);
  const args = call?.arguments ?? store.tools?.get(id)?.args;
  return args && typeof args === 'object' ? args : null;
}

/** The server's preview: a diff table when it is a diff, else its text (why it would fail). */
function previewView(text, label) {
  const parsed = parseUnified(text);
  if (!parsed) return h('pre', { class: 'approval-preview' }, text);
  return diffTable(parsed.rows, { label, cut: parsed.cut });
}

/** The text fields a person edits for `tool`, as [key, label, rows]. */
function fieldsFor(tool, args) {
  if (tool === 'write' && typeof args.content === 'string') return [['content', `New content of ${args.path}`, 12]];
  if (tool === 'edit' && typeof args.oldString === 'string' && typeof args.newString === 'string') {
    return [['oldString', 'Text to replace', 4], ['newString', 'Replacement', 6]];
  }
  if (tool === 'bash' && typeof args.command === 'string') return [['command', 'Command', 3]];
  return null;
}

/**
 * The change part of an approval card: the preview as a diff and, when the call's
 * `args` are known, an Edit button opening them. `send(decision)` is the card's (it
 * adds the card's optional message).
 */
export function approvalChange(approval, args, send) {
  const p = approval.payload ?? {};
  const hasPreview = typeof p.preview === 'string';
  if (hasPreview && args) remember(approval.toolCallId, p.preview, args);
  const shown = h('div', { class: 'approval-diff' }, hasPreview ? previewView(p.preview, 'Preview of the change') : null);
  if (!args) return shown;
  const fields = fieldsFor(approval.tool, args);
  const inputs = new Map();
  const error = h('p', { class: 'approval-edit-error', role: 'alert', hidden: true });
  const editor = h('div', { class: 'approval-edit', hidden: true });
  const area = (key, label, rows, value) => {
    // As tall as the text, up to `rows`; the person can drag it taller.
    const lines = String(value).split('\n').length;  // "a\n" is two: room for the next line
    const t = h('textarea', { class: 'approval-edit-text', rows: Math.min(rows, Math.max(2, lines)), spellcheck: 'false', 'aria-label': label, dataset: { field: key } });
    t.value = value;
    // One redraw per frame, however many input events arrive: Chromium delivers a pasted
    // or inserted multi-line text as one input event per line, and each redraw diffs the
    // whole text (1,000 lines took 43 s event by event).
    let frame = 0;
    t.addEventListener('input', () => {
      if (frame) return;
      frame = requestAnimationFrame(() => {
        frame = 0;
        t.rows = Math.min(rows, Math.max(2, t.value.split('\n').length));
        redraw();
      });
    });
    inputs.set(key, t);
    return h('label', { class: 'approval-edit-field' }, h('span', {}, label), t);
  };
  if (fields) for (const [key, label, rows] of fields) editor.append(area(key, label, rows, args[key]));
  else editor.append(area('json', 'Arguments (JSON)', 8, JSON.stringify(args, null, 2)));

  /** The edited arguments, or an error saying what is wrong with them. */
  const edited = () => {
    for (const t of inputs.values()) if (t.value.length > MAX_EDIT_CHARS) return { error: `At most ${MAX_EDIT_CHARS.toLocaleString('en')} characters.` };
    if (!fields) {
      try {
        const parsed = JSON.parse(inputs.get('json').value);
        if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return { error: 'The arguments must be a JSON object.' };
        return { args: parsed };
      } catch (e) {
        return { error: `Not valid JSON: ${e.message}` };
      }
    }
    const next = { ...args };
    for (const [key, t] of inputs) next[key] = t.value;
    if (approval.tool === 'edit' && next.oldString === '') return { error: 'The text to replace cannot be empty.' };
    if (approval.tool === 'bash' && !next.command.trim()) return { error: 'The command cannot be empty.' };
    return { args: next };
  };

  function redraw() {
    const e = edited();
    error.hidden = !e.error;
    error.textContent = e.error ?? '';
    approve.disabled = Boolean(e.error);
    if (e.args && hasPreview) shown.replaceChildren(editedDiff(approval.tool, p.preview, args, e.args) ?? previewView(p.preview, 'Preview of the change'));
  }

  const approve = h('button', {
    class: 'btn primary', type: 'button', 'data-decision': 'fill',
    onclick: () => {
      const e = edited();
      if (e.error) return redraw();
      // A write's old file, or where an edit's text starts, still numbers the finished
      // card's diff as the file's.
      const old = approval.tool === 'write' ? oldFromPreview(p.preview, args.content) : null;
      const first = approval.tool === 'edit' && hasPreview ? startLine(p.preview, e.args.oldString) : null;
      remember(approval.toolCallId, null, e.args, old, first);
      send({ fill: e.args });
    },
  }, icon('check'), 'Approve with changes');
  const cancel = h('button', {
    class: 'btn', type: 'button',
    onclick: () => {
      for (const [key, t] of inputs) t.value = fields ? args[key] : JSON.stringify(args, null, 2);
      editor.hidden = true;
      open.hidden = false;
      editing(false);
      redraw();
    },
  }, 'Discard changes');
  editor.append(error, h('div', { class: 'approval-actions' }, approve, cancel));
  const open = h('button', {
    class: 'btn approval-edit-open', type: 'button',
    onclick: () => {
      editor.hidden = false;
      open.hidden = true;
      editing(true);
      inputs.values().next().value?.focus();
    },
  }, 'Edit before approving');
  // While the arguments are open, the card's own Approve buttons (which run the model's
  // arguments) are hidden, so an edit is never dropped by the wrong button; Reject stays.
  const editing = (on) => view.closest('.approval-card')?.classList.toggle('is-editing', on);
  const view = h('div', { class: 'approval-change-view' }, shown, open, editor);
  return view;
}

/**
 * The diff of edited arguments. A write: against the file the server saw (rebuilt from
 * its preview); when that cannot be rebuilt (a cut or binary preview), against the
 * model's content. An edit: the two strings, numbered from where the text to replace
 * starts in the file (found in the preview), else from 1.
 */
function editedDiff(tool, preview, original, next) {
  if (tool === 'write') {
    const old = oldFromPreview(preview, original.content);
    if (old !== null) return diffTable(fold(diffLines(old, next.content)), { label: 'Preview of the edited change' });
    return h('div', {},
      h('p', { class: 'diff-note' }, 'Compared with the content the agent proposed (the file is too large to compare here):'),
      diffTable(fold(diffLines(original.content, next.content)), { label: 'Your changes to the proposed content' }));
  }
  if (tool === 'edit') {
    const first = startLine(preview, next.oldString);
    return h('div', {},
      first === null ? h('p', { class: 'diff-note' }, 'Lines of the replaced text:') : null,
      diffTable(fold(diffLines(next.oldString, next.newString, { firstOld: first ?? 1, firstNew: first ?? 1 })), { label: 'Preview of the edited change', snippet: true }));
  }
  return null;
}

/** The file line where `text` starts, from the old side of the server's preview. */
function startLine(preview, text) {
  const head = splitLines(text)[0]?.replace(/\n$/, '');
  const parsed = parseUnified(preview);
  if (head === undefined || !parsed) return null;
  const row = parsed.rows.find((r) => r.type !== 'add' && r.type !== 'skip' && r.text === head);
  return row ? row.old : null;
}

/**
 * The diff on a finished `write`/`edit` card, or null. The server keeps the diff of what
 * the call changed with its stored result (`diff`, also in snapshots), so that one is
 * shown whenever it is there, after a reload too. Results stored before that: a call
 * approved in this tab shows the preview it was approved on when it ran as previewed; an
 * edit otherwise shows its two strings; a write that created its file shows the content.
 */
export function finishedDiff(name, args, exec) {
  if ((name !== 'write' && name !== 'edit') || exec?.status !== 'success' || !args) return null;
  const known = seen.get(exec.toolCallId);
  const body = (() => {
    const stored = typeof exec.diff === 'string' ? parseUnified(exec.diff) : null;
    if (stored) return diffTable(stored.rows, { label: 'Change made', cut: stored.cut });
    if (known && JSON.stringify(known.args) === JSON.stringify(args)) {
      const parsed = parseUnified(known.preview);
      if (parsed) return diffTable(parsed.rows, { label: 'Change made', cut: parsed.cut });
      if (name === 'write' && known.old !== null) return diffTable(fold(diffLines(known.old, args.content)), { label: 'Change made' });
      if (name === 'edit' && known.first !== null) {
        const at = { firstOld: known.first, firstNew: known.first };
        return diffTable(fold(diffLines(args.oldString, args.newString, at)), { label: 'Change made', snippet: true });
      }
    }
    if (name === 'edit' && typeof args.oldString === 'string' && typeof args.newString === 'string') {
      return h('div', {},
        h('p', { class: 'diff-note' }, 'Lines of the replaced text:'),
        diffTable(fold(diffLines(args.oldString, args.newString)), { label: 'Change made', snippet: true }));
    }
    if (name === 'write' && typeof args.content === 'string' && /^created /.test(exec.result ?? '')) {
      return diffTable(fold(diffLines('', args.content)), { label: 'Change made' });
    }
    return null;
  })();
  return body ? h('div', { class: 'tool-diff' }, body) : null;
}
