// fetch() for Spool's JSON API: one error type for every failure, so callers can tell a
// definite answer (4xx: the server said no) from an uncertain one (network error, 5xx:
// the command may or may not have happened, so the view asks for a fresh snapshot).

export class ApiError extends Error {
  /** `approvalId`: with `resource_changed`, the approval that asks again. */
  constructor(status, code, message, approvalId = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.approvalId = approvalId;
  }

  /** True when we cannot know whether the server acted on the request. */
  get uncertain() {
    return this.status === 0 || this.status >= 500;
  }
}

export async function api(method, path, body, { signal } = {}) {
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', 'The server could not be reached.');
  }
  if (res.status === 204) return null;
  let data = null;
  try {
    data = await res.json();
  } catch {
    // a body that is not JSON: the status alone says what happened
  }
  if (!res.ok) {
    const err = data?.error ?? {};
    // The cookie expired or was revoked: the page asks for a token again (see auth.js).
    if (res.status === 401 && !path.startsWith('/api/login')) dispatchEvent(new Event('spool:unauthorized'));
    throw new ApiError(res.status, err.code ?? `http_${res.status}`, err.message ?? res.statusText, err.approvalId ?? null);
  }
  return data;
}

export const get = (path, opts) => api('GET', path, undefined, opts);
export const post = (path, body, opts) => api('POST', path, body ?? {}, opts);
export const patch = (path, body, opts) => api('PATCH', path, body, opts);
export const del = (path, opts) => api('DELETE', path, undefined, opts);
