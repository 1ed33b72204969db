// Boots the page: page-wide connectivity, the list sync and sidebar, the composer, the
// model picker, and the router that opens one SessionView at a time (`#/s/ses_…`).
// Switching sessions disposes only the previous view (closing its stream); each
// session's store is kept, so coming back reconnects with its cursor.

import { get } from './api.js';
import { Attention } from './attention.js';
import { ensureAuth, loginForm, logout } from './auth.js';
import { Composer } from './composer.js';
import { Connectivity } from './connectivity.js';
import { h } from './dom.js';
import { icon } from './icons.js';
import { ListSync } from './lists.js';
import { focusPrompt, initKeys } from './keys.js';
import { initProjectDialog } from './project_dialog.js';
import { PermissionsPanel } from './permissions.js';
import { SessionView } from './session_view.js';
import { Sidebar } from './sidebar.js';
import { SessionStore } from './store.js';
import { renderChrome } from './chrome.js';
import { renderTodos } from './todos.js';
import { setModels } from './usage.js';
import { SessionSearch } from './session_search.js';

const $ = (id) => document.getElementById(id);
const connectivity = new Connectivity();
const stores = new Map(); // sessionId → SessionStore
const page = { view: null, models: null, connectivity };
/** The phone layout (layout.css): the sessions list is folded into the menu. */
const NARROW = matchMedia('(max-width: 760px)');

function toast(text) {
  const el = $('toast');
  el.textContent = text;
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (el.hidden = true), 5000);
}

const lists = new ListSync({
  connectivity,
  onChange: () => {
    repaintSessions();
    if (!page.view) home();
  },
});
/** The open session as its stream shows it, for the sidebar and the tab title. */
const current = () =>
  page.view && { id: page.view.id, title: page.view.store.session?.title, status: page.view.store.status, waiting: page.view.store.approvals.some((a) => a.payload?.client !== true) };
const sidebar = new Sidebar({ nav: $('projects'), lists, toast, current });
const attention = new Attention({ lists, current, button: $('notify'), toast });

/** The sidebar's rows and the tab title: who runs, who waits for the person. */
function repaintSessions() {
  sidebar.render();
  attention.update();
}
/** The open session's model as `GET /api/models` lists it (`{name, inputs}`), or null. */
function sessionModel() {
  const models = page.models;
  const name = page.view?.store.session?.model ?? models?.default;
  return models?.models?.find((m) => m.name === name) ?? null;
}
const composer = new Composer({
  form: $('composer'),
  input: $('prompt'),
  button: $('send'),
  steer: $('steer'),
  hint: $('hint'),
  attach: $('attach'),
  picker: $('file-picker'),
  files: $('attachments'),
  zone: document.querySelector('.main'),
  model: sessionModel,
  onSent: () => page.view?.timeline.offerFocus(),
});
// A project just added opens a session in it: what the person added it for.
const openProjectDialog = initProjectDialog({ lists, toast, onAdded: (p) => sidebar.newSession(p.id) });
sidebar.onAddProject = openProjectDialog;
const permissions = new PermissionsPanel({ topbar: document.querySelector('.topbar'), before: $('model-picker') });
// A result opens its session at the message that matched.
new SessionSearch({
  box: $('session-search'),
  nav: $('projects'),
  open: (id, messageIndex) => {
    location.hash = `#/s/${id}`;
    openSession(id);
    // The same session was open already: openSession left the phone's drawer as it was.
    document.body.classList.remove('drawer-open');
    $('menu').setAttribute('aria-expanded', 'false');
    if (messageIndex !== null) page.view?.reveal(messageIndex);
  },
});

let lastSummary = '';
function onViewChange(view) {
  if (view !== page.view) return;
  renderChrome(page, { retry: () => view.retry() });
  renderTodos($('todos'), view.store);
  permissions.render(view);
  composer.update();
  const summary = `${view.store.session?.title}|${view.store.status}|${view.store.approvals.length > 0}`;
  if (summary !== lastSummary) {
    lastSummary = summary;
    repaintSessions();
  }
}

function examples() {
  if (page.models?.configured !== false) return null;
  const tries = ['echo: Hello from Spool', 'stream: 60', 'tool: list {}', 'tool: bash {"command":"ls -la"}'];
  return h('div', { class: 'examples' },
    h('p', { class: 'muted' }, 'No model is configured, so the scripted model answers. Try one of these:'),
    tries.map((t) => h('button', { class: 'chip', type: 'button', onclick: () => fill(t) }, t)));
}

function fill(text) {
  const input = $('prompt');
  input.value = text;
  input.dispatchEvent(new Event('input'));
  input.focus();
}

function openSession(id) {
  if (page.view?.id === id) return;
  if (page.view) {
    // The sidebar showed this session's live title and status; its list refetches the server's.
    const left = lists.findSession(page.view.id)?.projectId ?? page.view.store.session?.projectId;
    if (left) lists.invalidate([`s:${left}`]);
  }
  page.view?.dispose(); // closes only that view's stream
  page.view = null;
  if (id) {
    if (!stores.has(id)) stores.set(id, new SessionStore(id));
    page.view = new SessionView({
      store: stores.get(id),
      connectivity,
      scroller: $('timeline'),
      onChange: onViewChange,
      examples,
      prompt: $('prompt'),
    });
  } else {
    home();
  }
  $('composer').hidden = !page.view;
  renderTodos($('todos'), page.view?.store);
  composer.attach(page.view);
  permissions.render(page.view);
  renderChrome(page, {});
  repaintSessions();
  document.body.classList.remove('drawer-open');
  $('menu').setAttribute('aria-expanded', 'false');
  page.view?.open();
  if (page.view) focusPrompt($('prompt'));
}

/**
 * The screen with no session open. With no project it offers to add one; with projects
 * but not one session it offers to start one (not "pick a session" from an empty list);
 * otherwise it points at the list and offers a new session.
 */
function home() {
  const projects = lists.projects ?? [];
  const first = projects[0];
  const counts = projects.map((p) => lists.sessions.get(p.id));
  const none = counts.length > 0 && counts.every((list) => list !== undefined && list.length === 0);
  const start = first
    ? h('button', { class: 'btn primary', type: 'button', id: 'home-new-session', onclick: () => sidebar.newSession(first.id) }, icon('plus'), `New session in ${first.name}`)
    : h('button', { class: 'btn primary', type: 'button', onclick: openProjectDialog }, icon('plus'), 'Add a project');
  const text = !first
    ? 'Add a project — a directory the agent may read and change — then start a session in it. Answers, tool calls and approvals stream in live.'
    : none
      ? `No sessions yet. Start one in ${first.name} and ask for something; answers, tool calls and approvals stream in live.`
      : `Pick a session ${NARROW.matches ? 'from the menu (☰)' : 'on the left'}, or start a new one. Answers, tool calls and approvals stream in live.`;
  $('timeline').replaceChildren(
    h('div', { class: 'empty-chat home' },
      icon('chat', 'big'),
      h('h2', {}, first && none ? 'Start your first session' : 'Welcome to Spool'),
      h('p', {}, text),
      start));
}

function route() {
  const m = location.hash.match(/^#\/s\/([A-Za-z0-9_-]+)/);
  openSession(m ? m[1] : null);
}

function newSessionHere() {
  const cur = page.view && lists.findSession(page.view.id);
  const project = cur?.projectId ?? page.view?.store.session?.projectId ?? lists.projects?.[0]?.id;
  if (project) sidebar.newSession(project);
  else openProjectDialog();
}

$('new-session').addEventListener('click', newSessionHere);
$('add-project').append(icon('folder'));
$('add-project').addEventListener('click', openProjectDialog);
$('menu').append(icon('menu'));
$('menu').addEventListener('click', () => {
  const open = document.body.classList.toggle('drawer-open');
  $('menu').setAttribute('aria-expanded', String(open));
});
$('backdrop').addEventListener('click', () => document.body.classList.remove('drawer-open'));
$('model').addEventListener('change', (e) => page.view?.setModel(e.target.value));
$('plan-mode').addEventListener('click', (e) => {
  const planning = e.currentTarget.getAttribute('aria-pressed') === 'true';
  page.view?.setMode(planning ? 'agent' : 'plan');
});
connectivity.onChange(() => {
  renderChrome(page, { retry: () => page.view?.retry() });
  composer.update();
});
addEventListener('hashchange', route);
initKeys({
  prompt: $('prompt'),
  busy: () => composer.busy,
  stop: () => page.view?.abort(),
  newSession: newSessionHere,
  approval: () => page.view?.timeline.focusApproval() ?? false,
  help: $('keys-dialog'),
  skip: $('skip'),
  target: $('timeline'),
});

addEventListener('spool:unauthorized', () => loginForm().then(() => location.reload()));

async function start() {
  const auth = await ensureAuth();
  if (auth?.required && auth.user) {
    $('side-foot').replaceChildren(
      h('span', { class: 'who', title: auth.user }, 'Signed in with a token'),
      h('button', { class: 'btn ghost small', type: 'button', onclick: logout }, 'Sign out'));
  }
  get('/api/models')
    .then((m) => {
      page.models = m;
      setModels(m);
      renderChrome(page, { retry: () => page.view?.retry() });
      composer.update();
      page.view?.paint();
    })
    .catch(() => {});
  lists.start();
  route();
}

start();
