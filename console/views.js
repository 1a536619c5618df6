// The console's pages. Each renders into `main` from the API alone.

import { h, replace, when, badge } from './dom.js';
import { api, allPages, ApiError } from './api.js';
import { drawFlow } from './graph.js';
import { navigate, notify, confirmAction, problemBox, onLeave } from './app.js';

const STATUSES = ['suspended', 'failed', 'completed', 'cancelled'];
const TERMINAL = ['completed', 'cancelled'];

export function title(text) {
  document.title = `${text} · Sutra`;
  return h('h1', { tabindex: '-1' }, text);
}

export function table(caption, headers, rows, empty = 'None.') {
  if (!rows.length) return h('p', { class: 'empty' }, empty);
  return h(
    'table',
    {},
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((c) => h('td', {}, c))))),
  );
}

function field(id, label, control) {
  control.id = id;
  control.name ||= id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), control);
}

function select(options, value) {
  return h('select', {}, options.map(([v, label]) => h('option', { value: v, selected: v === value }, label)));
}

function json(value) {
  return h('pre', { class: 'json' }, JSON.stringify(value, null, 2));
}

// ---------------------------------------------------------------------------------------------
// Instances

// RFC 3339 from a datetime-local control's value (the viewer's local time).
function instant(local) {
  if (!local) return undefined;
  const date = new Date(local);
  return Number.isNaN(date.getTime()) ? undefined : date.toISOString();
}

function local(rfc3339) {
  if (!rfc3339) return '';
  const date = new Date(rfc3339);
  if (Number.isNaN(date.getTime())) return '';
  const pad = (n) => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

const FILTERS = ['status', 'flow', 'version', 'parent', 'failure_code', 'correlation_key', 'created_after', 'created_before'];

export async function instances(main, _params, query) {
  const filter = Object.fromEntries(FILTERS.map((name) => [name, query.get(name) || undefined]));
  const after = query.get('after') || undefined;
  const [page, scaling] = await Promise.all([
    api('/v1/instances', { query: { ...filter, after, limit: 50 } }),
    api('/v1/scaling').catch(() => null),
  ]);
  const counts = scaling
    ? h(
        'ul',
        { class: 'counts', 'aria-label': `Instances by status, ${scaling.tenant ? `tenant ${scaling.tenant}` : 'every tenant'}` },
        ['running', ...STATUSES].map((st) =>
          h('li', {}, h('a', { href: `/instances?status=${st}`, class: `count count-${st}` }, h('span', { class: 'n' }, scaling.instances[st] ?? 0), ' ', st)),
        ),
      )
    : null;
  const controls = {
    status: select([['', 'any'], ...STATUSES.map((x) => [x, x])], filter.status || ''),
    flow: h('input', { type: 'text', value: filter.flow || '' }),
    version: h('input', { type: 'number', min: 1, value: filter.version || '' }),
    parent: h('input', { type: 'text', value: filter.parent || '', placeholder: 'the calling instance\'s id' }),
    failure_code: h('input', { type: 'text', value: filter.failure_code || '', placeholder: 'e.g. SUTRA.RUNTIME.EXPRESSION.ERROR' }),
    correlation_key: h('input', { type: 'text', value: filter.correlation_key || '' }),
    created_after: h('input', { type: 'datetime-local', value: local(filter.created_after) }),
    created_before: h('input', { type: 'datetime-local', value: local(filter.created_before) }),
  };
  const labels = {
    status: 'Status', flow: 'Flow', version: 'Version', parent: 'Called by', failure_code: 'Failure code',
    correlation_key: 'Correlation key', created_after: 'Created after', created_before: 'Created before',
  };
  const form = h(
    'form',
    {
      class: 'filters',
      'aria-label': 'Filter instances',
      onsubmit: (event) => {
        event.preventDefault();
        const next = new URLSearchParams();
        for (const name of FILTERS) {
          let value = controls[name].value;
          if (name.startsWith('created_')) value = instant(value);
          if (value) next.set(name, value);
        }
        navigate(`/instances${next.size ? `?${next}` : ''}`);
      },
    },
    FILTERS.map((name) => field(`filter-${name}`, labels[name], controls[name])),
    h('div', { class: 'buttons' },
      h('button', { type: 'submit', class: 'primary' }, 'Apply filters'),
      h('a', { href: '/instances', class: 'button' }, 'Clear')),
  );
  const rows = page.items.map((i) => [
    h('a', { href: `/instances/${encodeURIComponent(i.id)}`, class: 'mono' }, i.id),
    i.flow,
    i.version,
    badge(i.status),
    i.failure ? h('code', {}, i.failure.code) : '—',
    when(i.created_at),
    when(i.updated_at),
  ]);
  const nextQuery = new URLSearchParams(query);
  if (page.next) nextQuery.set('after', page.next);
  const firstQuery = new URLSearchParams(query);
  firstQuery.delete('after');
  const pager = h(
    'nav',
    { class: 'pager', 'aria-label': 'Pages' },
    after ? h('a', { href: `/instances?${firstQuery}` }, '« First page') : null,
    page.next ? h('a', { href: `/instances?${nextQuery}`, rel: 'next' }, 'Next page »') : null,
  );
  replace(
    main,
    title(filter.status ? `Instances: ${filter.status}` : 'Instances'),
    counts,
    form,
    table('Instances', ['Id', 'Flow', 'Version', 'Status', 'Failure', 'Created', 'Updated'], rows, 'No instance matches.'),
    pager,
  );
}

// ---------------------------------------------------------------------------------------------
// One instance

function waitsFor(token, tokens) {
  const park = token.park;
  if (token.state === 'racing') {
    const arms = tokens.filter((t) => t.parent === token.id && t.role?.role === 'arm').length;
    return `the first of its ${arms} race arms`;
  }
  if (token.state === 'looping' && park) {
    // A body whose called instance failed, with no on-error, waits for that instance's repair.
    const failed = tokens.filter((t) => t.parent === token.id && t.role?.role === 'body' && t.park?.failed).length;
    const repair = failed ? ` (${failed} failed, waiting for repair)` : '';
    return `its bodies: ${park.done} of ${park.items} done, ${park.running} running${repair}, ${park.pending} pending`;
  }
  if (token.state === 'compensating' && park) {
    return `its compensation handlers: one running, ${park.pending} more to run`;
  }
  if (!park) return token.state === 'ready' ? 'stopped here' : '—';
  switch (park.kind) {
    case 'task':
      return `task on topic ${park.topic}`;
    case 'receive':
      return `message on ${park.channel} with key ${park.key}`;
    case 'wait':
      return 'a timer';
    case 'call':
      return h(
        'span',
        {},
        'called instance ',
        h('a', { href: `/instances/${encodeURIComponent(park.child)}`, class: 'mono', 'data-child': park.child }, park.child),
        ` of flow ${park.flow}`,
        park.failed ? [' — failed with ', h('code', {}, park.failed.code), ', waiting for its repair'] : null,
      );
    default:
      return park.pending !== undefined ? `${park.pending} branch(es) to end` : JSON.stringify(park);
  }
}

async function graphOf(instance) {
  const graph = await api(`/v1/deployments/${encodeURIComponent(instance.deployment)}/${instance.version}/graph`);
  return graph.flows.find((flow) => flow.name === instance.flow);
}

export async function instance(main, [id]) {
  const path = `/v1/instances/${encodeURIComponent(id)}`;
  const inst = await api(path);
  const [history, tasks, outbox, flow, called] = await Promise.all([
    api(`${path}/history`),
    api(`${path}/tasks`),
    api(`${path}/outbox`),
    graphOf(inst).catch((error) => error),
    api('/v1/instances', { query: { parent: inst.id, limit: 50 } }),
  ]);
  const actionArea = h('div', { class: 'action-area' });
  const act = async (label, verb, request) => {
    replace(actionArea);
    if (!(await confirmAction(`${label} this instance?`, h('p', {}, `${label} instance `, h('code', {}, inst.id), '.'), label))) return;
    try {
      const answer = await request();
      notify(`${verb}: the instance is now ${answer.status}.`);
      await instance(main, [id]);
      watch(main, id);
    } catch (error) {
      replace(actionArea, problemBox(error));
    }
  };
  const actions = h(
    'div',
    { class: 'buttons', role: 'group', 'aria-label': 'Actions' },
    inst.status === 'failed'
      ? h('button', { type: 'button', onclick: () => act('Restore', 'Restored', () => api(`${path}/restore`, { method: 'POST' })) }, 'Restore')
      : null,
    ['suspended', 'failed'].includes(inst.status)
      ? h('button', { type: 'button', onclick: () => migrateForm(inst, actionArea, main) }, 'Migrate…')
      : null,
    !TERMINAL.includes(inst.status)
      ? h('button', { type: 'button', class: 'danger', onclick: () => act('Cancel', 'Cancelled', () => api(`${path}/cancel`, { method: 'POST' })) }, 'Cancel instance')
      : null,
    h('button', { type: 'button', onclick: () => instance(main, [id]) }, 'Refresh'),
  );
  const failure = inst.failure
    ? h(
        'div',
        { class: 'failure', role: 'note', 'aria-label': 'Failure' },
        h('p', {}, 'Failed at node ', h('code', {}, inst.failure.node || '—'), ' with ', h('code', { class: 'failure-code' }, inst.failure.code)),
        h('p', {}, inst.failure.detail),
      )
    : null;
  const graph =
    flow instanceof Error
      ? problemBox(flow)
      : flow
        ? h('div', { class: 'graph' }, drawFlow(flow, { tokens: inst.tokens, failure: inst.failure, history }))
        : h('p', {}, 'The flow is not in its deployment version.');
  // A race's arms, a reminder's or a loop's deadline timer and a loop's bodies say whom they
  // serve.
  const role = (t) => {
    switch (t.role?.role) {
      case 'arm':
        return ` (arm ${t.role.index + 1} of token ${t.parent})`;
      case 'reminder':
        return ` (reminder of token ${t.parent}, fired ${t.role.fired})`;
      case 'detached':
        return ' (running a reminder)';
      case 'body':
        return ` (body for item ${t.role.index} of token ${t.parent})`;
      case 'deadline':
        return ` (deadline of token ${t.parent})`;
      case 'compensation':
        return ` (undoing completion ${t.role.entry} for token ${t.parent})`;
      default:
        return '';
    }
  };
  const tokens = inst.tokens.map((t) => [
    `${t.id}${role(t)}`,
    h('code', {}, t.node),
    t.state,
    waitsFor(t, inst.tokens),
    t.park?.due ? when(t.park.due) : '—',
    t.park?.id ?? '—',
  ]);
  const events = h(
    'ol',
    { class: 'timeline', 'aria-label': 'History' },
    history.map((e) =>
      h(
        'li',
        {},
        h('span', { class: 'seq' }, `#${e.seq}`),
        ' ',
        h('strong', {}, e.kind),
        e.node ? [' at ', h('code', {}, e.node)] : null,
        ' ',
        when(e.at),
        e.detail && Object.keys(e.detail).length
          ? h('details', {}, h('summary', {}, 'detail'), json(e.detail))
          : null,
      ),
    ),
  );
  replace(
    main,
    title(`Instance ${inst.id}`),
    h(
      'dl',
      { class: 'facts' },
      h('dt', {}, 'Status'), h('dd', { 'data-status': inst.status }, badge(inst.status)),
      h('dt', {}, 'Flow'), h('dd', {}, inst.flow),
      inst.parent
        ? [
            h('dt', {}, 'Called by'),
            h('dd', {},
              h('a', { href: `/instances/${encodeURIComponent(inst.parent.instance)}`, class: 'mono', rel: 'up' }, inst.parent.instance),
              ' at ', h('code', {}, inst.parent.node), ` (depth ${inst.parent.depth})`),
          ]
        : null,
      h('dt', {}, 'Deployment'),
      h('dd', {}, h('a', { href: `/deployments/${encodeURIComponent(inst.deployment)}/${inst.version}` }, `${inst.deployment} v${inst.version}`)),
      h('dt', {}, 'Created'), h('dd', {}, when(inst.created_at)),
      h('dt', {}, 'Updated'), h('dd', {}, when(inst.updated_at)),
    ),
    failure,
    actions,
    actionArea,
    h('section', { 'aria-labelledby': 'graph-title' }, h('h2', { id: 'graph-title' }, 'Graph'), graph),
    h('section', { 'aria-labelledby': 'tokens-title' }, h('h2', { id: 'tokens-title' }, 'Tokens and parks'),
      table('Tokens', ['Token', 'Node', 'State', 'Waits for', 'Until', 'Park'], tokens, 'No tokens: the instance has ended.')),
    called.items.length
      ? h('section', { 'aria-labelledby': 'called-title' }, h('h2', { id: 'called-title' }, 'Called instances'),
          table('Called instances', ['Id', 'Flow', 'Status', 'Created'], called.items.map((c) => [
            h('a', { href: `/instances/${encodeURIComponent(c.id)}`, class: 'mono' }, c.id),
            c.flow,
            badge(c.status),
            when(c.created_at),
          ])),
          called.next ? h('a', { href: `/instances?parent=${encodeURIComponent(inst.id)}` }, 'Every called instance »') : null)
      : null,
    inst.compensations?.length
      ? h('section', { 'aria-labelledby': 'compensation-title' }, h('h2', { id: 'compensation-title' }, 'Compensation log'),
          table('Compensation log', ['#', 'Completed node', 'Inside', 'Compensated'], inst.compensations.map((c, i) => [
            i,
            h('code', {}, c.node),
            c.within?.length ? c.within.join(' › ') : '—',
            c.compensated ? 'yes' : 'not yet',
          ])))
      : null,
    h('section', { 'aria-labelledby': 'vars-title' }, h('h2', { id: 'vars-title' }, 'Variables'), json(inst.vars)),
    h('section', { 'aria-labelledby': 'history-title' }, h('h2', { id: 'history-title' }, 'History'), events),
    h('section', { 'aria-labelledby': 'tasks-title' }, h('h2', { id: 'tasks-title' }, 'Tasks'),
      table('Tasks', ['Task', 'Topic', 'State', 'Attempt', 'Worker', 'Lock expires'],
        tasks.map((t) => [h('code', {}, t.id), t.topic, t.state, `${t.attempt} of ${t.retries + 1}`, t.worker || '—', when(t.lock_expires_at)]))),
    h('section', { 'aria-labelledby': 'outbox-title' }, h('h2', { id: 'outbox-title' }, 'Outbox'),
      table('Outbox', ['Channel', 'Key', 'State', 'Attempts', 'Last error', 'Sent'],
        outbox.map((m) => [m.channel, m.message_key || '—', m.state, m.attempts, m.last_error || '—', when(m.sent_at)]))),
  );
}

// After an action, follows the instance for a while and redraws it as it moves, unless the
// user has opened a form meanwhile.
function watch(main, id) {
  let last = null;
  let rounds = 0;
  const timer = setInterval(async () => {
    rounds += 1;
    if (rounds > 20 || main.querySelector('form')) {
      clearInterval(timer);
      return;
    }
    try {
      const inst = await api(`/v1/instances/${encodeURIComponent(id)}`);
      const seen = `${inst.status}:${inst.audit_seq}`;
      if (last !== null && seen !== last) await instance(main, [id]);
      last = seen;
      if (TERMINAL.includes(inst.status) || inst.status === 'failed') clearInterval(timer);
    } catch {
      clearInterval(timer);
    }
  }, 1000);
  onLeave(() => clearInterval(timer));
}

async function migrateForm(inst, area, main) {
  const deployments = await api('/v1/deployments');
  const versions = deployments.items.filter(
    (d) => d.name === inst.deployment && d.version !== inst.version && d.status !== 'retired',
  );
  if (!versions.length) {
    replace(area, h('p', { role: 'alert' }, `No other version of ${inst.deployment} to migrate onto: deploy one first.`));
    return;
  }
  const version = select(versions.map((d) => [String(d.version), `v${d.version} (${d.status})`]), String(versions.at(-1).version));
  const mapping = h('div', { class: 'mapping' });
  const fromNodes = [...new Set(inst.tokens.map((t) => t.node))];
  const loadTargets = async () => {
    const graph = await api(`/v1/deployments/${encodeURIComponent(inst.deployment)}/${version.value}/graph`);
    const target = graph.flows.find((f) => f.name === inst.flow);
    const ids = target ? target.nodes.map((n) => n.id) : [];
    replace(
      mapping,
      h('p', {}, 'Map each node a token is at onto a node of the new version:'),
      fromNodes.map((node, i) => {
        const choice = select(ids.map((x) => [x, x]), ids.includes(node) ? node : ids[0]);
        choice.dataset.from = node;
        return field(`map-${i}`, `Node ${node} becomes`, choice);
      }),
    );
  };
  version.addEventListener('change', loadTargets);
  await loadTargets();
  const form = h(
    'form',
    {
      class: 'migrate',
      'aria-label': 'Migrate',
      onsubmit: async (event) => {
        event.preventDefault();
        const map = {};
        for (const choice of mapping.querySelectorAll('select')) {
          if (choice.value && choice.value !== choice.dataset.from) map[choice.dataset.from] = choice.value;
        }
        const toVersion = Number(version.value);
        const described = Object.entries(map).map(([a, b]) => `${a} → ${b}`).join(', ') || 'no node renamed';
        const ok = await confirmAction(
          'Migrate this instance?',
          h('p', {}, `Move instance `, h('code', {}, inst.id), ` from v${inst.version} onto v${toVersion} (${described}).`),
          'Migrate',
        );
        if (!ok) return;
        try {
          const answer = await api(`/v1/instances/${encodeURIComponent(inst.id)}/migrate`, {
            method: 'POST',
            body: { to_version: toVersion, map },
          });
          notify(`Migrated onto v${answer.version}: the instance is ${answer.status}.`);
          await instance(main, [inst.id]);
        } catch (error) {
          replace(area, form, problemBox(error));
        }
      },
    },
    h('h2', {}, 'Migrate'),
    field('migrate-version', 'Target version', version),
    mapping,
    h('div', { class: 'buttons' },
      h('button', { type: 'submit', class: 'primary' }, 'Migrate'),
      h('button', { type: 'button', onclick: () => replace(area) }, 'Close')),
  );
  replace(area, form);
  version.focus();
}

// ---------------------------------------------------------------------------------------------
// Failed inbox

const SCAN_PAGES = 20;

export async function failed(main) {
  const { items, truncated } = await allPages('/v1/instances', { status: 'failed', limit: 500 }, SCAN_PAGES);
  const groups = new Map();
  for (const i of items) {
    const code = i.failure?.code || '(no code)';
    if (!groups.has(code)) groups.set(code, { code, count: 0, versions: new Map() });
    const group = groups.get(code);
    group.count += 1;
    const key = `${i.deployment}\u0000${i.flow}\u0000${i.version}`;
    group.versions.set(key, (group.versions.get(key) || 0) + 1);
  }
  const area = h('div', { class: 'action-area' });
  const rows = [...groups.values()]
    .sort((a, b) => b.count - a.count)
    .map((g) => {
      const where = [...g.versions.entries()].map(([key, n]) => {
        const [deployment, flow, version] = key.split('\u0000');
        return h('li', {}, `${flow} (${deployment} v${version}): ${n}`);
      });
      const label = (verb) => `${verb} every instance failed with ${g.code}`;
      return [
        h('a', { href: `/instances?status=failed&failure_code=${encodeURIComponent(g.code)}` }, h('code', {}, g.code)),
        h('span', { class: 'n', 'data-count': g.code }, g.count),
        h('ul', { class: 'plain' }, where),
        h('div', { class: 'buttons' },
          h('button', { type: 'button', 'aria-label': label('Restore'), onclick: () => bulkForm(g, 'restore', area, main) }, 'Restore…'),
          h('button', { type: 'button', 'aria-label': label('Migrate'), onclick: () => bulkForm(g, 'migrate', area, main) }, 'Migrate…'),
          h('button', { type: 'button', class: 'danger', 'aria-label': label('Cancel'), onclick: () => bulkForm(g, 'cancel', area, main) }, 'Cancel…')),
      ];
    });
  replace(
    main,
    title('Failed inbox'),
    h('p', {}, `${items.length} failed instance${items.length === 1 ? '' : 's'}, by failure code.`,
      truncated ? ` Only the first ${items.length} were read.` : ''),
    table('Failed instances by failure code', ['Failure code', 'Count', 'Where', 'Bulk actions'], rows, 'No failed instance.'),
    area,
  );
}

// Every page of a bulk call; `progress(done)` after each.
async function bulkPages(body, progress) {
  const results = [];
  let after;
  do {
    const page = await api('/v1/instances/bulk', { method: 'POST', body: { ...body, after, limit: 100 } });
    results.push(...page.results);
    progress(results.length);
    after = page.next || undefined;
  } while (after);
  return results;
}

function bulkForm(group, action, area, main) {
  const scopes = [...group.versions.keys()].map((key) => key.split('\u0000'));
  const scope = select(
    [['', 'every flow and version'], ...scopes.map(([d, f, v]) => [`${f}\u0000${v}`, `${f} (${d} v${v})`])],
    action === 'migrate' && scopes.length ? `${scopes[0][1]}\u0000${scopes[0][2]}` : '',
  );
  const toVersion = h('input', { type: 'number', min: 1, required: true });
  const map = h('input', { type: 'text', placeholder: 'old=new, other=renamed' });
  const progress = h('progress', { max: 1, value: 0, 'aria-label': 'Bulk progress' });
  const said = h('p', { role: 'status', class: 'bulk-status' });
  const out = h('div');
  const filter = () => {
    const f = { status: 'failed', failure_code: group.code };
    if (scope.value) {
      const [flow, version] = scope.value.split('\u0000');
      f.flow = flow;
      f.version = Number(version);
    }
    return f;
  };
  const body = () => {
    const b = { filter: filter(), action };
    if (action === 'migrate') {
      b.to_version = Number(toVersion.value);
      b.map = Object.fromEntries(
        map.value.split(',').map((pair) => pair.split('=').map((x) => x.trim())).filter(([a, c]) => a && c),
      );
    }
    return b;
  };
  const verb = { restore: 'Restore', cancel: 'Cancel', migrate: 'Migrate' }[action];
  const form = h(
    'form',
    {
      class: 'bulk',
      'aria-label': `${verb} in bulk`,
      onsubmit: async (event) => {
        event.preventDefault();
        replace(out);
        try {
          said.textContent = 'Counting (dry run)…';
          const matched = await bulkPages({ ...body(), dry_run: true }, (n) => {
            said.textContent = `Counting (dry run): ${n}…`;
          });
          said.textContent = `Dry run: ${matched.length} instance${matched.length === 1 ? '' : 's'} match.`;
          if (!matched.length) return;
          const ok = await confirmAction(
            `${verb} ${matched.length} instance${matched.length === 1 ? '' : 's'}?`,
            h('p', {}, `${verb} every failed instance with `, h('code', {}, group.code), scope.value ? ` on ${scope.selectedOptions[0].textContent}` : '', `: ${matched.length} by the dry run.`),
            `${verb} ${matched.length}`,
          );
          if (!ok) return;
          progress.max = matched.length;
          const results = await bulkPages(body(), (n) => {
            progress.value = Math.min(n, matched.length);
            said.textContent = `${verb}: ${n} of ${matched.length}…`;
          });
          const counts = {};
          for (const r of results) counts[r.outcome] = (counts[r.outcome] || 0) + 1;
          const summary = Object.entries(counts).map(([k, n]) => `${n} ${k}`).join(', ') || 'nothing';
          said.textContent = `${verb} finished: ${summary}.`;
          notify(`${verb} finished: ${summary}.`);
          const refused = results.filter((r) => r.outcome !== 'done');
          replace(out, table('Not done', ['Instance', 'Outcome', 'Code', 'Detail'],
            refused.map((r) => [h('a', { href: `/instances/${r.instance}` }, r.instance), r.outcome, r.code || '—', r.detail || '—']), ''));
        } catch (error) {
          said.textContent = '';
          replace(out, problemBox(error));
        }
      },
    },
    h('h2', {}, `${verb} failed instances with `, h('code', {}, group.code)),
    field('bulk-scope', 'Which instances', scope),
    action === 'migrate' ? [field('bulk-to-version', 'Target version', toVersion), field('bulk-map', 'Rename nodes (old=new, comma separated)', map)] : null,
    h('p', {}, 'A dry run counts the instances first; nothing is done before you confirm.'),
    h('div', { class: 'buttons' },
      h('button', { type: 'submit', class: 'primary' }, `Count and ${verb.toLowerCase()}`),
      h('button', { type: 'button', onclick: () => { replace(area); failed(main); } }, 'Close')),
    progress,
    said,
    out,
  );
  replace(area, form);
  scope.focus();
}

// ---------------------------------------------------------------------------------------------
// Deployments

export async function deployments(main) {
  const page = await api('/v1/deployments');
  const rows = page.items
    .slice()
    .sort((a, b) => a.name.localeCompare(b.name) || b.version - a.version)
    .map((d) => [
      h('a', { href: `/deployments/${encodeURIComponent(d.name)}/${d.version}` }, `${d.name} v${d.version}`),
      badge(d.status),
      when(d.created_at),
    ]);
  replace(main, title('Deployments'), table('Deployment versions', ['Version', 'Status', 'Deployed'], rows, 'Nothing deployed yet.'));
}

export async function deployment(main, [name, version]) {
  const base = `/v1/deployments/${encodeURIComponent(name)}/${version}`;
  const [d, graph] = await Promise.all([api(base), api(`${base}/graph`)]);
  const blocking = d.retirement
    ? h('div', { class: 'retirement', role: 'note', 'aria-label': 'Retirement' },
        h('p', {}, 'Draining: it retires once nothing below is left.'),
        h('ul', {},
          h('li', {}, `${d.retirement.instances} pinned instance(s) not ended (`, h('a', { href: `/instances?version=${version}` }, 'see them'), ')'),
          h('li', {}, `${d.retirement.outbox} outbox row(s) not sent`),
          h('li', {}, `${d.retirement.tasks} task(s) available or locked`)))
    : null;
  replace(
    main,
    title(`${d.name} v${d.version}`),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Status'), h('dd', {}, badge(d.status)),
      h('dt', {}, 'Deployed'), h('dd', {}, when(d.created_at))),
    blocking,
    graph.flows.map((flow) =>
      h('section', { 'aria-label': `Flow ${flow.name}` }, h('h2', {}, `Flow ${flow.name}`), h('div', { class: 'graph' }, drawFlow(flow)))),
    h('section', { 'aria-labelledby': 'yaml-title' }, h('h2', { id: 'yaml-title' }, 'YAML'), h('pre', { class: 'yaml', tabindex: '0' }, h('code', {}, d.source || ''))),
  );
}

// ---------------------------------------------------------------------------------------------
// Tasks

export async function tasks(main, _params, query) {
  const states = ['available', 'locked', 'terminal'];
  const listed = await Promise.all(states.map((state) => allPages('/v1/tasks', { state, limit: 500 }, 4)));
  const byTopic = new Map();
  listed.forEach(({ items }, i) => {
    for (const t of items) {
      if (!byTopic.has(t.topic)) byTopic.set(t.topic, { available: 0, locked: 0, terminal: 0 });
      byTopic.get(t.topic)[states[i]] += 1;
    }
  });
  const topic = query.get('topic') || '';
  const state = query.get('state') || '';
  const page = await api('/v1/tasks', { query: { topic: topic || undefined, state: state || undefined, after: query.get('after') || undefined, limit: 50 } });
  const topicRows = [...byTopic.entries()].sort().map(([t, c]) => [
    h('a', { href: `/tasks?topic=${encodeURIComponent(t)}` }, t), c.available, c.locked, c.terminal,
  ]);
  const topicControl = h('input', { type: 'text', value: topic });
  const stateControl = select([['', 'any'], ...['available', 'locked', 'completed', 'failed', 'terminal', 'cancelled'].map((x) => [x, x])], state);
  const next = new URLSearchParams(query);
  if (page.next) next.set('after', page.next);
  replace(
    main,
    title('Tasks'),
    table('Tasks by topic', ['Topic', 'Available', 'Locked', 'Terminal'], topicRows, 'No open or terminal task.'),
    h('form', {
      class: 'filters', 'aria-label': 'Filter tasks',
      onsubmit: (event) => {
        event.preventDefault();
        const q = new URLSearchParams();
        if (topicControl.value) q.set('topic', topicControl.value);
        if (stateControl.value) q.set('state', stateControl.value);
        navigate(`/tasks?${q}`);
      },
    },
    field('task-topic', 'Topic', topicControl), field('task-state', 'State', stateControl),
    h('div', { class: 'buttons' }, h('button', { type: 'submit', class: 'primary' }, 'Apply filters'))),
    table('Task list', ['Task', 'Topic', 'Instance', 'State', 'Attempt', 'Worker', 'Lock expires'],
      page.items.map((t) => [h('code', {}, t.id), t.topic, h('a', { href: `/instances/${t.instance}`, class: 'mono' }, t.instance), t.state, `${t.attempt} of ${t.retries + 1}`, t.worker || '—', when(t.lock_expires_at)]),
      'No task matches.'),
    page.next ? h('nav', { class: 'pager', 'aria-label': 'Pages' }, h('a', { href: `/tasks?${next}` }, 'Next page »')) : null,
  );
}

// ---------------------------------------------------------------------------------------------
// Schedules: the scheduled flows, when each fires next, and an operator's pause

export async function schedules(main) {
  const listed = await api('/v1/schedules');
  const actionArea = h('div', { class: 'action-area' });
  const toggle = async (sched) => {
    const label = sched.paused ? 'Resume' : 'Pause';
    const name = `${sched.deployment}/${sched.flow}`;
    const consequence = sched.paused
      ? 'Its next due tick fires at the scheduler\'s next look; ticks missed in the pause fire as its catch-up says.'
      : 'No tick fires, on any replica, until it is resumed.';
    replace(actionArea);
    if (!(await confirmAction(`${label} this schedule?`, h('p', {}, `${label} `, h('code', {}, name), '. ', consequence), label))) return;
    try {
      const path = `/v1/schedules/${encodeURIComponent(sched.deployment)}/${encodeURIComponent(sched.flow)}/${sched.paused ? 'resume' : 'pause'}`;
      const answer = await api(path, { method: 'POST' });
      notify(`${name} is ${answer.paused ? 'paused' : 'running'}.`);
      await schedules(main);
    } catch (error) {
      replace(actionArea, problemBox(error));
    }
  };
  replace(
    main,
    title('Schedules'),
    h('p', {}, 'Flows the engine starts by itself, one instance per tick across the fleet (',
      h('code', {}, 'start: { schedule }'), ').'),
    actionArea,
    table('Schedules', ['Deployment', 'Flow', 'Schedule', 'Time zone', 'Next tick', 'Last tick', 'Last instance', 'State', ''],
      listed.items.map((sched) => [
        h('a', { href: `/deployments/${encodeURIComponent(sched.deployment)}/${sched.version}` }, `${sched.deployment} v${sched.version}`),
        sched.flow,
        h('code', {}, sched.expression),
        sched.timezone,
        sched.next_at ? when(sched.next_at) : 'never',
        sched.last_at ? when(sched.last_at) : '—',
        sched.last_instance ? h('a', { href: `/instances/${sched.last_instance}`, class: 'mono' }, sched.last_instance) : '—',
        badge(sched.paused ? 'paused' : 'running'),
        h('button', { type: 'button', onclick: () => toggle(sched) }, sched.paused ? 'Resume' : 'Pause'),
      ]),
      'No schedules: no active deployment version has a flow with start: { schedule }.'),
  );
}

export { ApiError };
