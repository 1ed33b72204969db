// A tiny element builder, so views read like the markup they make without a framework.
// Text always goes in as text nodes (never parsed as HTML); the only markup strings are
// the constant SVG icons in icons.js.

/** h('div', {class: 'x', onclick: fn, 'aria-label': 'y'}, child, [children], 'text') */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = value;
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'value') el.value = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/**
 * Makes `parent`'s children exactly `nodes`, moving only what is out of place. What
 * goes is removed first, so a kept node after a replaced one stays put: moving a node
 * takes the focus out of it (a half-typed approval message, every second while a run
 * ticks), and then Esc would act on the page instead of the field.
 */
export function reconcile(parent, nodes) {
  const keep = new Set(nodes);
  for (const child of [...parent.childNodes]) if (!keep.has(child)) parent.removeChild(child);
  let at = parent.firstChild;
  for (const node of nodes) {
    if (!node) continue;
    if (node === at) {
      at = at.nextSibling;
    } else {
      parent.insertBefore(node, at);
    }
  }
  while (at) {
    const next = at.nextSibling;
    parent.removeChild(at);
    at = next;
  }
}
