// The System page: the replicas and their leases, and the last fifteen minutes of the replica
// that answers — steps per second, backlog, step latency, failures per minute — drawn as inline
// SVG from GET /v1/system/history (decision 0061). A tenant's administrator is answered its own
// tenant's steps alone, without the fleet's backlog, which the page then shows as counted now
// (decision 0076).

import { h, s, replace, when } from './dom.js';
import { api } from './api.js';
import { problemBox, onLeave } from './app.js';
import { title, table } from './views.js';

// How often the page asks again: twice per sample, so a new one shows within five seconds.
const REFRESH_MS = 5000;

// The chart's drawing area, in SVG units; it scales to its column.
const W = 560;
const H = 180;
const PAD = { left: 52, right: 12, top: 10, bottom: 24 };
const TICK_MS = 5 * 60 * 1000;

// Rounds up to 1, 2 or 5 times a power of ten: the top of a chart's scale.
function roundUp(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((m) => m * power).find((top) => top >= value);
}

// A figure as it reads: at most three significant digits, no trailing zeros.
function figure(value) {
  if (value === null || value === undefined) return '—';
  if (value === 0 || Math.abs(value) >= 100) return String(Math.round(value));
  return String(Number(value.toPrecision(value >= 1 ? 3 : 2)));
}

// Seconds of an ISO 8601 duration as the server writes them (`PT10S`, `PT15M`).
function seconds(iso) {
  const [, hours = 0, minutes = 0, secs = 0] = /^PT(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?$/.exec(iso) || [];
  return Number(hours) * 3600 + Number(minutes) * 60 + Number(secs);
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

// Where a chart puts a time (ms) and a value: the window ending at `end` across, 0 to `top` up.
function scale(end, windowMs, top) {
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  return {
    x: (ms) => PAD.left + ((ms - (end - windowMs)) / windowMs) * plotW,
    y: (value) => PAD.top + plotH - (value / top) * plotH,
  };
}

// The value axis with its grid at 0, half and the top, and the clock times every five minutes.
function axes({ x, y }, top, end, windowMs) {
  const grid = [0, top / 2, top].map((value) =>
    s('g', { class: 'grid' },
      s('line', { x1: PAD.left, x2: W - PAD.right, y1: y(value), y2: y(value) }),
      s('text', { x: PAD.left - 6, y: y(value) + 4, 'text-anchor': 'end' }, figure(value))));
  const ticks = [];
  for (let at = Math.ceil((end - windowMs) / TICK_MS) * TICK_MS; at <= end; at += TICK_MS) {
    ticks.push(s('text', { x: x(at), y: H - 6, 'text-anchor': 'middle', class: 'tick' }, clock(at)));
  }
  return [s('line', { class: 'axis', x1: PAD.left, x2: PAD.left, y1: y(top), y2: y(0) }), grid, ticks];
}

// One series as a path over `times`, broken where a value is null, its last point marked; its
// values on `data-values` for the tests and for scripts.
function drawLine(line, times, { x, y }) {
  let d = '';
  let pen = 'M';
  let last = null;
  line.values.forEach((value, i) => {
    if (value === null) {
      pen = 'M';
      return;
    }
    last = [x(times[i]).toFixed(1), y(value).toFixed(1)];
    d += `${pen}${last[0]},${last[1]} `;
    pen = 'L';
  });
  const values = JSON.stringify(line.values.map((v) => (v === null ? null : Number(v.toFixed(4)))));
  return s('g', { class: `series ${line.kind}` },
    s('path', { d: d.trim() || 'M0,0', 'data-series': line.name, 'data-values': values }),
    last ? s('circle', { cx: last[0], cy: last[1], r: 3 }) : null);
}

const current = (line) => line.values.findLast((v) => v !== null) ?? null;
const peak = (line) => Math.max(0, ...line.values.filter((v) => v !== null));

// One chart: its lines over the window ending at `end` (ms), each line's current value in the
// legend, and what it shows said to a screen reader.
function chart({ name, heading, unit, series, times, end, windowMs }) {
  const top = roundUp(Math.max(...series.map(peak)));
  const at = scale(end, windowMs, top);
  const said = series.map((line) => `${line.label} ${figure(current(line))} now, ${figure(peak(line))} at most`).join('; ');
  return h('figure', { class: 'chart', 'data-chart': name },
    h('figcaption', {},
      h('span', { class: 'chart-title' }, heading), ' ', h('span', { class: 'unit' }, unit),
      h('ul', { class: 'legend' }, series.map((line) =>
        h('li', { class: line.kind }, h('span', { class: 'swatch', 'aria-hidden': 'true' }), `${line.label} `,
          h('strong', { 'data-now': line.name }, figure(current(line))))))),
    s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${heading} (${unit}), last ${windowMs / 60000} minutes: ${said}.` },
      axes(at, top, end, windowMs),
      series.map((line) => drawLine(line, times, at))));
}

// A rate per `per` seconds of a sample's count; null when the interval is not known.
const rate = (count, sample, per = 1) => (sample.seconds > 0 ? (count * per) / sample.seconds : null);

function charts(history) {
  const samples = history.samples;
  const times = samples.map((x) => Date.parse(x.at));
  // The window ends at the last sample, or where a replica without one started.
  const frame = { times, end: times.at(-1) ?? Date.parse(history.since), windowMs: seconds(history.window) * 1000 };
  const of = (field, scale = (v) => v) => samples.map((x) => (x[field] === null ? null : scale(x[field])));
  const ms = (seconds) => seconds * 1000;
  // The backlog is sampled for the fleet only: a tenant's samples have none to draw.
  const backlog = history.tenant
    ? null
    : chart({ ...frame, name: 'backlog', heading: 'Backlog', unit: 'fleet-wide', series: [
      { name: 'inbox', label: 'inbox', kind: 'line-a', values: of('inbox_backlog') },
      { name: 'outbox', label: 'outbox', kind: 'line-b', values: of('outbox_backlog') },
      { name: 'tasks', label: 'tasks available', kind: 'line-c', values: of('tasks_available') },
    ] });
  return h('div', { class: 'charts' },
    chart({ ...frame, name: 'steps', heading: 'Steps per second', unit: 'committed steps/s', series: [
      { name: 'steps', label: 'steps/s', kind: 'line-a', values: samples.map((x) => rate(x.steps, x)) },
    ] }),
    backlog,
    chart({ ...frame, name: 'latency', heading: 'Step latency', unit: 'ms', series: [
      { name: 'p50', label: 'p50', kind: 'line-a', values: of('latency_p50', ms) },
      { name: 'p99', label: 'p99', kind: 'line-b', values: of('latency_p99', ms) },
    ] }),
    chart({ ...frame, name: 'failures', heading: 'Failures per minute', unit: 'per minute', series: [
      { name: 'instances', label: 'instances failed', kind: 'line-bad', values: samples.map((x) => rate(x.instances_failed, x, 60)) },
      { name: 'steps-failed', label: 'steps not committed', kind: 'line-b', values: samples.map((x) => rate(x.steps_failed, x, 60)) },
    ] }));
}

// Whose figures these are: a replica answers with its own steps (a tenant's alone, for its
// administrator), and a fleet behind a balancer may answer each refresh from another.
function about(history) {
  const kept = history.samples.length;
  const whose = history.tenant
    ? [': tenant ', h('code', { 'data-tenant': history.tenant }, history.tenant), '\'s steps, latency and failures on it, ']
    : [': its own steps, latency and failures, and the fleet\'s backlog as the database counts it, '];
  return h('p', { class: 'about' },
    'Replica ', h('code', { 'data-replica': history.replica }, history.replica),
    ...whose,
    `a sample every ${seconds(history.interval)} s since `, when(history.since),
    kept ? ` (${kept} sample${kept === 1 ? '' : 's'}).` : '. No sample yet: the first is taken one interval after the replica started.',
    ' Another replica keeps its own.');
}

// What the scaling signal says now: for a tenant, its own backlog too, which its samples lack.
function facts(scaling) {
  const available = Object.values(scaling.tasks_available).reduce((sum, n) => sum + n, 0);
  const backlog = scaling.tenant
    ? [
      h('dt', {}, 'Messages waiting for a receive now'), h('dd', {}, scaling.inbox_backlog),
      h('dt', {}, 'Outbox rows waiting to be sent now'), h('dd', {}, scaling.outbox_backlog),
      h('dt', {}, 'Tasks waiting for a worker now'), h('dd', {}, available),
    ]
    : [];
  return h('dl', { class: 'facts' },
    h('dt', {}, 'Steps in progress here now'), h('dd', {}, scaling.claims_in_flight),
    h('dt', {}, 'Tasks locked by workers now'), h('dd', {}, scaling.tasks_locked),
    ...backlog);
}

export async function system(main) {
  const leases = await api('/v1/leases');
  const live = h('div', { class: 'live', 'aria-live': 'off' });
  replace(
    main,
    title('System'),
    h('section', { 'aria-labelledby': 'leases-title' },
      h('h2', { id: 'leases-title' }, 'Replicas and leases'),
      h('p', {}, 'Answered by replica ', h('code', {}, leases.replica), leases.leading.length ? `, which leads ${leases.leading.join(', ')}.` : '.'),
      table('Leases', ['Role', 'Holder', 'Until', 'Epoch'],
        leases.items.map((l) => [l.role, h('code', {}, l.holder), when(l.expires_at), l.epoch]),
        'No lease rows: every replica leads every role (the embedded store).')),
    h('section', { 'aria-labelledby': 'live-title' }, h('h2', { id: 'live-title' }, 'The last 15 minutes'), live),
  );
  const tick = async () => {
    try {
      const [history, scaling] = await Promise.all([api('/v1/system/history'), api('/v1/scaling')]);
      replace(live, about(history), charts(history), facts(scaling));
    } catch (error) {
      replace(live, problemBox(error));
    }
  };
  await tick();
  const timer = setInterval(tick, REFRESH_MS);
  onLeave(() => clearInterval(timer));
}
