// The console's shell: the header and navigation, the router over history-mode URLs, the
// login when the server asks for tokens, and the confirmation dialog every action goes through.

import { h, replace } from './dom.js';
import { ApiError, authMode, needsLogin, setToken, token, api } from './api.js';
import * as views from './views.js';
import { system } from './system.js';

const ROUTES = [
  [/^\/$/, views.instances],
  [/^\/instances\/?$/, views.instances],
  [/^\/instances\/([^/]+)$/, views.instance],
  [/^\/failed\/?$/, views.failed],
  [/^\/deployments\/?$/, views.deployments],
  [/^\/deployments\/([^/]+)\/(\d+)$/, views.deployment],
  [/^\/tasks\/?$/, views.tasks],
  [/^\/schedules\/?$/, views.schedules],
  [/^\/system\/?$/, system],
];

const NAV = [
  ['/instances', 'Instances'],
  ['/failed', 'Failed'],
  ['/deployments', 'Deployments'],
  ['/tasks', 'Tasks'],
  ['/schedules', 'Schedules'],
  ['/system', 'System'],
];

const main = h('main', { id: 'main', tabindex: '-1' });
const status = h('div', { class: 'notice', role: 'status', 'aria-live': 'polite' });
const nav = h('nav', { 'aria-label': 'Console' });
let disposers = [];

export function navigate(url, { replaceState = false } = {}) {
  if (replaceState) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  route();
}

// Says something to the user in the live region; it fades after a while.
export function notify(text) {
  status.textContent = text;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => {
    status.textContent = '';
  }, 8000);
}

// Runs `fn` when the view is left: timers and pollers register here.
export function onLeave(fn) {
  disposers.push(fn);
}

// A modal question with two answers; resolves true when confirmed. Escape or the second
// button declines.
export function confirmAction(title, body, confirmLabel) {
  return new Promise((resolve) => {
    const dialog = h('dialog', { 'aria-labelledby': 'confirm-title', class: 'confirm' });
    const done = (answer) => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    dialog.addEventListener('cancel', () => done(false));
    replace(
      dialog,
      h('h2', { id: 'confirm-title' }, title),
      h('div', { class: 'confirm-body' }, body),
      h(
        'div',
        { class: 'buttons' },
        h('button', { type: 'button', class: 'primary', onclick: () => done(true) }, confirmLabel),
        h('button', { type: 'button', onclick: () => done(false) }, 'Go back'),
      ),
    );
    document.body.append(dialog);
    dialog.showModal();
    dialog.querySelector('button.primary').focus();
  });
}

// A refusal, as the API's problem detail says it.
export function problemBox(error) {
  if (!(error instanceof ApiError)) {
    return h('div', { class: 'problem', role: 'alert' }, h('strong', {}, 'Error: '), String(error?.message || error));
  }
  const p = error.problem;
  return h(
    'div',
    { class: 'problem', role: 'alert' },
    h('p', {}, h('strong', {}, `${error.status} ${p.title || ''}`), p.code ? [' ', h('code', { class: 'problem-code' }, p.code)] : null),
    p.detail ? h('p', { class: 'problem-detail' }, p.detail) : null,
  );
}

function header() {
  const items = NAV.map(([href, label]) => h('li', {}, h('a', { href, 'data-nav': href }, label)));
  replace(nav, h('ul', {}, items));
  const signOut =
    authMode === 'token' && token()
      ? h('button', { type: 'button', class: 'link', onclick: () => { setToken(null); navigate('/'); } }, 'Sign out')
      : null;
  return h(
    'header',
    { class: 'top' },
    h('a', { href: '#main', class: 'skip' }, 'Skip to content'),
    h('a', { href: '/', class: 'brand' }, 'Sutra'),
    needsLogin() ? null : nav,
    signOut,
  );
}

function loginView() {
  document.title = 'Sign in · Sutra';
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'current-password', required: true });
  const message = h('div');
  const form = h(
    'form',
    {
      class: 'login',
      'aria-labelledby': 'login-title',
      onsubmit: async (event) => {
        event.preventDefault();
        setToken(input.value.trim());
        try {
          await api('/v1/deployments');
          render();
        } catch (error) {
          if (error instanceof ApiError && error.status === 401) setToken(null);
          replace(message, problemBox(error));
          if (error instanceof ApiError && error.status === 403) render();
        }
      },
    },
    h('h1', { id: 'login-title', tabindex: '-1' }, 'Sign in'),
    h('p', {}, 'This server asks for an API token. The console sends it as the API does, and can do only what its roles allow.'),
    h('label', { for: 'token' }, 'API token'),
    input,
    h('button', { type: 'submit', class: 'primary' }, 'Sign in'),
    message,
  );
  replace(main, form);
  input.focus();
}

async function route() {
  for (const dispose of disposers) dispose();
  disposers = [];
  for (const link of nav.querySelectorAll('a')) {
    const here = location.pathname.startsWith(link.dataset.nav) ||
      (location.pathname === '/' && link.dataset.nav === '/instances');
    if (here) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  if (needsLogin()) {
    loginView();
    return;
  }
  const path = location.pathname;
  const query = new URLSearchParams(location.search);
  for (const [pattern, view] of ROUTES) {
    const match = path.match(pattern);
    if (!match) continue;
    replace(main, h('p', { class: 'loading' }, 'Loading…'));
    try {
      await view(main, match.slice(1).map(decodeURIComponent), query);
    } catch (error) {
      replace(main, h('h1', { tabindex: '-1' }, 'Could not load this page'), problemBox(error));
    }
    const heading = main.querySelector('h1');
    if (heading && document.activeElement === document.body) heading.focus({ preventScroll: true });
    return;
  }
  document.title = 'Not found · Sutra';
  replace(main, h('h1', { tabindex: '-1' }, 'Not found'), h('p', {}, h('a', { href: '/' }, 'Back to the instances')));
}

function render() {
  replace(document.getElementById('app'), header(), status, main);
  route();
}

// Same-origin links move within the console; everything else is left to the browser.
document.addEventListener('click', (event) => {
  const link = event.target.closest?.('a[href]');
  if (!link || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey || link.target) return;
  const url = new URL(link.href, location.href);
  if (url.origin !== location.origin || url.hash || url.pathname.startsWith('/v1/')) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
  main.focus({ preventScroll: true });
});
window.addEventListener('popstate', route);
window.addEventListener('sutra:unauthenticated', () => {
  if (authMode === 'token') {
    setToken(null);
    render();
  }
});

render();
