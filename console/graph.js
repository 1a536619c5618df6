// A flow drawn as SVG from its deployment's graph (GET /v1/deployments/{name}/{version}/graph):
// nodes in layers by their longest path from the start, a `parallel` node forking into its
// branches and a join node gathering them, a `race` drawn as a gateway with its arms labelled,
// choice arms, error routes, deadlines and reminders labelled, and the instance's tokens,
// failure and the path it has taken so far (from its history) marked.

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
// `parallel` or `scope` node (a scope's block is drawn as a branch of its own).
function vertices(flow) {
  const byId = new Map(flow.nodes.map((node) => [node.id, node]));
  const vs = new Map();
  vs.set('start', { id: 'start', kind: 'start', synthetic: true });
  for (const node of flow.nodes) {
    vs.set(node.id, { ...node });
    if (node.kind === 'parallel' || node.kind === 'scope') {
      vs.set(`join:${node.id}`, { id: `join:${node.id}`, kind: 'join', synthetic: true });
    }
  }
  vs.set('end', { id: 'end', kind: 'end-of-flow', synthetic: true });
  // A reminder's list runs on a token of its own, which just ends at the end of the list: its
  // nodes (reached from the `remind` edge; a list's `next` stays in it) end at a vertex of their
  // own, not at the end of the flow.
  const reminderOf = new Map();
  for (const node of flow.nodes) {
    for (const edge of node.edges) {
      if (!edge.label.startsWith('remind ')) continue;
      vs.set(`reminded:${node.id}`, { id: `reminded:${node.id}`, kind: 'end-of-reminder', synthetic: true, of: node.id });
      const todo = edge.to ? [edge.to] : [];
      while (todo.length) {
        const id = todo.pop();
        if (reminderOf.has(id) || !byId.has(id)) continue;
        reminderOf.set(id, node.id);
        for (const next of byId.get(id).edges) if (next.to && next.label !== 'branch') todo.push(next.to);
      }
    }
  }
  const endOf = (node) =>
    node.branch_of ? `join:${node.branch_of}` : reminderOf.has(node.id) ? `reminded:${reminderOf.get(node.id)}` : 'end';
  const edges = [{ from: 'start', to: flow.entry ?? 'end', label: 'next' }];
  for (const node of flow.nodes) {
    for (const edge of node.edges) {
      if (edge.label === 'branch') {
        edges.push({ from: node.id, to: edge.to ?? `join:${node.id}`, label: 'branch' });
      } else if (edge.label === 'join') {
        edges.push({ from: `join:${node.id}`, to: edge.to ?? endOf(node), label: 'next' });
      } else if (edge.label.startsWith('remind ')) {
        edges.push({ from: node.id, to: edge.to ?? `reminded:${node.id}`, label: edge.label });
      } else {
        edges.push({ from: node.id, to: edge.to ?? endOf(node), label: edge.label });
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

// The path the instance has taken, from its history: the vertices its tokens visited (every
// event's node) and the edges between a token's consecutive nodes. A race's, a choice's and a
// deadline's event names the node it went on to; `forked` starts each branch's token at the
// parallel node and `joined` ends them at its join; a race's arms and a reminder's timer
// (satellites while they wait) count as their host token; a `reminded` event takes the
// `remind` edge, and a reminder's token that is gone reached its list's end. The token that
// completed an instance ran on from its last recorded node along single `next` edges to the
// end, through nodes that record nothing (an `end` node). Nodes of an earlier version (before
// a migration) are left out.
function pathTaken(vs, edges, history, tokens) {
  const visited = new Set();
  const taken = new Set();
  if (!history?.length) return { visited, taken };
  const out = new Map();
  for (const edge of edges) (out.get(edge.from) || out.set(edge.from, []).get(edge.from)).push(edge);
  const from = (node, prefix) => (out.get(node) || []).find((edge) => edge.label.startsWith(prefix));
  const host = new Map(
    tokens.filter((t) => ['arm', 'reminder', 'deadline', 'body'].includes(t.role?.role)).map((t) => [t.id, t.parent]),
  );
  const seqs = new Map();
  const push = (token, v, via = null) => {
    if (!vs.has(v)) return;
    if (!seqs.has(token)) seqs.set(token, []);
    const seq = seqs.get(token);
    if (seq.at(-1)?.v !== v) seq.push({ v, via });
  };
  const children = new Map();
  const order = new Set();
  let completed = false;
  for (const event of history) {
    if (event.kind === 'started') visited.add('start');
    if (event.kind === 'completed') completed = true;
    if (!event.node || event.token === null || event.token === undefined) continue;
    const token = host.get(event.token) ?? event.token;
    order.delete(token);
    if (vs.has(event.node) || vs.has(`join:${event.node}`)) order.add(token);
    const detail = event.detail || {};
    if (event.kind === 'joined') {
      const join = `join:${event.node}`;
      for (const kid of children.get(token) || []) push(kid, join);
      push(token, join);
      continue;
    }
    push(token, event.node);
    if (event.kind === 'forked') {
      children.set(token, detail.tokens || []);
      for (const kid of detail.tokens || []) push(kid, event.node);
    } else if (event.kind === 'race_won') {
      const edge = from(event.node, `arm ${Number(detail.arm) + 1}:`);
      if (edge) push(token, edge.to, edge);
    } else if (event.kind === 'deadline_fired') {
      const edge = from(event.node, 'deadline ');
      if (edge) push(token, edge.to, edge);
    } else if (event.kind === 'choice_taken' && detail.next) {
      push(token, detail.next);
    } else if (event.kind === 'reminded') {
      const edge = from(event.node, 'remind ');
      if (edge) taken.add(edge);
    }
  }
  if (completed) {
    // The token that completed it: the latest to run whose walk reaches the end of the flow
    // (not a reminder's token, whose list has an end of its own).
    const recorded = new Set([...seqs.values()].flat().map((step) => step.v));
    for (const token of [...order].reverse()) {
      const walk = [];
      let at = seqs.get(token).at(-1).v;
      for (let n = 0; n < vs.size && !['end', 'end-of-flow'].includes(vs.get(at)?.kind); n += 1) {
        const nexts = (out.get(at) || []).filter((edge) => edge.label === 'next');
        if (nexts.length !== 1 || recorded.has(nexts[0].to)) break;
        walk.push(nexts[0]);
        at = nexts[0].to;
      }
      if (['end', 'end-of-flow'].includes(vs.get(at)?.kind)) {
        for (const edge of walk) push(token, edge.to, edge);
        break;
      }
    }
  }
  // A token that ran a reminder's list to its end is gone, its list's end reached.
  const live = new Set(tokens.map((t) => t.id));
  for (const [token, seq] of seqs) {
    if (live.has(token)) continue;
    const end = (out.get(seq.at(-1).v) || []).find((edge) => edge.label === 'next' && vs.get(edge.to)?.kind === 'end-of-reminder');
    if (end) seq.push({ v: end.to, via: end });
  }
  for (const seq of seqs.values()) {
    seq.forEach((step, i) => {
      visited.add(step.v);
      if (i === 0) return;
      if (step.via) taken.add(step.via);
      else for (const edge of out.get(seq[i - 1].v) || []) if (edge.to === step.v) taken.add(edge);
    });
  }
  for (const edge of out.get('start') || []) if (visited.has('start') && visited.has(edge.to)) taken.add(edge);
  return { visited, taken };
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

// A box behind each scope's block — its nodes, the nodes of branches inside it, and its join —
// labelled with the scope's id, so that what its `on-error` and `deadline` cover is seen.
function scopeBoxes(flow, pos) {
  const ownerOf = new Map(flow.nodes.map((node) => [node.id, node.branch_of]));
  const inside = (id, scope) => {
    for (let at = ownerOf.get(id), n = 0; at && n < flow.nodes.length; at = ownerOf.get(at), n += 1) {
      if (at === scope) return true;
    }
    return false;
  };
  return flow.nodes
    .filter((node) => node.kind === 'scope')
    .map((scope) => {
      const members = flow.nodes.filter((node) => inside(node.id, scope.id)).map((node) => node.id);
      const points = [...members, `join:${scope.id}`].map((id) => pos.get(id)).filter(Boolean);
      if (!points.length) return null;
      const pad = 10;
      const left = Math.min(...points.map((p) => p.x)) - BOX_W / 2 - pad;
      const right = Math.max(...points.map((p) => p.x)) + BOX_W / 2 + pad;
      const top = Math.min(...points.map((p) => p.y)) - pad - 12;
      const bottom = Math.max(...points.map((p) => p.y)) + BOX_H + pad;
      return s('g', { class: 'scope-box', 'data-scope': scope.id },
        s('title', {}, `scope ${scope.id}: ${members.join(', ')}`),
        s('rect', { x: left, y: top, width: right - left, height: bottom - top, rx: 10 }),
        s('text', { x: left + 8, y: top + 13, class: 'scope-label' }, clip(`scope ${scope.id}`, 30)));
    })
    .filter(Boolean);
}

// A token that serves another at its node: a race's arm, a reminder's or a loop's deadline
// timer, a loop's body. It is drawn as part of its host's mark, not as a token of its own.
const isSatellite = (token) => ['arm', 'reminder', 'deadline', 'body'].includes(token.role?.role);

// The SVG of `flow`, with `tokens` (the instance's), `failure` and the path its `history`
// took marked.
export function drawFlow(flow, { tokens = [], failure = null, history = null } = {}) {
  const { vs, edges } = vertices(flow);
  const { pos, rank, width: drawn, height } = layout(vs, edges);
  const { visited, taken } = pathTaken(vs, edges, history, tokens);
  // A failure code is written beside its node.
  const width = failure?.node ? drawn + 2 * 190 : drawn;
  if (width !== drawn) for (const p of pos.values()) p.x += 190;
  const at = new Map();
  const satellites = new Map();
  for (const token of tokens) {
    const where = isSatellite(token) ? satellites : at;
    if (!where.has(token.node)) where.set(token.node, []);
    where.get(token.node).push(token);
  }
  const arms = (token) => tokens.filter((t) => t.parent === token.id && t.role?.role === 'arm').length;
  const stateOf = (token) => {
    if (token.state === 'racing') return `racing, ${arms(token)} arms waiting`;
    const loop = token.park;
    if (token.state === 'looping' && loop) {
      return `looping: ${loop.done} of ${loop.items} done, ${loop.running} running, ${loop.pending} pending`;
    }
    return token.state;
  };
  const summary = [...at.entries()]
    .map(([node, ts]) => `${ts.length} token${ts.length > 1 ? 's' : ''} at ${node} (${ts.map(stateOf).join('; ')})`)
    .join('; ');
  const failed = failure?.node ? `; failed at ${failure.node} with ${failure.code}` : '';
  const been = [...visited].filter((id) => !vs.get(id)?.synthetic);
  const path = history ? ` Visited: ${been.join(', ') || 'no node yet'}.` : '';
  const description = `Flow ${flow.name}, ${flow.nodes.length} nodes. ${summary || 'No tokens.'}${failed}${path}`;
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
      s(
        'marker',
        { id: 'arrow-taken', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 4, markerHeight: 4, orient: 'auto-start-reverse' },
        s('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead-taken' }),
      ),
    ),
  );
  for (const box of scopeBoxes(flow, pos)) svg.append(box);
  for (const edge of edges) {
    const a = pos.get(edge.from);
    const b = pos.get(edge.to);
    if (!a || !b) continue;
    const labelled = !['next', 'branch'].includes(edge.label);
    const skips = !edge.back && rank.get(edge.to) - rank.get(edge.from) > 1 && Math.abs(a.x - b.x) < BOX_W;
    const classes = ['edge', `edge-${edge.label.split(' ')[0]}`];
    if (edge.back) classes.push('edge-back');
    if (taken.has(edge)) classes.push('taken');
    const group = s('g', { class: classes.join(' '), 'data-from': edge.from, 'data-to': edge.to, 'data-label': edge.label },
      s('path', { d: edgePath(a, b, edge.back, skips), 'marker-end': taken.has(edge) ? 'url(#arrow-taken)' : 'url(#arrow)' }));
    if (labelled) {
      // Beside the arrow's head when its node fans out to several nodes below (a race's arms,
      // a task's deadline and reminder), where the labels do not run into each other.
      const fans = edges.filter((e) => e.from === edge.from && !e.back && pos.has(e.to)).length > 1;
      let [x, y, anchor] = fans
        ? [b.x + 5, b.y - 7, 'start']
        : [(a.x + b.x) / 2 + 4, (a.y + BOX_H + b.y) / 2 + 4, 'start'];
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
    if (visited.has(id)) classes.push('visited');
    const g = s('g', { class: classes.join(' '), 'data-node': id });
    const seen = visited.has(id) ? ' (visited)' : '';
    if (v.synthetic) {
      const label = { join: 'join', start: flow.start ? `start · ${flow.start}` : flow.schedule ? `start · ${flow.schedule}` : 'called', 'end-of-reminder': 'end of reminder' }[v.kind] || 'end';
      const long = { join: `join of ${id.slice(5)}`, 'end-of-reminder': `end of ${v.of}'s reminder` }[v.kind] || label;
      g.append(
        s('title', {}, `${long}${seen}`),
        s('rect', { x: p.x - 56, y: p.y + BOX_H / 2 - 14, width: 112, height: 28, rx: 14 }),
        s('text', { x: p.x, y: p.y + BOX_H / 2 + 5, 'text-anchor': 'middle' }, clip(label, 16)),
      );
    } else {
      const title = [`${v.id} (${v.kind}${v.detail ? `: ${v.detail}` : ''})${seen}`];
      for (const t of here) title.push(`token ${t.id}: ${stateOf(t)}`);
      for (const t of satellites.get(id) || []) {
        if (t.role.role === 'reminder') title.push(`reminder timer armed (fired ${t.role.fired} time${t.role.fired === 1 ? '' : 's'})`);
        if (t.role.role === 'deadline') title.push('deadline timer armed');
      }
      if (isFailed) title.push(`failed: ${failure.code}`);
      // A race is a gateway: a diamond, BPMN's shape for a node that only routes.
      const shape = v.kind === 'race'
        ? s('polygon', {
            class: 'gateway',
            points: `${p.x - BOX_W / 2},${p.y + BOX_H / 2} ${p.x},${p.y} ${p.x + BOX_W / 2},${p.y + BOX_H / 2} ${p.x},${p.y + BOX_H}`,
          })
        : s('rect', { x: p.x - BOX_W / 2, y: p.y, width: BOX_W, height: BOX_H, rx: 6 });
      g.append(
        s('title', {}, title.join('\n')),
        shape,
        s('text', { x: p.x, y: p.y + 19, 'text-anchor': 'middle', class: 'node-id' }, clip(v.id, v.kind === 'race' ? 16 : 22)),
        s('text', { x: p.x, y: p.y + 36, 'text-anchor': 'middle', class: 'node-kind' },
          clip(v.detail ? `${v.kind} · ${v.detail}` : v.kind, v.kind === 'race' ? 12 : 26)),
      );
      if (here.length) {
        // On a gateway, by its upper right side.
        const dx = v.kind === 'race' ? 52 : BOX_W / 2 - 4;
        g.append(
          s('circle', { cx: p.x + dx, cy: p.y + 4, r: 10, class: 'token-dot' }),
          s('text', { x: p.x + dx, y: p.y + 8, 'text-anchor': 'middle', class: 'token-count' }, here.length),
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
