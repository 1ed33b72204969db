// Applies one `message_update` stream event (text_delta, thinking_delta, toolcall_delta,
// *_start, *_end, done) to a draft assistant message, exactly as the engine's
// `apply_delta` does, with one addition: a delta is applied only at the offset the
// draft expects. Offsets count UTF-16 code units, which is JavaScript's `length`.
//
//   offset == length            → append (the normal case)
//   offset + delta <= length    → already have it: a duplicate, dropped
//   offset <  length < end      → overlap: append only the part we lack
//   offset >  length            → a hole: the caller asks for a fresh snapshot
//
// So a delta is never appended twice and a missing one is never papered over.

/** Result of applying a delta: 'ok', 'duplicate' or 'hole'. */
export function applyDelta(draft, ev) {
  const content = draft.content;
  const i = ev.contentIndex;
  switch (ev.type) {
    case 'text_start':
      return start(content, i, { type: 'text', text: '' });
    case 'thinking_start':
      return start(content, i, { type: 'thinking', thinking: '' });
    case 'toolcall_start':
      return start(content, i, { type: 'toolCall', id: ev.id, name: ev.name, arguments: '' });
    case 'text_delta':
      return append(content[i], 'text', 'text', ev);
    case 'thinking_delta':
      return append(content[i], 'thinking', 'thinking', ev);
    case 'toolcall_delta':
      return append(content[i], 'toolCall', 'arguments', ev);
    case 'toolcall_end': {
      const block = content[i];
      if (!block || block.type !== 'toolCall') return 'hole';
      if (typeof block.arguments === 'string') block.arguments = parseArgs(block.arguments);
      return 'ok';
    }
    case 'text_end':
    case 'thinking_end':
      return content[i] ? 'ok' : 'hole';
    case 'done':
      draft.stopReason = ev.stopReason;
      return 'ok';
    default:
      return 'ok'; // an event type this client does not know changes nothing it shows
  }
}

function start(content, index, block) {
  if (content.length === index) {
    content.push(block);
    return 'ok';
  }
  return content.length > index ? 'duplicate' : 'hole';
}

function append(block, type, field, ev) {
  if (!block || block.type !== type || typeof block[field] !== 'string') return 'hole';
  const have = block[field].length;
  const { offset, delta } = ev;
  if (offset > have) return 'hole';
  if (offset + delta.length <= have) return 'duplicate';
  block[field] += delta.slice(have - offset);
  return 'ok';
}

// Like the engine: empty raw arguments are `{}`; text that does not parse stays a string.
function parseArgs(raw) {
  if (raw.trim() === '') return {};
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}
