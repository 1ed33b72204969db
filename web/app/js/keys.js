// Page-wide keyboard shortcuts (issue 17): Esc stops a run, `/` focuses the prompt,
// Alt+N starts a new session, Alt+A goes to the approval waiting for the person (issue
// 36; a card's own keys are in cards.js), `?` lists the shortcuts, and the skip link. They are
// chosen not to clash with the browser's own (Ctrl/Cmd combinations stay the
// browser's), and the printable ones act only when the person is not typing, so a
// `/` or `?` in any text field is just a character. While a modal dialog is open, Esc
// belongs to the dialog (it closes it) and nothing here acts.

/** The shortcuts as the `?` overlay lists them: [keys, what they do]. */
export const SHORTCUTS = [
  ['/', 'Focus the prompt'],
  ['Alt+N', 'New session (in the open session’s project)'],
  ['Alt+A', 'Go to the approval or question waiting for you'],
  ['Y · A · N', 'On an approval: approve once · always allow · reject (a plan: accept · request changes)'],
  ['1 … 9', 'On a question: pick that option; N declines'],
  ['Esc', 'Stop the run (or close a dialog)'],
  ['Enter', 'Send; while a run goes, queue after it'],
  ['Shift+Enter', 'New line in the prompt'],
  ['↑ ↓', 'In the session list: previous / next session'],
  ['→ ←', 'In the session list: into the row’s actions and back'],
  ['F2 · Delete', 'In the session list: rename / delete the session'],
  ['?', 'Show these shortcuts'],
];

/** True when keys typed now go into a text field (so `/` and `?` are characters). */
export function typing(el) {
  if (!el || el === document.body) return false;
  if (el.isContentEditable) return true;
  if (el.tagName === 'TEXTAREA' || el.tagName === 'SELECT') return true;
  return el.tagName === 'INPUT' && !['button', 'checkbox', 'radio', 'submit', 'reset'].includes(el.type);
}

/**
 * prompt: the composer's textarea; busy(): a run is going in the open session;
 * stop(): stops it; newSession(): starts one; approval(): focuses the waiting approval
 * card, false when there is none; help: the shortcuts <dialog>; skip: the skip link;
 * target: what it skips to.
 */
export function initKeys({ prompt, busy, stop, newSession, approval, help, skip, target }) {
  help.querySelector('.keys-list').replaceChildren(
    ...SHORTCUTS.flatMap(([keys, what]) => {
      const dt = document.createElement('dt');
      for (const [i, k] of keys.split(' · ').entries()) {
        if (i) dt.append(' · ');
        const kbd = document.createElement('kbd');
        kbd.textContent = k;
        dt.append(kbd);
      }
      const dd = document.createElement('dd');
      dd.textContent = what;
      return [dt, dd];
    }));
  help.querySelector('.keys-close').addEventListener('click', () => help.close());

  // The router lives in the fragment, so the link must not follow its href.
  skip.addEventListener('click', (e) => {
    e.preventDefault();
    target.focus();
  });

  document.addEventListener('keydown', (e) => {
    if (e.defaultPrevented || e.isComposing) return;
    if (document.querySelector('dialog[open], .login')) return; // Esc closes the dialog
    const el = document.activeElement;
    if (e.key === 'Escape') {
      // Esc in another field (a rename, an approval message) is that field's own.
      if (typing(el) && el !== prompt) return;
      if (!busy()) return;
      e.preventDefault();
      stop();
      return;
    }
    if (e.altKey && !e.ctrlKey && !e.metaKey && e.code === 'KeyN') {
      e.preventDefault();
      newSession();
      return;
    }
    // Alt+A works while typing too; with no card waiting it is left to the keyboard
    // (Option+A types å on a Mac).
    if (e.altKey && !e.ctrlKey && !e.metaKey && e.code === 'KeyA') {
      if (approval()) e.preventDefault();
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey || typing(el)) return;
    if (e.key === '/') {
      if (prompt.disabled || prompt.closest('[hidden]')) return;
      e.preventDefault();
      prompt.focus();
    } else if (e.key === '?') {
      e.preventDefault();
      help.showModal();
    }
  });
}

/** Moves focus to the prompt when it can take it (a session is open and not deleted). */
export function focusPrompt(prompt) {
  if (prompt.disabled || prompt.closest('[hidden]')) return;
  // A phone would pop its keyboard over the conversation it just opened.
  if (matchMedia('(pointer: coarse)').matches) return;
  prompt.focus({ preventScroll: true });
}
