// The API, as the console calls it: JSON in and out, the token as `Authorization: Bearer`, and
// every refusal an ApiError carrying the problem detail the server answered (SPEC §10).

const TOKEN_KEY = 'sutra.token';

// `token` when the server asks for API tokens (it says so in the page it serves), else `open`.
export const authMode = document.querySelector('meta[name="sutra-auth"]')?.content || 'open';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function needsLogin() {
  return authMode === 'token' && !token();
}

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }
}

export async function api(path, { method = 'GET', body, query, text = false } = {}) {
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== '') url.searchParams.set(name, value);
  }
  const headers = { Accept: text ? 'text/plain' : 'application/json' };
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(url, init);
  const raw = await response.text();
  if (!response.ok) {
    let problem;
    try {
      problem = JSON.parse(raw);
    } catch {
      problem = { title: response.statusText, detail: raw };
    }
    if (response.status === 401) window.dispatchEvent(new CustomEvent('sutra:unauthenticated'));
    throw new ApiError(response.status, problem);
  }
  if (text) return raw;
  return raw ? JSON.parse(raw) : null;
}

// Every page of a keyset listing, up to `pages` of them; `truncated` when more were left.
export async function allPages(path, query, pages = 20) {
  const items = [];
  let after;
  for (let n = 0; n < pages; n += 1) {
    const page = await api(path, { query: { ...query, after } });
    items.push(...page.items);
    if (!page.next) return { items, truncated: false };
    after = page.next;
  }
  return { items, truncated: true };
}
