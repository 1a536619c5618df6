// A flow drawn as SVG from its deployment's graph (GET /v1/deployments/{name}/{version}/graph):
// nodes in layers by their longest path from the start, a `parallel` node forking into its
// branches and a join node gathering them, choice arms and error routes labelled, and the
// instance's tokens and failure marked on the nodes they are at.

import { s } from './dom.js';

const BOX_W = 164;
const BOX_H = 46;
const GAP_X = 28;
const GAP_Y = 46;
const PAD = 24;
// Room beside the nodes for edges that skip layers (left) and go back (right).
const SIDE = 96;

function clip(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

// The vertices and edges to lay out: the flow's nodes, plus `start`, `end` and one join per
// `parallel` node.
function vertices(flow) {
  const byId = new Map(flow.nodes.map((node) => [node.id, node]));
  const vs = new Map();
  vs.set('start', { id: 'start', kind: 'start', synthetic: true });
  for (const node of flow.nodes) {
    vs.set(node.id, { ...node });
    if (node.kind === 'parallel') {
      vs.set(`join:${node.id}`, { id: `join:${node.id}`, kind: 'join', synthetic: true });
    }
  }
  vs.set('end', { id: 'end', kind: 'end-of-flow', synthetic: true });
  const endOf = (node) => (node.branch_of ? `join:${node.branch_of}` : 'end');
  const edges = [{ from: 'start', to: flow.entry ?? 'end', label: 'next' }];
  for (const node of flow.nodes) {
    for (const edge of node.edges) {
      if (edge.label === 'branch') {
        edges.push({ from: node.id, to: edge.to ?? `join:${node.id}`, label: 'branch' });
      } else if (edge.label === 'join') {
        edges.push({ from: `join:${node.id}`, to: edge.to ?? endOf(node), label: 'next' });
      } else {
        edges.push({ from: node.id, to: edge.to ?? endOf(byId.get(node.id)), label: edge.label });
      }
    }
  }
  // A flow whose every path ends at an `end` or `fail` node never reaches the end of its list.
  if (!edges.some((edge) => edge.to === 'end')) vs.delete('end');
  return { vs, edges };
}

// Layers by longest path over the edges that are not back edges (found by a depth-first walk
// from the start), each layer ordered once by its parents' mean position.
function layout(vs, edges) {
  const out = new Map([...vs.keys()].map((id) => [id, []]));
  for (const edge of edges) out.get(edge.from)?.push(edge);
  const order = [];
  const state = new Map();
  const visit = (id) => {
    state.set(id, 'open');
    order.push(id);
    for (const edge of out.get(id) || []) {
      const seen = state.get(edge.to);
      if (seen === 'open') edge.back = true;
      else if (!seen) visit(edge.to);
    }
    state.set(id, 'done');
  };
  visit('start');
  // Unreachable nodes (the checker warns of them) still get drawn.
  for (const id of vs.keys()) if (!state.has(id)) visit(id);
  const rank = new Map(order.map((id) => [id, 0]));
  const forward = edges.filter((edge) => !edge.back && vs.has(edge.to));
  for (let changed = true, rounds = 0; changed && rounds < vs.size + 1; rounds += 1) {
    changed = false;
    for (const edge of forward) {
      const want = rank.get(edge.from) + 1;
      if (rank.get(edge.to) < want) {
        rank.set(edge.to, want);
        changed = true;
      }
    }
  }
  // `end` goes last.
  const last = Math.max(...rank.values());
  if ([...rank.entries()].some(([id, r]) => r === last && id !== 'end')) rank.set('end', last + 1);
  const layers = [];
  for (const id of order) {
    const r = rank.get(id);
    (layers[r] ||= []).push(id);
  }
  const pos = new Map();
  const widest = Math.max(...layers.map((layer) => layer?.length || 0));
  const width = widest * BOX_W + (widest - 1) * GAP_X + 2 * (PAD + SIDE);
  layers.forEach((layer, r) => {
    if (!layer) return;
    if (r > 0) {
      const mean = (id) => {
        const xs = forward.filter((e) => e.to === id && pos.has(e.from)).map((e) => pos.get(e.from).x);
        return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : width / 2;
      };
      const means = new Map(layer.map((id) => [id, mean(id)]));
      layer.sort((a, b) => means.get(a) - means.get(b));
    }
    const span = layer.length * BOX_W + (layer.length - 1) * GAP_X;
    const left = (width - span) / 2;
    layer.forEach((id, i) => {
      pos.set(id, { x: left + i * (BOX_W + GAP_X) + BOX_W / 2, y: PAD + r * (BOX_H + GAP_Y) });
    });
  });
  const height = PAD * 2 + layers.length * BOX_H + (layers.length - 1) * GAP_Y;
  return { pos, rank, width, height };
}

function edgePath(a, b, back, skips) {
  if (skips) {
    // Around the layers it skips, on the left.
    const x = Math.min(a.x, b.x) - BOX_W / 2 - SIDE / 2;
    return `M${a.x - BOX_W / 2},${a.y + BOX_H / 2} C${x},${a.y + BOX_H / 2} ${x},${b.y + BOX_H / 2} ${b.x - BOX_W / 2},${b.y + BOX_H / 2}`;
  }
  if (back) {
    const x = Math.max(a.x, b.x) + BOX_W / 2 + 16;
    return `M${a.x + BOX_W / 2},${a.y + BOX_H / 2} C${x},${a.y + BOX_H / 2} ${x},${b.y + BOX_H / 2} ${b.x + BOX_W / 2},${b.y + BOX_H / 2}`;
  }
  const y1 = a.y + BOX_H;
  const y2 = b.y;
  const mid = (y1 + y2) / 2;
  return `M${a.x},${y1} C${a.x},${mid} ${b.x},${mid} ${b.x},${y2}`;
}

// The SVG of `flow`, with `tokens` (the instance's) and `failure` marked.
export function drawFlow(flow, { tokens = [], failure = null } = {}) {
  const { vs, edges } = vertices(flow);
  const { pos, rank, width: drawn, height } = layout(vs, edges);
  // A failure code is written beside its node.
  const width = failure?.node ? drawn + 2 * 190 : drawn;
  if (width !== drawn) for (const p of pos.values()) p.x += 190;
  const at = new Map();
  for (const token of tokens) {
    if (!at.has(token.node)) at.set(token.node, []);
    at.get(token.node).push(token);
  }
  const summary = [...at.entries()]
    .map(([node, ts]) => `${ts.length} token${ts.length > 1 ? 's' : ''} at ${node} (${ts.map((t) => t.state).join(', ')})`)
    .join('; ');
  const failed = failure?.node ? `; failed at ${failure.node} with ${failure.code}` : '';
  const description = `Flow ${flow.name}, ${flow.nodes.length} nodes. ${summary || 'No tokens.'}${failed}`;
  const svg = s(
    'svg',
    {
      class: 'flow',
      viewBox: `0 0 ${width} ${height}`,
      width,
      height,
      role: 'img',
      'aria-label': description,
    },
    s('title', {}, description),
    s(
      'defs',
      {},
      s(
        'marker',
        { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
        s('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }),
      ),
    ),
  );
  for (const edge of edges) {
    const a = pos.get(edge.from);
    const b = pos.get(edge.to);
    if (!a || !b) continue;
    const labelled = !['next', 'branch'].includes(edge.label);
    const skips = !edge.back && rank.get(edge.to) - rank.get(edge.from) > 1 && Math.abs(a.x - b.x) < BOX_W;
    const group = s('g', { class: `edge edge-${edge.label.split(' ')[0]}${edge.back ? ' edge-back' : ''}` },
      s('path', { d: edgePath(a, b, edge.back, skips), 'marker-end': 'url(#arrow)' }));
    if (labelled) {
      let [x, y, anchor] = [(a.x + b.x) / 2 + 4, (a.y + BOX_H + b.y) / 2 + 4, 'start'];
      if (edge.back) [x, y] = [Math.max(a.x, b.x) + BOX_W / 2 + 18, (a.y + b.y) / 2 + BOX_H / 2];
      if (skips) [x, y, anchor] = [Math.min(a.x, b.x) - BOX_W / 2 - SIDE / 2 - 4, (a.y + b.y) / 2 + BOX_H / 2, 'end'];
      const text = clip(edge.label, skips ? 14 : 26);
      group.append(s('text', { x, y, 'text-anchor': anchor, class: 'edge-label' }, s('title', {}, edge.label), text));
    }
    svg.append(group);
  }
  for (const [id, v] of vs) {
    const p = pos.get(id);
    if (!p) continue;
    const here = at.get(id) || [];
    const isFailed = failure?.node === id;
    const classes = ['node', `kind-${v.kind}`];
    if (here.length) classes.push('has-token');
    if (isFailed) classes.push('failed');
    const g = s('g', { class: classes.join(' '), 'data-node': id });
    if (v.synthetic) {
      const label = v.kind === 'join' ? 'join' : v.kind === 'start' ? `start · ${flow.start}` : 'end';
      g.append(
        s('title', {}, v.kind === 'join' ? `join of ${id.slice(5)}` : label),
        s('rect', { x: p.x - 50, y: p.y + BOX_H / 2 - 14, width: 100, height: 28, rx: 14 }),
        s('text', { x: p.x, y: p.y + BOX_H / 2 + 5, 'text-anchor': 'middle' }, clip(label, 16)),
      );
    } else {
      const title = [`${v.id} (${v.kind}${v.detail ? `: ${v.detail}` : ''})`];
      for (const t of here) title.push(`token ${t.id}: ${t.state}`);
      if (isFailed) title.push(`failed: ${failure.code}`);
      g.append(
        s('title', {}, title.join('\n')),
        s('rect', { x: p.x - BOX_W / 2, y: p.y, width: BOX_W, height: BOX_H, rx: 6 }),
        s('text', { x: p.x, y: p.y + 19, 'text-anchor': 'middle', class: 'node-id' }, clip(v.id, 22)),
        s('text', { x: p.x, y: p.y + 36, 'text-anchor': 'middle', class: 'node-kind' },
          clip(v.detail ? `${v.kind} · ${v.detail}` : v.kind, 26)),
      );
      if (here.length) {
        g.append(
          s('circle', { cx: p.x + BOX_W / 2 - 4, cy: p.y + 4, r: 10, class: 'token-dot' }),
          s('text', { x: p.x + BOX_W / 2 - 4, y: p.y + 8, 'text-anchor': 'middle', class: 'token-count' }, here.length),
        );
      }
      if (isFailed) {
        g.append(s('text', { x: p.x + BOX_W / 2 + 10, y: p.y + BOX_H / 2 + 4, class: 'failure-code' }, `✕ ${clip(failure.code, 30)}`));
      }
    }
    svg.append(g);
  }
  return svg;
}
