// Tool cards (running / success / error, collapsible arguments and output, a running
// command's live output) and approval cards (what will happen — with a diff for a file
// change — and why it asks; Approve once / Always / Reject with an optional message).
// For a command, "Always allow" is a choice among what the server offers
// (`payload.alwaysOptions`: this exact command, or prefix patterns such as `git status *`),
// never all of bash by one click. Cards are plain DOM; the timeline decides when to
// rebuild them, and where the focus goes when one comes or goes.
// Keys on a focused card (issue 36): y approves once, a always allows, n rejects (a
// plan: y accepts, n asks for changes), 1-9 pick a question's option. Each button shows
// its key (a <kbd>, hidden from screen readers, which read `aria-keyshortcuts`).

import { h } from './dom.js';
import { icon } from './icons.js';
import { mainArgument, pretty } from './format.js';
import { approvalChange, finishedDiff } from './tool_diff.js';
import { markdownBlock } from './text.js';

const LABEL = {
  preparing: 'Preparing',
  waiting: 'Waiting for approval',
  running: 'Running',
  success: 'Done',
  error: 'Failed',
};

/**
 * What a waiting call waits for, in the person's words: the agent's question (or a
 * server's, asked while its call runs: `approval.payload.live`) an answer, a plan a
 * review, a client tool call (`approval.payload.client`: a tool the prompt declared,
 * which the client that sent it runs) the client's result, anything else an approval.
 * Keyed by the tool's name, and the approval where the caller has it.
 */
export function waitingFor(tool, approval = null) {
  if (approval?.payload?.client === true) return `Waiting for the client to run ${tool}`;
  if (tool === 'question' || approval?.payload?.live === true) return 'Waiting for your answer';
  return tool === 'exit_plan' ? 'Waiting for your review' : LABEL.waiting;
}

/** `open` remembers which sections a person opened or closed, across repaints. */
export function toolCard({ id, name, args, exec, waiting, streaming, open }) {
  const status = streaming ? 'preparing' : waiting ? 'waiting' : (exec?.status ?? 'running');
  const shownArgs = exec?.args ?? args;
  const output = exec?.result ?? null;
  const lines = output ? output.split('\n').length : 0;
  const mark =
    status === 'success' ? icon('check') : status === 'error' ? icon('cross') : status === 'waiting' ? icon('shield') : h('span', { class: 'spinner', 'aria-hidden': 'true' });
  return h(
    'div',
    { class: `tool-card is-${status}`, dataset: { callId: id, status } },
    h(
      'div',
      { class: 'tool-head' },
      h('span', { class: 'tool-mark' }, mark),
      h('span', { class: 'tool-name' }, name),
      h('code', { class: 'tool-arg', title: mainArgument(shownArgs) }, mainArgument(shownArgs)),
      h('span', { class: 'tool-status' }, status === 'waiting' ? waitingFor(name, waiting) : (LABEL[status] ?? status)),
    ),
    finishedDiff(name, shownArgs, exec),
    section(open, `${id}:args`, 'Arguments', pretty(shownArgs ?? {}), false),
    output !== null ? section(open, `${id}:out`, `Output · ${lines} line${lines === 1 ? '' : 's'}`, output, status === 'error') : null,
    output === null && exec?.output ? live(exec) : null,
  );
}

/**
 * What a running call has printed so far, shown open: monospace, bounded height, and
 * pinned to its newest line (a column-reversed scroller starts at its bottom, so a card
 * rebuilt for the next update needs no scrolling code). Once the call ends, its result
 * takes the place of this (after a Stop the result keeps what was printed).
 */
function live(exec) {
  return h(
    'div',
    { class: 'tool-live', role: 'log', 'aria-label': `${exec.toolName} output so far` },
    h('div', { class: 'tool-live-scroll' }, h('pre', { class: 'tool-live-pre' }, exec.output)),
    exec.outputTruncated
      ? h('p', { class: 'tool-truncated' }, 'Live output stopped at 256 KiB; the rest shows when the command ends.')
      : null,
  );
}

function section(open, key, title, body, byDefault) {
  const d = h('details', { class: 'tool-section', open: open.get(key) ?? byDefault, dataset: { section: key.split(':').at(-1) } },
    h('summary', {}, title),
    h('pre', { class: 'tool-pre' }, body));
  d.addEventListener('toggle', () => open.set(key, d.open));
  return d;
}

/**
 * An approval card. `decide(decision, message)` sends the decision; the card keeps its
 * message box across repaints, so only `updateApproval` touches it afterwards.
 */
export function approvalCard(approval, decide, args = null) {
  if (approval.payload?.live === true) return liveAskCard(approval, decide);
  if (approval.payload?.client === true) return clientCallCard(approval, decide);
  if (approval.kind === 'select_option' || approval.kind === 'provide_input') return questionCard(approval, decide);
  if (approval.tool === 'exit_plan') return planCard(approval, decide);
  if (approval.tool === 'guardrail' && approval.payload?.guardrail) return guardrailCard(approval, decide);
  const p = approval.payload ?? {};
  const message = h('input', {
    class: 'approval-message',
    type: 'text',
    placeholder: 'Optional message to the agent',
    'aria-label': 'Message with your decision',
    maxlength: 2000,
  });
  const send = (decision, extra) => decide(decision, message.value.trim() || undefined, extra);
  const always = alwaysChoice(approval, send);
  const card = h(
    'section',
    { class: 'approval-card', role: 'group', tabindex: -1, 'aria-label': `Approval needed: ${approval.tool}`, 'aria-describedby': `${approval.id}-what`, dataset: { approvalId: approval.id } },
    h('div', { class: 'approval-head' }, icon('shield'), h('strong', {}, 'Approval needed'), h('span', { class: 'approval-tool' }, approval.tool)),
    h('p', { class: 'approval-change', id: `${approval.id}-what` }, p.change ?? `${approval.tool} wants to run`),
    p.argument ? h('pre', { class: 'approval-arg' }, p.argument) : null,
    approvalChange(approval, args, send),
    h('p', { class: 'approval-reason' }, 'Why it asks: ', p.reason ?? 'the permission rules say to ask before this tool runs.'),
    h('p', { class: 'approval-notice', role: 'status', hidden: true }),
    message,
    always.choices,
    h(
      'div',
      { class: 'approval-actions' },
      h('button', { class: 'btn primary', type: 'button', 'data-decision': 'once', ...key('y'), onclick: () => send('once') }, icon('check'), 'Approve once', hint('y')),
      always.button,
      h('button', { class: 'btn danger', type: 'button', 'data-decision': 'reject', ...key('n'), onclick: () => send('reject') }, icon('cross'), 'Reject', hint('n')),
    ),
    h('p', { class: 'approval-foot' }),
  );
  decideByKey(card);
  updateApproval(card, approval, {});
  return card;
}

/** A decision button's key, for its attributes: `aria-keyshortcuts` names it to assistive technology. */
function key(k) {
  return { 'aria-keyshortcuts': k };
}

/** The key as the button shows it; screen readers hear `aria-keyshortcuts` instead. */
function hint(k) {
  return h('kbd', { class: 'key-hint', 'aria-hidden': 'true' }, k.toUpperCase());
}

/**
 * Makes the card's keys press its buttons while the focus is on the card or one of its
 * buttons or radios: a key presses the button whose `aria-keyshortcuts` it is. Not in
 * the card's text boxes (there the keys are letters), not with Ctrl, Alt or Cmd (those
 * belong to the browser and the page), and not a button that is hidden (while editing)
 * or disabled.
 */
function decideByKey(card) {
  card.addEventListener('keydown', (e) => {
    if (e.defaultPrevented || e.isComposing || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.target.matches('input:not([type="radio"], [type="checkbox"]), textarea, select, [contenteditable]')) return;
    const k = e.key.toLowerCase();
    const button = [...card.querySelectorAll('button[aria-keyshortcuts]')].find((b) => b.getAttribute('aria-keyshortcuts') === k);
    if (!button || button.disabled || !button.checkVisibility()) return;
    e.preventDefault();
    button.click();
  });
}

let choiceGroups = 0;

/**
 * "Always allow": for a tool that is not a command, one button for the tool. For a
 * command, a radio group of the options the server offers (the exact command first and
 * checked, then prefix patterns; arrow keys move within it) and a button that sends the
 * checked one's patterns. With no option (a command holding what looks like a secret)
 * there is no "always", and the card says why.
 */
function alwaysChoice(approval, send) {
  const options = approval.payload?.alwaysOptions;
  if (!Array.isArray(options)) {
    return {
      choices: null,
      button: h('button', { class: 'btn', type: 'button', 'data-decision': 'always', ...key('a'), onclick: () => send('always') }, `Always allow ${approval.tool}`, hint('a')),
    };
  }
  if (options.length === 0) {
    return { choices: h('p', { class: 'approval-always-none' }, 'This command can only be approved once: it holds what looks like a secret.'), button: null };
  }
  const name = `always-${approval.id}-${++choiceGroups}`;
  const radios = options.map((o, i) =>
    h('input', { type: 'radio', name, value: String(i), checked: i === 0 }),
  );
  const choices = h(
    'fieldset',
    { class: 'approval-always' },
    h('legend', {}, 'Always allow, in this session'),
    options.map((o, i) =>
      h(
        'label',
        { class: 'approval-always-option' },
        radios[i],
        o.exact ? h('span', {}, 'This exact command') : h('span', {}, 'Commands matching ', h('code', {}, String(o.label ?? ''))),
      ),
    ),
  );
  const chosen = () => options[radios.findIndex((r) => r.checked)] ?? options[0];
  const button = h(
    'button',
    { class: 'btn', type: 'button', 'data-decision': 'always', ...key('a'), onclick: () => send('always', { patterns: chosen().patterns }) },
    'Always allow',
    hint('a'),
  );
  return { choices, button };
}

/**
 * A question the model asks (the `question` tool): its options as buttons, and always a
 * box for an answer in the person's own words. An answer is sent as `{fill: {answer}}`;
 * Decline rejects, and the model is told so.
 */
function questionCard(approval, decide) {
  const p = approval.payload ?? {};
  const answer = (text) => decide({ fill: { answer: text } }, undefined);
  const own = h('input', {
    class: 'approval-message',
    type: 'text',
    placeholder: (p.options ?? []).length ? 'Or answer in your own words' : 'Your answer',
    'aria-label': 'Your answer',
    maxlength: 4000,
  });
  const sendOwn = () => own.value.trim() && answer(own.value.trim());
  own.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') sendOwn();
  });
  const card = h(
    'section',
    { class: 'approval-card question-card', role: 'group', tabindex: -1, 'aria-label': 'The agent asks a question', 'aria-describedby': `${approval.id}-what`, dataset: { approvalId: approval.id } },
    h('div', { class: 'approval-head' }, icon('shield'), h('strong', {}, 'The agent asks')),
    h('p', { class: 'approval-change', id: `${approval.id}-what` }, String(p.question ?? '')),
    h('p', { class: 'approval-notice', role: 'status', hidden: true }),
    h(
      'div',
      { class: 'approval-actions question-options' },
      // The first nine options are numbered: their digit picks them.
      (p.options ?? []).map((o, i) => {
        const digit = i < 9 ? String(i + 1) : null;
        return h('button', { class: 'btn', type: 'button', 'data-decision': 'fill', title: o.description ?? '', ...(digit ? key(digit) : {}), onclick: () => answer(o.label) },
          digit ? hint(digit) : null, String(o.label));
      }),
    ),
    own,
    h(
      'div',
      { class: 'approval-actions' },
      h('button', { class: 'btn primary', type: 'button', 'data-decision': 'fill', onclick: sendOwn }, icon('check'), 'Answer'),
      h('button', { class: 'btn danger', type: 'button', 'data-decision': 'reject', ...key('n'), onclick: () => decide('reject', 'The person declined to answer.') }, icon('cross'), 'Decline', hint('n')),
    ),
    h('p', { class: 'approval-foot' }),
  );
  decideByKey(card);
  updateApproval(card, approval, {});
  return card;
}

/**
 * A question a tool's server asks while its call runs (an MCP elicitation; the payload
 * says `live`): which server asks, its message, and a form built from the schema of the
 * fields it asks for (text, numbers, yes/no, a choice, several choices), defaults filled
 * in. Submit sends `{fill: {…fields}}`; Decline rejects, and the server hears that the
 * person declined. The run keeps running meanwhile: the call waits for this.
 */
function liveAskCard(approval, decide) {
  const p = approval.payload ?? {};
  const schema = p.fields ?? {};
  const required = new Set(Array.isArray(schema.required) ? schema.required : []);
  const fields = Object.entries(schema.properties ?? {}).map(([name, prop]) => askField(approval.id, name, prop ?? {}, required.has(name)));
  const submit = () => {
    const values = {};
    for (const f of fields) {
      const v = f.value();
      if (v !== undefined) values[f.name] = v;
    }
    const missing = fields.filter((f) => f.required && values[f.name] === undefined);
    for (const f of fields) f.control.setAttribute('aria-invalid', String(missing.includes(f)));
    if (missing.length) {
      missing[0].control.focus();
      return;
    }
    decide({ fill: values }, undefined);
  };
  const form = h('form', { class: 'live-ask-form', novalidate: true }, fields.map((f) => f.row));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    submit();
  });
  const source = String(p.source ?? approval.tool);
  const card = h(
    'section',
    { class: 'approval-card question-card live-ask-card', role: 'group', tabindex: -1, 'aria-label': `${source} asks a question`, 'aria-describedby': `${approval.id}-what`, dataset: { approvalId: approval.id } },
    h('div', { class: 'approval-head' }, icon('shield'), h('strong', {}, `${source} asks`), h('span', { class: 'approval-tool' }, approval.tool)),
    h('p', { class: 'approval-change', id: `${approval.id}-what` }, String(p.question ?? '')),
    h('p', { class: 'approval-notice', role: 'status', hidden: true }),
    form,
    h(
      'div',
      { class: 'approval-actions' },
      h('button', { class: 'btn primary', type: 'button', 'data-decision': 'fill', onclick: submit }, icon('check'), 'Submit'),
      h('button', { class: 'btn danger', type: 'button', 'data-decision': 'reject', ...key('n'), onclick: () => decide('reject', undefined) }, icon('cross'), 'Decline', hint('n')),
    ),
    h('p', { class: 'approval-foot' }),
  );
  decideByKey(card);
  updateApproval(card, approval, {});
  return card;
}

/** The choices a schema property offers, as [value, label] pairs: `enum` (with `enumNames`) or `oneOf`/`anyOf` of `const`s. */
function choicesOf(prop) {
  if (Array.isArray(prop.enum)) return prop.enum.map((v, i) => [v, String(prop.enumNames?.[i] ?? v)]);
  const of = prop.oneOf ?? prop.anyOf;
  if (Array.isArray(of) && of.every((o) => o && 'const' in o)) return of.map((o) => [o.const, String(o.title ?? o.const)]);
  return null;
}

const INPUT_TYPE = { email: 'email', uri: 'url', date: 'date', 'date-time': 'datetime-local' };

/**
 * One field of a live ask: its row (a label, the control, the description) and how to
 * read its value (`undefined` when left empty).
 */
function askField(cardId, name, prop, required) {
  const id = `${cardId}-f-${name}`;
  const title = String(prop.title ?? name) + (required ? ' *' : '');
  const about = prop.description ? h('span', { class: 'live-ask-about' }, String(prop.description)) : null;
  const choices = choicesOf(prop);
  const many = prop.type === 'array' ? choicesOf(prop.items ?? {}) : null;
  if (many) {
    const picked = new Set(Array.isArray(prop.default) ? prop.default : []);
    const boxes = many.map(([v]) => h('input', { type: 'checkbox', checked: picked.has(v) }));
    const control = h('fieldset', { class: 'live-ask-field', id }, h('legend', {}, title), many.map(([, label], i) => h('label', {}, boxes[i], ` ${label}`)), about);
    const value = () => {
      const chosen = many.filter((_, i) => boxes[i].checked).map(([v]) => v);
      return chosen.length ? chosen : undefined;
    };
    return { name, required, control, row: control, value };
  }
  let control;
  let value;
  if (choices) {
    control = h('select', { id }, required ? null : h('option', { value: '' }, '—'), choices.map(([v, label], i) => h('option', { value: String(i), selected: v === prop.default }, label)));
    value = () => (control.value === '' ? undefined : choices[Number(control.value)][0]);
  } else if (prop.type === 'boolean') {
    control = h('input', { id, type: 'checkbox', checked: prop.default === true });
    value = () => control.checked;
  } else if (prop.type === 'number' || prop.type === 'integer') {
    control = h('input', { id, type: 'number', step: prop.type === 'integer' ? '1' : 'any', min: prop.minimum, max: prop.maximum, value: prop.default ?? '' });
    value = () => (control.value.trim() === '' ? undefined : Number(control.value));
  } else {
    control = h('input', { id, type: INPUT_TYPE[prop.format] ?? 'text', value: prop.default ?? '', maxlength: prop.maxLength });
    value = () => (control.value.trim() === '' ? undefined : control.value);
  }
  const row = h('div', { class: 'live-ask-field' }, h('label', { for: id }, title), control, about);
  return { name, required, control, row, value };
}

/**
 * A plan-mode session's plan (the `exit_plan` tool). Accept approves the call: the
 * session switches to agent mode and the run carries the plan out. Request changes
 * rejects it with the person's words, which the model reads; plan mode stays. The words
 * are required: a reject without them would cancel the run. The plan is Markdown and
 * shows rendered; once accepted it stays in the conversation (the timeline's planBlock).
 */
function planCard(approval, decide) {
  const p = approval.payload ?? {};
  const changes = h('textarea', {
    class: 'approval-message',
    rows: 2,
    placeholder: 'What should change in the plan?',
    'aria-label': 'Changes to the plan',
    maxlength: 2000,
  });
  const request = () => {
    const words = changes.value.trim();
    if (!words) {
      changes.focus();
      changes.setAttribute('aria-invalid', 'true');
      return;
    }
    decide('reject', words);
  };
  const card = h(
    'section',
    { class: 'approval-card plan-card', role: 'group', tabindex: -1, 'aria-label': 'The agent proposes a plan', dataset: { approvalId: approval.id } },
    h('div', { class: 'approval-head' }, icon('shield'), h('strong', {}, 'Plan ready'), h('span', { class: 'approval-tool' }, 'plan mode')),
    h('div', { class: 'plan-text', role: 'region', 'aria-label': 'The plan' }, markdownBlock(String(p.plan ?? ''))),
    h('p', { class: 'approval-reason' }, 'Nothing has been changed yet. Accepting switches this session to agent mode and the agent carries the plan out.'),
    h('p', { class: 'approval-notice', role: 'status', hidden: true }),
    changes,
    h(
      'div',
      { class: 'approval-actions' },
      h('button', { class: 'btn primary', type: 'button', 'data-decision': 'once', ...key('y'), onclick: () => decide('once', undefined) }, icon('check'), 'Accept plan', hint('y')),
      h('button', { class: 'btn', type: 'button', 'data-decision': 'reject', ...key('n'), onclick: request }, 'Request changes', hint('n')),
    ),
    h('p', { class: 'approval-foot' }),
  );
  decideByKey(card);
  updateApproval(card, approval, {});
  return card;
}

/**
 * A run that reached one of its guardrails (a limit on cost, tokens, time or tool
 * calls) and asks whether to go on: once (the limit is raised one step), for the rest
 * of the run (lifted), or stop it.
 */
function guardrailCard(approval, decide) {
  const p = approval.payload ?? {};
  const card = h(
    'section',
    { class: 'approval-card guardrail-card', role: 'group', tabindex: -1, 'aria-label': 'Limit reached', 'aria-describedby': `${approval.id}-what`, dataset: { approvalId: approval.id } },
    h('div', { class: 'approval-head' }, icon('shield'), h('strong', {}, 'Limit reached'), h('span', { class: 'approval-tool' }, `${p.guardrail?.scope ?? 'run'} limit`)),
    h('p', { class: 'approval-change', id: `${approval.id}-what` }, p.reason ?? 'The run reached a limit. Continue?'),
    h('p', { class: 'approval-reason' }, 'Nothing more runs until you decide. Continuing once raises the limit one step; for this run lifts it until the run ends.'),
    h('p', { class: 'approval-notice', role: 'status', hidden: true }),
    h(
      'div',
      { class: 'approval-actions' },
      h('button', { class: 'btn primary', type: 'button', 'data-decision': 'once', ...key('y'), onclick: () => decide('once', undefined) }, icon('check'), 'Continue', hint('y')),
      h('button', { class: 'btn', type: 'button', 'data-decision': 'always', ...key('a'), onclick: () => decide('always', undefined) }, 'Continue for this run', hint('a')),
      h('button', { class: 'btn danger', type: 'button', 'data-decision': 'reject', ...key('n'), onclick: () => decide('reject', undefined) }, icon('cross'), 'Stop the run', hint('n')),
    ),
    h('p', { class: 'approval-foot' }),
  );
  decideByKey(card);
  updateApproval(card, approval, {});
  return card;
}

/**
 * A call of a tool the prompt declared, which the client that sent the prompt runs
 * (`approval.payload.client`): nothing for the person to approve, the run goes on when
 * that client posts the result. Cancel rejects the call, which cancels the run.
 */
function clientCallCard(approval, decide) {
  const p = approval.payload ?? {};
  const what = waitingFor(approval.tool, approval);
  const card = h(
    'section',
    { class: 'approval-card client-call-card', role: 'group', tabindex: -1, 'aria-label': what, 'aria-describedby': `${approval.id}-what`, dataset: { approvalId: approval.id } },
    h('div', { class: 'approval-head' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), h('strong', { id: `${approval.id}-what` }, what)),
    p.description ? h('p', { class: 'approval-reason' }, String(p.description)) : null,
    h('pre', { class: 'approval-arg' }, pretty(p.arguments ?? {})),
    h('p', { class: 'approval-notice', role: 'status', hidden: true }),
    h(
      'div',
      { class: 'approval-actions' },
      h('button', { class: 'btn danger', type: 'button', 'data-decision': 'reject', ...key('n'), onclick: () => decide('reject', undefined) }, icon('cross'), 'Cancel', hint('n')),
    ),
    h('p', { class: 'approval-foot' }),
  );
  decideByKey(card);
  updateApproval(card, approval, {});
  return card;
}

/** ui: {busy: decision being sent, error: text, notice: why this card is here}. */
export function updateApproval(card, approval, ui, presence = null) {
  card.classList.toggle('is-busy', Boolean(ui.busy));
  // Presence (the server's `session.presence`): no view anywhere can answer it now.
  let reach = card.querySelector('.approval-reach');
  const nobody = presence !== null && presence.answerers === 0;
  if (nobody && !reach) {
    reach = h('p', { class: 'approval-reach', role: 'status', dataset: { testid: 'nobody-can-answer' } }, 'Nobody can answer this right now');
    card.querySelector('.approval-foot')?.before(reach);
  }
  if (reach) reach.hidden = !nobody;
  for (const b of card.querySelectorAll('button[data-decision]')) {
    b.setAttribute('aria-busy', String(ui.busy === b.dataset.decision));
  }
  const foot = card.querySelector('.approval-foot');
  const left = approval.expiresAt - Date.now();
  const text = ui.error
    ? ui.error
    : ui.busy
      ? 'Sending your decision…'
      : left > 0
        ? `Waits for ${approval.payload?.client === true ? "the client's result" : 'a decision'}; expires in ${until(left)}.`
        : 'Expiring…';
  foot.textContent = text;
  foot.classList.toggle('is-error', Boolean(ui.error));
  const notice = card.querySelector('.approval-notice');
  notice.hidden = !ui.notice;
  notice.textContent = ui.notice ?? '';
}

function until(ms) {
  if (ms >= 3_600_000) return `${Math.round(ms / 3_600_000)} h`;
  if (ms >= 60_000) return `${Math.round(ms / 60_000)} min`;
  return `${Math.ceil(ms / 1000)} s`;
}
