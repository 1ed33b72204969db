// Login. With auth off, Spool acts for one local user and this does nothing. Once auth
// is on, `GET /api/auth` says a token is needed; the page asks for one and
// `POST /api/login` trades it for a login session, whose HttpOnly cookie (not the token)
// fetch and EventSource then carry; the page never stores the token. A 401 from any
// call (a logout, a revoked token, an expired login) brings the form back.

import { get, post } from './api.js';
import { h } from './dom.js';

/** Resolves with `{required, user}` once the page may use the API. */
export async function ensureAuth() {
  const status = await get('/api/auth').catch(() => ({ required: false, user: null }));
  if (!status.required || status.user) return status;
  await loginForm();
  return get('/api/auth');
}

let open = null;

/** Shows the login form; resolves after a successful login. */
export function loginForm() {
  if (open) return open;
  open = new Promise((resolve) => {
    const input = h('input', { type: 'password', name: 'token', required: true, autocomplete: 'current-password', 'aria-label': 'Token', placeholder: 'spool_…' });
    const error = h('p', { class: 'form-error', role: 'alert' });
    const form = h('form', { class: 'login-card' },
      h('img', { src: '/ui/favicon.svg', alt: '', width: 40, height: 40 }),
      h('h1', {}, 'Sign in to Spool'),
      h('p', { class: 'muted' }, 'This server needs a token. Create one with ', h('code', {}, 'spool token create --user NAME'), '.'),
      input,
      error,
      h('button', { class: 'btn primary', type: 'submit' }, 'Sign in'));
    const screen = h('div', { class: 'login' }, form);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      error.textContent = '';
      try {
        await post('/api/login', { token: input.value.trim() });
        screen.remove();
        open = null;
        resolve();
      } catch (err) {
        error.textContent = err.status === 401 ? 'That token is unknown or revoked.' : err.message;
      }
    });
    document.body.append(screen);
    input.focus();
  });
  return open;
}

export async function logout() {
  await post('/api/logout').catch(() => {});
  location.reload();
}
