// The System page's charts (decision 0061) in a real headless Chromium, against a fresh
// `sutra serve` of their own: before any load its steps chart reads zero, and under `sutra bench`
// load — the bench's two-tasks workload driven against this server — it rises above zero. It
// writes docs/console/system.png under that load. Run by .ci/console.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { BINARY, Sutra, SHOTS, launch, openPage, assertAccessible } from './harness.mjs';

// A replica samples every ten seconds and the page asks every five: a sample shows within
// fifteen seconds of its interval's end. Patience for one, with room for a slow machine.
const SAMPLE = 40_000;
// The bench stops starting instances after this long, whatever the test does.
const BENCH_SECONDS = 60;

let sutra;
let browser;

before(async () => {
  browser = await launch();
  sutra = await new Sutra().start();
});

after(async () => {
  await browser?.close();
  await sutra?.stop();
});

// `sutra bench two-tasks` against the test's server: its clients start instances and its
// workers complete their tasks through the API. Its report, on stdout, is not read.
function bench(url) {
  const child = spawn(BINARY, ['--server', url, 'bench', 'two-tasks', '--instances', '1000000',
    '--clients', '4', '--max-seconds', String(BENCH_SECONDS)], { stdio: ['ignore', 'ignore', 'pipe'] });
  child.said = '';
  child.stderr.on('data', (chunk) => {
    child.said += chunk;
  });
  child.stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.on('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  };
  return child;
}

test('the System page charts the last minutes, and its steps chart rises from zero under sutra bench load', async () => {
  const page = await openPage(browser);
  await page.goto(`${sutra.url}/system`);
  await page.getByRole('heading', { level: 1, name: 'System' }).waitFor();
  const values = async (chart, series) => {
    const line = page.locator(`figure[data-chart="${chart}"] path[data-series="${series}"]`);
    return JSON.parse(await line.getAttribute('data-values'));
  };
  // The heading is drawn before the page's first read of the history answers: wait for the
  // charts that read draws before counting them.
  await page.locator('figure[data-chart="steps"] svg[role="img"]').waitFor();
  for (const chart of ['steps', 'backlog', 'latency', 'failures']) {
    assert.equal(await page.locator(`figure[data-chart="${chart}"] svg[role="img"]`).count(), 1, `the ${chart} chart is drawn`);
  }
  assert.match(await page.locator('.about').textContent(), /a sample every 10 s since/);

  // Before any load: the replica's first samples count no step.
  const idle = await sutra.until('a first sample', async () => {
    const steps = await values('steps', 'steps');
    return steps.length ? steps : null;
  }, SAMPLE);
  assert.ok(idle.every((v) => v === 0), `no step before the load: ${idle}`);
  assert.ok((await values('latency', 'p50')).every((v) => v === null), 'no step, no latency');

  const load = bench(sutra.url);
  try {
    // Under load the last samples count steps; three of them, so that the picture shows a line.
    const busy = await sutra.until('three samples with steps', async () => {
      if (load.exitCode !== null) throw new Error(`sutra bench ended (${load.exitCode}): ${load.said}`);
      const steps = await values('steps', 'steps');
      return steps.filter((v) => v > 0).length >= 3 ? steps : null;
    }, 3 * SAMPLE);
    assert.equal(busy[0], 0, 'the chart still begins with the idle sample');
    assert.ok(busy.at(-1) > 0, `steps per second under load: ${busy}`);
    assert.ok((await values('latency', 'p99')).at(-1) > 0, 'the steps have a latency');
    assert.ok((await values('backlog', 'tasks')).some((v) => v !== null), 'the backlog is counted');
    assert.notEqual(await page.locator('[data-now="steps"]').textContent(), '0');
    await assertAccessible(page, 'the System page under load');
    await page.screenshot({ path: join(SHOTS, 'system.png'), fullPage: true });
  } finally {
    await load.stop();
  }
  assert.deepEqual(page.errors, [], 'no errors in the browser console');
  await page.context().close();
});
