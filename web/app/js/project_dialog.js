// The "Add a project" dialog: a directory path and an optional name, POST /api/projects;
// `onAdded(project)` then runs (the page opens a new session in it).

import { post } from './api.js';

export function initProjectDialog({ lists, toast, onAdded }) {
  const dialog = document.getElementById('project-dialog');
  const form = document.getElementById('project-form');
  const error = document.getElementById('project-error');
  document.getElementById('project-cancel').addEventListener('click', () => dialog.close());
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const data = new FormData(form);
    const path = String(data.get('path') ?? '').trim();
    const name = String(data.get('name') ?? '').trim() || undefined;
    error.textContent = '';
    try {
      const p = await post('/api/projects', { path, name });
      dialog.close();
      form.reset();
      lists.invalidate(['projects', `s:${p.id}`], 0);
      toast(`Added ${p.name}.`);
      onAdded?.(p);
    } catch (err) {
      error.textContent = err.message;
    }
  });
  return () => {
    error.textContent = '';
    dialog.showModal();
    form.querySelector('input[name=path]').focus();
  };
}
