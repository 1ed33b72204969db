// Small formatting helpers: ids for commands, durations, relative times, tool arguments.

/** A fresh id for a requestId or idempotency key. */
export function newId(prefix) {
  const body = globalThis.crypto?.randomUUID
    ? crypto.randomUUID()
    : Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
  return `${prefix}-${body}`;
}

export function duration(ms) {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60_000);
  return `${m} min ${Math.round((ms % 60_000) / 1000)} s`;
}

export function ago(ts, now = Date.now()) {
  const s = Math.round((now - ts) / 1000);
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(ts).toLocaleDateString();
}

/** The argument a person recognizes a tool call by: its path, command or pattern. */
export function mainArgument(args) {
  if (!args || typeof args !== 'object') return typeof args === 'string' ? args : '';
  for (const key of ['command', 'path', 'pattern', 'query', 'url']) {
    if (typeof args[key] === 'string') return args[key];
  }
  const first = Object.values(args).find((v) => typeof v === 'string');
  return first ?? '';
}

export function pretty(value) {
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}
