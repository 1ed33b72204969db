// The agent's todo list (its `todo_write` tool) as a small checklist above the composer:
// what is done, what it is doing now, what is left. The list lives in the session state
// (`state.todos`, replaced whole by each `todo_write` event), so every tab and a page
// loaded later show the same one. Hidden while the session has none. Rebuilt only when
// the list changed, since this runs on every paint while an answer streams; whether it
// is folded is the person's choice and survives the rebuilds; on a phone it starts folded.

import { h } from './dom.js';
import { icon } from './icons.js';

const MARKS = { completed: 'check', in_progress: 'chevron', cancelled: 'cross' };
const WORDS = { pending: 'To do', in_progress: 'In progress', completed: 'Done', cancelled: 'Cancelled' };

let shown = null; // the list last drawn (its JSON), to skip unchanged repaints
// Null until the person folds or opens it: then a phone's narrow screen starts it folded
// (its summary line still says how far along it is and what is being done now).
let folded = null;
const NARROW = matchMedia('(max-width: 640px)');

export function renderTodos(el, store) {
  const todos = store?.todos ?? [];
  const key = JSON.stringify(todos);
  if (key === shown) return;
  shown = key;
  el.hidden = todos.length === 0;
  if (!todos.length) return el.replaceChildren();
  const done = todos.filter((t) => t.status === 'completed').length;
  const open = todos.filter((t) => t.status !== 'cancelled').length;
  const now = todos.find((t) => t.status === 'in_progress');
  const details = h(
    'details',
    { open: !(folded ?? NARROW.matches), ontoggle: (e) => (folded = !e.target.open) },
    h(
      'summary',
      {},
      h('strong', {}, 'Todo'),
      h('span', { class: 'todo-count' }, `${done} of ${open} done`),
      now ? h('span', { class: 'todo-now' }, now.content) : null,
    ),
    h(
      'ol',
      { class: 'todo-list' },
      todos.map((t) =>
        h(
          'li',
          { class: `todo is-${t.status}`, dataset: { status: t.status, id: t.id ?? '' } },
          h('span', { class: 'todo-mark', title: WORDS[t.status] ?? t.status }, MARKS[t.status] ? icon(MARKS[t.status]) : null),
          h('span', { class: 'visually-hidden' }, `${WORDS[t.status] ?? t.status}: `),
          h('span', { class: 'todo-text' }, t.content),
          t.priority && t.priority !== 'medium' ? h('span', { class: `todo-priority is-${t.priority}` }, t.priority) : null,
        ),
      ),
    ),
  );
  el.replaceChildren(details);
}
