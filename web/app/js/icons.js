// Inline SVG icons (constant markup, 16 px, currentColor), so nothing is fetched.

const paths = {
  plus: '<path d="M8 3v10M3 8h10"/>',
  chevron: '<path d="M6 4l4 4-4 4"/>',
  pencil: '<path d="M11 2.5l2.5 2.5L6 12.5H3.5V10z"/>',
  archive: '<path d="M2.5 3.5h11v3h-11zM3.5 6.5v6h9v-6M6.5 9h3"/>',
  undo: '<path d="M5.5 3.5L2.5 6.5l3 3M2.5 6.5h7a3.5 3.5 0 0 1 0 7H7"/>',
  restore: '<path d="M3 8a5 5 0 1 0 1.5-3.5M3 2.5v3h3"/>',
  trash: '<path d="M3 4.5h10M6.5 4.5V3h3v1.5M4.5 4.5l.5 8.5h6l.5-8.5"/>',
  menu: '<path d="M2.5 4h11M2.5 8h11M2.5 12h11"/>',
  copy: '<rect x="5.5" y="5.5" width="8" height="8" rx="1.5"/><path d="M10.5 3.5v-1h-8v8h1"/>',
  check: '<path d="M3 8.5l3 3 7-7"/>',
  cross: '<path d="M4 4l8 8M12 4l-8 8"/>',
  tool: '<path d="M10 2.5a3 3 0 0 0-2.8 4L2.5 11.2 4.8 13.5l4.7-4.7a3 3 0 0 0 4-2.8l-1.8 1.8-2-.5-.5-2z"/>',
  shield: '<path d="M8 2l5 2v4c0 3-2.2 5-5 6-2.8-1-5-3-5-6V4z"/>',
  folder: '<path d="M2 4.5h4l1.5 1.5H14v6.5H2z"/>',
  chat: '<path d="M2.5 3.5h11v7h-6l-3 2.5v-2.5h-2z"/>',
  stop: '<rect x="4" y="4" width="8" height="8" rx="1"/>',
  send: '<path d="M2.5 8h9M8 4l4 4-4 4"/>',
  clock: '<circle cx="8" cy="8" r="5.5"/><path d="M8 5v3l2 1.5"/>',
  alert: '<circle cx="8" cy="8" r="6"/><path d="M8 4.8v3.7M8 11.2h0"/>',
  bell: '<path d="M4 11.5V7.5a4 4 0 0 1 8 0v4l1 1H3zM6.8 14.5h2.4"/>',
  file: '<path d="M4 2h5l3 3v9H4z"/><path d="M9 2v3h3"/>',
  clip: '<path d="M10.5 4.5l-5 5a1.5 1.5 0 0 0 2 2l5.5-5.5a3 3 0 0 0-4-4L3.5 7.5a4.5 4.5 0 0 0 6.5 6.5l4-4"/>',
  wifiOff: '<path d="M2 2l12 12M5 9.5a4 4 0 0 1 2-1M2.5 6.5A8 8 0 0 1 5 5M11 8.5a4 4 0 0 1 .5.5M13.5 6.5A8 8 0 0 0 8 4.5M8 12.5h0"/>',
};

export function icon(name, cls = '') {
  const span = document.createElement('span');
  span.className = `icon ${cls}`.trim();
  span.setAttribute('aria-hidden', 'true');
  span.innerHTML = `<svg viewBox="0 0 16 16" width="16" height="16" fill="none" stroke="currentColor" stroke-width="1.5" stroke-linecap="round" stroke-linejoin="round">${paths[name]}</svg>`;
  return span;
}
