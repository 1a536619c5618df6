// The console in a real headless Chromium, against a real `sutra serve` on the embedded store.
// The setup is done as a user would: deployments and messages over the HTTP API, a worker's
// poll and fail. Run by .ci/console, which passes the binary in SUTRA_BINARY.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Sutra, SHOTS, launch, openPage, assertAccessible } from './harness.mjs';

const ADMIN_TOKEN = 'acme-admin-0123456789abcdef';
const WORKER_TOKEN = 'acme-worker-0123456789abcdef';

// Version 1 doubles an order's amount, which fails on an amount that is not a number; version 2
// renames that node and prices every order at 10. Both fork into two branches and join.
const SHOP = (version) => `
name: shop
channels:
  orders: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: route
        choice:
          - when: vars.input.id == 'vip'
            next: express
        otherwise: ${version === 1 ? 'price' : 'reprice'}
      - id: express
        set: { fee: 5 }
      - id: ${version === 1 ? 'price' : 'reprice'}
        set: { total: ${version === 1 ? '"= vars.input.amount * 2"' : '10'} }
      - id: prepare
        parallel:
          - - id: reserve
              set: { reserved: true }
          - - id: invoice
              set: { invoiced: true }
      - id: done
        end: { reply: { total: "= vars.total" } }
`;

// A charge is a task; a worker that declines it fails the instance with its code.
const BILLING = `
name: billing
channels:
  charges: { transport: http, correlate: data.id }
flows:
  charge:
    start: { channel: charges }
    nodes:
      - id: charge-card
        task: { topic: charge-card, input: { id: "= vars.input.id" }, retries: 0 }
        output: receipt
      - id: done
        end: { reply: { receipt: "= vars.receipt" } }
`;

// A task with a deadline and a reminder, then a race of two messages and a day's timer.
const SETTLEMENT = `
name: settlement
channels:
  settlements: { transport: http, correlate: data.id }
  payments: { transport: http, correlate: data.order }
  cancellations: { transport: http, correlate: data.order }
flows:
  settle:
    start: { channel: settlements }
    nodes:
      - id: approve
        task: { topic: approve, input: { order: "= vars.input.id" } }
        deadline: { after: P1D, next: escalate }
        remind: { after: P1D, nodes: [ { id: nudge, set: { nudged: "= true" } } ] }
      - id: settle
        race:
          - receive: { channel: payments, key: vars.input.id }
            output: payment
            next: paid
          - receive: { channel: cancellations, key: vars.input.id }
            next: cancelled
          - wait: { duration: P1D }
            next: expired
      - id: paid
        end: { reply: paid }
      - id: cancelled
        end: { reply: cancelled }
      - id: expired
        end: { reply: expired }
      - id: escalate
        end: { reply: escalated }
`;

let sutra;
let browser;
let orderId;
let chargeIds;

before(async () => {
  browser = await launch();
  sutra = await new Sutra().start();
  await sutra.deploy(SHOP(1));
  await sutra.deploy(BILLING);
  orderId = await sutra.send('orders', 'order-1', { id: 'o1', amount: 'twelve' });
  chargeIds = [];
  for (const n of [1, 2, 3]) chargeIds.push(await sutra.send('charges', `charge-${n}`, { id: `c${n}` }));
  // The worker declines every charge: a business error, which no `on-error` catches.
  const tasks = await sutra.until('three charge tasks', async () => {
    const polled = await sutra.call('POST', '/v1/tasks/poll', { worker: 'console-test', topics: ['charge-card'], max: 3 });
    return polled.body.length === 3 ? polled.body : null;
  });
  for (const task of tasks) {
    const body = { lock_token: task.lock_token, error: { code: 'CARD.DECLINED', message: 'insufficient funds' }, retry: false };
    const answer = await sutra.call('POST', `/v1/tasks/${encodeURIComponent(task.id)}/fail`, body);
    assert.equal(answer.status, 200, JSON.stringify(answer.body));
  }
  for (const id of [orderId, ...chargeIds]) {
    await sutra.until(`instance ${id} to fail`, async () => (await sutra.instance(id)).status === 'failed');
  }
  await sutra.deploy(SHOP(2));
});

after(async () => {
  await browser?.close();
  await sutra?.stop();
});

test('a failed instance is found, seen on its graph, migrated onto the fix, restored, and completes', async () => {
  const page = await openPage(browser);
  await page.goto(`${sutra.url}/`);
  await page.getByRole('heading', { level: 1, name: 'Instances' }).waitFor();
  assert.equal(await page.getByRole('row').count(), 5, 'a header and four instances');
  await assertAccessible(page, 'the instance list');

  await page.getByLabel('Status', { exact: true }).selectOption('failed');
  await page.getByRole('button', { name: 'Apply filters' }).click();
  await page.getByRole('heading', { level: 1, name: 'Instances: failed' }).waitFor();
  assert.match(page.url(), /\/instances\?status=failed$/);
  await page.getByRole('link', { name: orderId }).click();

  await page.getByRole('heading', { level: 1, name: `Instance ${orderId}` }).waitFor();
  const failedNode = page.locator('svg.flow g.node.failed[data-node="price"]');
  await failedNode.waitFor();
  assert.match(await failedNode.textContent(), /SUTRA\.RUNTIME\.EXPRESSION\.ERROR/);
  assert.equal(await page.locator('.failure .failure-code').textContent(), 'SUTRA.RUNTIME.EXPRESSION.ERROR');
  assert.equal(await page.locator('svg.flow g.node.has-token').getAttribute('data-node'), 'price');
  for (const drawn of ['route', 'express', 'prepare', 'join:prepare', 'reserve', 'invoice', 'done']) {
    assert.equal(await page.locator(`svg.flow g.node[data-node="${drawn}"]`).count(), 1, `${drawn} is drawn`);
  }
  // The path it took: the choice's `otherwise` to the node that failed, and nothing after.
  const visited = await page.locator('svg.flow g.node.visited').evaluateAll((gs) => gs.map((g) => g.dataset.node));
  assert.deepEqual(visited.sort(), ['price', 'route', 'start']);
  const taken = await page.locator('svg.flow g.edge.taken').evaluateAll((gs) => gs.map((g) => `${g.dataset.from}>${g.dataset.to}`));
  assert.deepEqual(taken.sort(), ['route>price', 'start>route']);
  const stroke = (node) => page.locator(`svg.flow g.node[data-node="${node}"] rect`).evaluate((r) => getComputedStyle(r).stroke);
  assert.notEqual(await stroke('price'), await stroke('route'), 'the failure shows over the path');
  await assertAccessible(page, 'the instance view');
  await page.screenshot({ path: join(SHOTS, 'instance.png'), fullPage: true });

  await page.getByRole('button', { name: 'Migrate…' }).click();
  await page.getByLabel('Target version').selectOption('2');
  await page.getByLabel('Node price becomes').selectOption('reprice');
  await page.getByRole('form', { name: 'Migrate' }).getByRole('button', { name: 'Migrate' }).click();
  const confirm = page.getByRole('dialog', { name: 'Migrate this instance?' });
  await confirm.getByRole('button', { name: 'Migrate' }).click();
  await page.getByRole('status').filter({ hasText: 'Migrated onto v2' }).waitFor();
  await page.getByRole('link', { name: 'shop v2' }).waitFor();

  await page.getByRole('button', { name: 'Restore' }).click();
  await page.getByRole('dialog', { name: 'Restore this instance?' }).getByRole('button', { name: 'Restore' }).click();
  await page.locator('dd[data-status="completed"]').waitFor();
  assert.equal((await sutra.instance(orderId)).status, 'completed');
  assert.deepEqual(page.errors, [], 'no errors in the browser console');
  await page.context().close();
});

test('the failed inbox restores every instance with a failure code, counting them first', async () => {
  const page = await openPage(browser);
  await page.goto(`${sutra.url}/`);
  await page.getByRole('heading', { level: 1, name: 'Instances' }).waitFor();
  // By keyboard alone: from the page's heading, where the console puts the focus, back to the
  // Failed link of the navigation, and follow it.
  for (let n = 0; n < 10; n += 1) {
    await page.keyboard.press('Shift+Tab');
    if (await page.evaluate(() => document.activeElement?.textContent === 'Failed')) break;
  }
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { level: 1, name: 'Failed inbox' }).waitFor();
  assert.equal(await page.locator('[data-count="CARD.DECLINED"]').textContent(), '3');
  await assertAccessible(page, 'the failed inbox');
  await page.screenshot({ path: join(SHOTS, 'failed.png'), fullPage: true });

  await page.getByRole('button', { name: 'Restore every instance failed with CARD.DECLINED' }).click();
  await page.getByRole('button', { name: 'Count and restore' }).click();
  const dialog = page.getByRole('dialog', { name: 'Restore 3 instances?' });
  await dialog.waitFor();
  assert.match(await page.locator('.bulk-status').textContent(), /Dry run: 3 instances match/);
  for (const id of chargeIds) assert.equal((await sutra.instance(id)).status, 'failed', 'a dry run touches nothing');
  await dialog.getByRole('button', { name: 'Restore 3' }).click();
  await page.locator('.bulk-status', { hasText: 'Restore finished: 3 done.' }).waitFor();
  assert.equal(await page.locator('progress').getAttribute('aria-label'), 'Bulk progress');
  assert.equal(await page.locator('progress').evaluate((p) => p.value), 3);
  for (const id of chargeIds) {
    const restored = await sutra.instance(id);
    assert.equal(restored.status, 'suspended', 'restored, its task armed again');
    assert.equal(restored.tokens[0].park.kind, 'task');
  }
  assert.deepEqual(page.errors, [], 'no errors in the browser console');
  await page.context().close();
});

// Measured, not asserted (a slow machine must not turn this red): how long the instance list
// takes from navigation to its rows on screen, with the first contentful paint, printed for
// decision 0036.
test('the instance list is on screen soon after navigation (printed)', async () => {
  const page = await openPage(browser);
  await page.goto(`${sutra.url}/instances`);
  await page.getByRole('row').nth(4).waitFor();
  const timing = await page.evaluate(() => ({
    rows: performance.now(),
    paint: performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null,
  }));
  console.log(`the instance list: first contentful paint ${timing.paint?.toFixed(0)} ms, rows on screen ${timing.rows.toFixed(0)} ms after navigation`);
  assert.deepEqual(page.errors, [], 'no errors in the browser console');
  await page.context().close();
});

test('a deep link to an instance loads directly', async () => {
  const page = await openPage(browser);
  const response = await page.goto(`${sutra.url}/instances/${orderId}`);
  assert.equal(response.status(), 200);
  await page.getByRole('heading', { level: 1, name: `Instance ${orderId}` }).waitFor();
  await page.locator('dd[data-status="completed"]').waitFor();
  await page.getByRole('heading', { name: 'History' }).waitFor();
  assert.ok((await page.locator('ol.timeline li').count()) > 3, 'the history is listed');
  for (const path of ['/deployments/shop/2', '/tasks', '/system']) {
    await page.goto(`${sutra.url}${path}`);
    await page.locator('main h1').waitFor();
    assert.doesNotMatch(await page.locator('main h1').textContent(), /Could not load|Not found/, path);
    await assertAccessible(page, path);
  }
  assert.deepEqual(page.errors, [], 'no errors in the browser console');
  await page.context().close();
});

test('a refused action is answered with the problem the API gave', async () => {
  const page = await openPage(browser);
  const [id] = chargeIds;
  await page.goto(`${sutra.url}/instances/${id}`);
  await page.locator('dd[data-status="suspended"]').waitFor();
  // Someone else cancels it meanwhile; this page still offers to.
  assert.equal((await sutra.call('POST', `/v1/instances/${id}/cancel`)).status, 200);
  await page.getByRole('button', { name: 'Cancel instance' }).click();
  await page.getByRole('dialog', { name: 'Cancel this instance?' }).getByRole('button', { name: 'Cancel' }).click();
  const problem = page.locator('.action-area .problem');
  await problem.waitFor();
  assert.equal(await problem.locator('.problem-code').textContent(), 'SUTRA.ADMIN.STATE.INVALID');
  assert.match(await problem.locator('.problem-detail').textContent(), /cancelled/);
  assert.equal(await problem.getAttribute('role'), 'alert');
  // The browser reports the refused request itself, and nothing else.
  assert.deepEqual(page.errors, ['Failed to load resource: the server responded with a status of 409 (Conflict)']);
  await page.context().close();
});

test('a race is drawn as a gateway with its arms, a deadline dashed, and the path taken marked', async () => {
  await sutra.deploy(SETTLEMENT);
  const id = await sutra.send('settlements', 'settle-1', { id: 's1' });
  const [task] = await sutra.until('the approve task', async () => {
    const polled = await sutra.call('POST', '/v1/tasks/poll', { worker: 'w', topics: ['approve'], wait: 'PT10S' });
    return polled.body.length ? polled.body : null;
  });
  const done = await sutra.call('POST', `/v1/tasks/${encodeURIComponent(task.id)}/complete`, { lock_token: task.lock_token, output: {} });
  assert.equal(done.status, 200, JSON.stringify(done.body));
  await sutra.until('the race', async () => (await sutra.instance(id)).tokens.some((t) => t.state === 'racing'));

  const page = await openPage(browser);
  await page.goto(`${sutra.url}/instances/${id}`);
  await page.getByRole('heading', { level: 1, name: `Instance ${id}` }).waitFor();
  const graph = page.locator('svg.flow');
  const node = (name) => graph.locator(`g.node[data-node="${name}"]`);
  const edge = (from, label) => graph.locator(`g.edge[data-from="${from}"][data-label="${label}"]`);
  await node('settle').waitFor();

  // The race: a gateway, its arms labelled, its one token marked racing and its arms not drawn
  // as tokens of their own.
  assert.equal(await node('settle').locator('polygon.gateway').count(), 1, 'the race is a diamond');
  assert.equal(await node('settle').locator('rect').count(), 0);
  for (const [label, to] of [['arm 1: receive payments', 'paid'], ['arm 2: receive cancellations', 'cancelled'], ['arm 3: wait 24h', 'expired']]) {
    const arm = edge('settle', label);
    assert.equal(await arm.count(), 1, `${label} is drawn`);
    assert.equal(await arm.getAttribute('data-to'), to);
    assert.equal(await arm.locator('.edge-label title').textContent(), label);
  }
  assert.equal(await graph.locator('g.node.has-token').count(), 1, 'one token mark: the racing token');
  assert.equal(await node('settle').locator('.token-count').textContent(), '1');
  assert.match(await node('settle').locator('title').first().textContent(), /token \d+: racing, 3 arms waiting/);
  assert.match(await graph.getAttribute('aria-label'), /1 token at settle \(racing, 3 arms waiting\)/);

  // The deadline is dashed, the reminder dotted, and the reminder's list ends on its own.
  const deadline = edge('approve', 'deadline 24h');
  assert.match(await deadline.getAttribute('class'), /\bedge-deadline\b/);
  assert.equal(await deadline.getAttribute('data-to'), 'escalate');
  assert.notEqual(await deadline.locator('path').evaluate((p) => getComputedStyle(p).strokeDasharray), 'none');
  const remind = edge('approve', 'remind 24h');
  assert.match(await remind.getAttribute('class'), /\bedge-remind\b/);
  assert.equal(await remind.getAttribute('data-to'), 'nudge');
  assert.equal(await edge('nudge', 'next').getAttribute('data-to'), 'reminded:approve');

  // The path taken so far: the start, the task and the race, and the edges between them.
  const visited = async () => (await graph.locator('g.node.visited').evaluateAll((gs) => gs.map((g) => g.dataset.node))).sort();
  assert.deepEqual(await visited(), ['approve', 'settle', 'start']);
  const taken = async () => graph.locator('g.edge.taken').evaluateAll((gs) => gs.map((g) => `${g.dataset.from} -${g.dataset.label}-> ${g.dataset.to}`).sort());
  assert.deepEqual(await taken(), ['approve -next-> settle', 'start -next-> approve']);
  assert.match(await node('approve').locator('title').first().textContent(), /\(visited\)/);
  assert.doesNotMatch(await node('escalate').locator('title').first().textContent(), /visited/);
  assert.match(await graph.getAttribute('aria-label'), /Visited: approve, settle\./);
  await assertAccessible(page, 'an instance at a race');
  await page.screenshot({ path: join(SHOTS, 'race.png'), fullPage: true });

  // The payment wins the race: its arm is taken, the others are not.
  await sutra.send('payments', 'payment-1', { order: 's1' });
  await sutra.until('the instance to complete', async () => (await sutra.instance(id)).status === 'completed');
  await page.getByRole('button', { name: 'Refresh' }).click();
  await page.locator('dd[data-status="completed"]').waitFor();
  assert.deepEqual(await visited(), ['approve', 'paid', 'settle', 'start']);
  assert.deepEqual(await taken(), ['approve -next-> settle', 'settle -arm 1: receive payments-> paid', 'start -next-> approve']);
  assert.equal(await graph.locator('g.node.has-token').count(), 0);
  await assertAccessible(page, 'an instance after its race');
  assert.deepEqual(page.errors, [], 'no errors in the browser console');
  await page.context().close();
});

// An order calls its shipping, a flow only called, which waits on a carrier's task.
const SHIPPING = `
name: shipping
channels:
  shipments: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: shipments }
    nodes:
      - id: ship
        call: { flow: shipping, input: { order: "= vars.input.id" } }
        output: shipment
  shipping:
    nodes:
      - id: book
        task: { topic: book-carrier, input: "= vars.input" }
`;

test('a call links to its child, the child to its caller, and the list filters by caller', async () => {
  await sutra.deploy(SHIPPING);
  const id = await sutra.send('shipments', 'shipment-1', { id: 'p1' });
  const child = await sutra.until('the called instance', async () => {
    const parked = (await sutra.instance(id)).tokens.find((t) => t.park?.kind === 'call');
    return parked?.park.child ?? null;
  });

  const page = await openPage(browser);
  await page.goto(`${sutra.url}/instances/${id}`);
  await page.getByRole('heading', { level: 1, name: `Instance ${id}` }).waitFor();
  const ship = page.locator('svg.flow g.node[data-node="ship"]');
  await ship.waitFor();
  assert.match(await ship.getAttribute('class'), /\bkind-call\b/);
  assert.notEqual(await ship.locator('rect').evaluate((r) => getComputedStyle(r).strokeWidth), '1.2px', 'a call has a thick border');
  const called = page.getByRole('table', { name: 'Called instances' });
  assert.equal(await called.getByRole('link', { name: child }).count(), 1, 'the child is listed');
  await assertAccessible(page, 'an instance waiting for its call');
  await page.screenshot({ path: join(SHOTS, 'call.png'), fullPage: true });

  // The token waits for its child: the link leads there, and the child's page leads back.
  await page.getByRole('table', { name: 'Tokens' }).getByRole('link', { name: child }).click();
  await page.getByRole('heading', { level: 1, name: `Instance ${child}` }).waitFor();
  assert.match(await page.locator('dl.facts').textContent(), /Called by.*at ship \(depth 1\)/);
  // A flow only called starts with no channel.
  assert.equal(await page.locator('svg.flow g.node[data-node="start"] text').textContent(), 'called');
  await page.locator('dl.facts').getByRole('link', { name: id }).click();
  await page.getByRole('heading', { level: 1, name: `Instance ${id}` }).waitFor();

  await page.goto(`${sutra.url}/instances?parent=${id}`);
  const rows = page.getByRole('table', { name: 'Instances' }).locator('tbody tr');
  await rows.first().waitFor();
  assert.equal(await rows.count(), 1, 'exactly the order\'s one call');
  assert.equal(await page.getByLabel('Called by').inputValue(), id);
  assert.deepEqual(page.errors, [], 'no errors in the browser console');
  await page.context().close();
});

// A saga: the payment scope's failure is undone by compensation, then the transfer fails.
const SAGA = `
name: saga
channels:
  sagas: { transport: http, correlate: data.id }
flows:
  transfer:
    start: { channel: sagas }
    nodes:
      - id: payment
        scope:
          nodes:
            - id: debit
              task: { topic: saga-debit }
              compensate-with: refund
            - id: credit
              task: { topic: saga-credit }
        on-error: undo
      - id: done
        end: {}
      - id: undo
        compensate: { scope: payment }
        next: failed
      - id: failed
        fail: { code: TRANSFER.FAILED }
      - id: refund
        task: { topic: saga-refund }
`;

test('a scope is drawn as a box, a handler on a dotted edge, and the compensation log is listed', async () => {
  await sutra.deploy(SAGA);
  const id = await sutra.send('sagas', 'saga-1', { id: 'g1' });
  const take = async (topic) => sutra.until(`a ${topic} task`, async () => {
    const polled = await sutra.call('POST', '/v1/tasks/poll', { worker: 'w', topics: [topic], wait: 'PT10S' });
    return polled.body.length ? polled.body[0] : null;
  });
  const debit = await take('saga-debit');
  await sutra.call('POST', `/v1/tasks/${encodeURIComponent(debit.id)}/complete`, { lock_token: debit.lock_token, output: {} });
  const credit = await take('saga-credit');
  await sutra.call('POST', `/v1/tasks/${encodeURIComponent(credit.id)}/fail`, { lock_token: credit.lock_token, error: { code: 'NO.ACCOUNT', message: 'closed' }, retry: false });
  const refund = await take('saga-refund');

  const page = await openPage(browser);
  await page.goto(`${sutra.url}/instances/${id}`);
  await page.getByRole('heading', { level: 1, name: `Instance ${id}` }).waitFor();
  const graph = page.locator('svg.flow');
  const box = graph.locator('g.scope-box[data-scope="payment"]');
  await box.waitFor();
  assert.match(await box.locator('title').textContent(), /scope payment: debit, credit/);
  const handler = graph.locator('g.edge[data-from="debit"][data-label="compensate-with"]');
  assert.equal(await handler.getAttribute('data-to'), 'refund');
  assert.match(await handler.getAttribute('class'), /\bedge-compensate-with\b/);
  const log = page.getByRole('table', { name: 'Compensation log' });
  assert.match(await log.locator('tbody tr').first().textContent(), /debit.*payment.*not yet/);
  assert.match(await page.getByRole('table', { name: 'Tokens' }).textContent(), /undoing completion 0/);
  await assertAccessible(page, 'an instance compensating');
  await page.screenshot({ path: join(SHOTS, 'saga.png'), fullPage: true });

  await sutra.call('POST', `/v1/tasks/${encodeURIComponent(refund.id)}/complete`, { lock_token: refund.lock_token, output: {} });
  await sutra.until('the transfer to fail', async () => (await sutra.instance(id)).status === 'failed');
  await page.getByRole('button', { name: 'Refresh' }).click();
  await page.locator('dd[data-status="failed"]').waitFor();
  assert.match(await log.locator('tbody tr').first().textContent(), /debit.*yes/);
  assert.deepEqual(page.errors, [], 'no errors in the browser console');
  await page.context().close();
});

test('the schedules page lists a schedule with its last instance, and pauses it', async () => {
  await sutra.deploy(`
name: clock
flows:
  tick:
    start: { schedule: { every: PT1S, overlap: allow, input: { at: "= tick" } } }
    nodes:
      - id: done
        end: {}
`);
  await sutra.until('a tick', async () => (await sutra.call('GET', '/v1/schedules')).body.items.find((x) => x.last_instance));
  const page = await openPage(browser);
  await page.goto(`${sutra.url}/`);
  await page.getByRole('link', { name: 'Schedules' }).click();
  await page.getByRole('heading', { level: 1, name: 'Schedules' }).waitFor();
  const row = page.getByRole('table', { name: 'Schedules' }).locator('tbody tr', { hasText: 'clock v1' });
  assert.match(await row.textContent(), /tick.*every PT1S.*UTC.*running/);
  assert.equal(await row.locator('a.mono').count(), 1, 'the last instance is linked');
  // A scheduled flow's graph starts with its schedule.
  await row.locator('a.mono').click();
  const start = page.locator('svg.flow g.node[data-node="start"]');
  await start.waitFor();
  assert.equal(await start.locator('title').textContent(), 'start · every PT1S in UTC (visited)');
  await page.getByRole('link', { name: 'Schedules' }).click();
  await page.getByRole('heading', { level: 1, name: 'Schedules' }).waitFor();
  await assertAccessible(page, 'the schedules page');
  await page.screenshot({ path: join(SHOTS, 'schedules.png'), fullPage: true });

  await row.getByRole('button', { name: 'Pause' }).click();
  const dialog = page.getByRole('dialog', { name: 'Pause this schedule?' });
  await dialog.getByRole('button', { name: 'Pause' }).click();
  await page.getByRole('table', { name: 'Schedules' }).locator('tbody tr', { hasText: 'paused' }).waitFor();
  const listed = await sutra.call('GET', '/v1/schedules');
  assert.equal(listed.body.items.find((x) => x.deployment === 'clock').paused, true, 'paused through the API');
  assert.deepEqual(page.errors, [], 'no errors in the browser console');
  await page.context().close();
});

test('with API tokens the console asks for one, reads nothing without it, and sends it as Bearer', async () => {
  const tokens = `acme:admin:${ADMIN_TOKEN}; acme:worker:${WORKER_TOKEN}`;
  const guarded = await new Sutra({ SUTRA_AUTH_TOKENS: tokens }).start();
  try {
    await guarded.deploy(BILLING, { token: ADMIN_TOKEN });
    const page = await openPage(browser);
    await page.goto(`${guarded.url}/instances`);
    await page.getByRole('heading', { level: 1, name: 'Sign in' }).waitFor();
    assert.equal(await page.getByRole('link', { name: 'Deployments' }).count(), 0, 'no navigation before signing in');
    assert.deepEqual(page.requests.filter((r) => new URL(r.url()).pathname.startsWith('/v1/')).map((r) => r.url()), [], 'it reads nothing');
    await assertAccessible(page, 'the sign-in page');

    await page.getByLabel('API token').fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { level: 1, name: 'Instances' }).waitFor();
    // An administrator's views are its tenant's (decision 0076): the counts say whose, and the
    // System page charts the tenant's own steps, its backlog shown as counted now, not charted.
    await page.getByRole('list', { name: 'Instances by status, tenant acme' }).waitFor();
    await page.getByRole('link', { name: 'System' }).click();
    await page.locator('.about [data-tenant="acme"]').waitFor();
    assert.equal(await page.locator('figure[data-chart="steps"]').count(), 1, 'its steps are charted');
    assert.equal(await page.locator('figure[data-chart="backlog"]').count(), 0, 'no fleet backlog');
    await page.getByText('Tasks waiting for a worker now').waitFor();
    await assertAccessible(page, "a tenant's System page");
    await page.getByRole('link', { name: 'Deployments' }).click();
    await page.getByRole('link', { name: 'billing v1' }).waitFor();
    const reads = page.requests.filter((r) => new URL(r.url()).pathname.startsWith('/v1/'));
    assert.ok(reads.length > 0);
    for (const request of reads) assert.equal(request.headers().authorization, `Bearer ${ADMIN_TOKEN}`);
    assert.deepEqual(page.errors, [], 'no errors in the browser console');
    await page.context().close();

    // A worker's token reads no instance: the console says what the API answered.
    const worker = await openPage(browser);
    await worker.goto(`${guarded.url}/instances`);
    await worker.getByLabel('API token').fill(WORKER_TOKEN);
    await worker.getByRole('button', { name: 'Sign in' }).click();
    await worker.getByRole('heading', { level: 1, name: 'Could not load this page' }).waitFor();
    assert.equal(await worker.locator('.problem-code').textContent(), 'SUTRA.AUTH.FORBIDDEN');
    await worker.context().close();
  } finally {
    await guarded.stop();
  }
});
