// Renders message text as safe DOM: fenced code blocks, inline `code` and **bold**;
// everything else is plain text with its line breaks kept. Never parses HTML, so a
// model's output cannot inject markup.

import { h } from './dom.js';

export function renderText(text) {
  const out = [];
  const parts = text.split(/^```/m);
  parts.forEach((part, i) => {
    if (i % 2 === 1) {
      const nl = part.indexOf('\n');
      const lang = nl >= 0 ? part.slice(0, nl).trim() : '';
      const body = nl >= 0 ? part.slice(nl + 1) : part;
      out.push(h('pre', { class: 'code', 'data-lang': lang || null }, h('code', {}, body.replace(/\n$/, ''))));
    } else if (part) {
      out.push(h('div', { class: 'prose' }, inline(i > 0 ? part.replace(/^\n/, '') : part)));
    }
  });
  return out;
}

function inline(text) {
  const nodes = [];
  const re = /(`[^`\n]+`|\*\*[^*\n]+\*\*)/g;
  let last = 0;
  for (const m of text.matchAll(re)) {
    if (m.index > last) nodes.push(text.slice(last, m.index));
    const tok = m[0];
    nodes.push(tok.startsWith('`') ? h('code', {}, tok.slice(1, -1)) : h('strong', {}, tok.slice(2, -2)));
    last = m.index + tok.length;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}
