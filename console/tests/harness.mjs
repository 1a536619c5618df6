// What the console's browser tests share: a `sutra serve` of their own on the embedded store,
// driven over the HTTP API as a user would, and pages in headless Chromium that record every
// error the browser reports. Run by .ci/console, which passes the binary in SUTRA_BINARY.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { chromium } from 'playwright-core';

const require = createRequire(import.meta.url);
const AXE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
export const BINARY = process.env.SUTRA_BINARY;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const SHOTS = process.env.SUTRA_SCREENSHOTS || join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'docs', 'console');
export const WAIT = 15_000;

// Headless Chromium, and the screenshots' folder made.
export async function launch() {
  assert.ok(BINARY, 'SUTRA_BINARY names the sutra binary');
  mkdirSync(SHOTS, { recursive: true });
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
}

export class Sutra {
  constructor(env = {}) {
    this.dir = mkdtempSync(join(tmpdir(), 'sutra-console-'));
    this.env = env;
  }

  async start() {
    this.child = spawn(BINARY, ['serve', '--db', `sqlite://${join(this.dir, 'sutra.db')}`, '--listen', '127.0.0.1:0'], {
      env: { ...process.env, SUTRA_LOG: 'warn', ...this.env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.url = await new Promise((resolve, reject) => {
      let seen = '';
      const timer = setTimeout(() => reject(new Error(`sutra serve did not listen: ${seen}`)), WAIT);
      this.child.stderr.on('data', (chunk) => {
        seen += chunk;
        const match = seen.match(/sutra: listening on (\S+)\s/);
        if (match) {
          clearTimeout(timer);
          resolve(match[1].replace(/\/$/, ''));
        }
      });
      this.child.on('exit', (code) => reject(new Error(`sutra serve exited ${code}: ${seen}`)));
    });
    return this;
  }

  async stop() {
    if (this.child && this.child.exitCode === null) {
      const exited = new Promise((resolve) => this.child.on('exit', resolve));
      this.child.kill('SIGTERM');
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  async call(method, path, body, { token, type = 'application/json' } = {}) {
    const headers = { 'content-type': type };
    if (token) headers.authorization = `Bearer ${token}`;
    const response = await fetch(this.url + path, {
      method,
      headers,
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null };
  }

  async deploy(yaml, options) {
    const answer = await this.call('POST', '/v1/deployments', yaml, { ...options, type: 'application/yaml' });
    assert.equal(answer.status, 201, JSON.stringify(answer.body));
  }

  async send(channel, id, data) {
    const event = { specversion: '1.0', id, type: 'console-test', source: 'console-tests', data };
    const answer = await this.call('POST', `/v1/channels/${channel}/messages`, event, { type: 'application/cloudevents+json' });
    assert.equal(answer.status, 202, JSON.stringify(answer.body));
    return answer.body.instance;
  }

  async until(what, check, patience = WAIT) {
    const deadline = Date.now() + patience;
    for (;;) {
      const value = await check();
      if (value) return value;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  async instance(id) {
    return (await this.call('GET', `/v1/instances/${id}`)).body;
  }
}

// A page that records every error the browser reports: console errors and uncaught exceptions.
export async function openPage(browser) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.errors = [];
  page.requests = [];
  page.on('console', (message) => {
    if (message.type() === 'error') page.errors.push(message.text());
  });
  page.on('pageerror', (error) => page.errors.push(String(error)));
  page.on('request', (request) => page.requests.push(request));
  page.setDefaultTimeout(WAIT);
  return page;
}

// axe-core in the page: no serious or critical violation.
export async function assertAccessible(page, where) {
  // Evaluated by the test driver, not added as a script: the page keeps its own CSP, so a
  // console that broke its policy would show here as a browser error.
  await page.evaluate(AXE);
  const violations = await page.evaluate(async () => {
    const result = await window.axe.run(document, { resultTypes: ['violations'] });
    return result.violations
      .filter((v) => ['serious', 'critical'].includes(v.impact))
      .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
  });
  assert.deepEqual(violations, [], `${where}: axe reports serious or critical violations`);
}
