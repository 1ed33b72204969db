// The one-decision page, /d#t=<token>: where a chat-ops link (a webhook's
// `links.approve`) or a forwarded notification lands. It shows the approval the token is
// for and decides it only when a button is pressed.
//
// Why it is shaped this way:
// * The token sits in the URL's fragment, which browsers never send: it reaches no
//   server log, no proxy and no chat app's link preview, and the page POSTs it itself.
// * Loading the page never decides, whoever loads it: a link unfurler, a prefetch or a
//   reload only *peeks* (`POST /api/decision-tokens/peek`), and a person's press on a
//   button decides (`POST /api/decision-tokens/decide`).
// * No login needed: the token is the capability (single use, bound to one approval and
//   its user). The server decides at most once; this page says what it answered.

import { ApiError, post } from './api.js';

const $ = (id) => document.getElementById(id);

/** Words for each way the server can refuse a token or a decision, by error code. */
const REFUSED = {
  invalid_token: 'This link is not a valid decision link.',
  token_revoked: 'This link was revoked (its notifications or webhook were turned off).',
  token_expired: 'This link has expired. Open the session to decide.',
  token_used: 'Already decided: this link was used.',
  already_resolved: 'Already decided: someone answered this approval.',
  approval_expired: 'This approval has expired. Open the session to see how the run ended.',
  expired: 'This approval has expired. Open the session to see how the run ended.',
  wrong_user: 'You are logged in to Spool as someone else: this link is for another person.',
  decision_not_allowed: 'This link does not allow that decision.',
  not_found: 'This approval no longer exists.',
};

const OUTCOME = {
  once: 'Approved — the run goes on.',
  reject: 'Denied — the agent is told you said no, and the run goes on without it.',
};

/** The token from `#t=<token>`, or null. */
export function tokenFrom(hash) {
  const value = new URLSearchParams(hash.replace(/^#/, '')).get('t');
  return value ? value.trim() : null;
}

/** What the server's refusal means to the person holding the link. */
export function refusal(error) {
  if (!(error instanceof ApiError)) return 'Something went wrong; try again.';
  if (error.uncertain) return 'Spool could not be reached; try again.';
  if (REFUSED[error.code]) return REFUSED[error.code];
  if (error.status === 409) return REFUSED.already_resolved;
  if (error.status === 410) return REFUSED.token_expired;
  if (error.status === 403) return REFUSED.wrong_user;
  return error.message || 'This link does not work.';
}

function say(text) {
  $('decide-status').textContent = text;
}

/**
 * Fills the card from the peek's answer (`{approvalId, sessionId, tool, kind, summary,
 * status, decisions, expiresAt}`) and offers the decisions the token allows.
 */
function show(peek) {
  $('decide-what').textContent = peek.kind === 'confirm_action' ? `${peek.tool} wants to run` : `${peek.tool} asks`;
  $('decide-summary').textContent = peek.summary ?? '';
  $('decide-summary').hidden = !peek.summary;
  $('decide-open').href = `/#/s/${encodeURIComponent(peek.sessionId)}`;
  $('decide-open').textContent = 'Open the session';
  $('decide-meta').textContent = peek.expiresAt ? `This link works until ${new Date(peek.expiresAt).toLocaleString()}.` : '';
  $('decide-card').hidden = false;
  if (peek.status !== 'pending') {
    say(peek.status === 'expired' ? REFUSED.approval_expired : peek.status === 'cancelled' ? 'Its run was stopped; nothing waits for a decision.' : 'Already decided.');
    return;
  }
  const allowed = peek.decisions ?? [];
  $('decide-approve').hidden = !allowed.includes('once');
  $('decide-deny').hidden = !allowed.includes('reject');
  $('decide-actions').hidden = false;
  say('Approve or deny it here; nothing is decided until you press one.');
}

async function decide(token, decision) {
  const buttons = [...document.querySelectorAll('#decide-actions .btn')];
  for (const b of buttons) b.disabled = true;
  say('Sending…');
  try {
    await post('/api/decision-tokens/decide', { token, decision });
    $('decide-actions').hidden = true;
    say(OUTCOME[decision]);
  } catch (e) {
    say(refusal(e));
    // Only an uncertain answer leaves the buttons: the server may not have decided, and
    // the same token can try again (a second decide of a used one is refused, never doubled).
    if (e instanceof ApiError && e.uncertain) for (const b of buttons) b.disabled = false;
    else $('decide-actions').hidden = true;
  }
}

async function start() {
  const token = tokenFrom(location.hash);
  if (!token) {
    say('This link has no decision in it. Open Spool to see what waits for you.');
    return;
  }
  for (const b of document.querySelectorAll('#decide-actions .btn')) b.addEventListener('click', () => decide(token, b.dataset.decision));
  try {
    show(await post('/api/decision-tokens/peek', { token }));
  } catch (e) {
    say(refusal(e));
  }
}

if (typeof document !== 'undefined') start();
