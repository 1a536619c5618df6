// Starts a real `sutra serve` on the embedded store (a SQLite file in a temp dir, a free loopback
// port) for a test file, and stops it — by its PID — when the file is done.
//
// The binary is $SUTRA_BIN, or the repository's release build (../../target/release/sutra
// relative to sdks/typescript).

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

import { Client } from "sutra-worker";

const here = dirname(fileURLToPath(import.meta.url));
export const packageDir = resolve(here, "..");

export function sutraBin() {
  const bin = process.env.SUTRA_BIN ? resolve(process.env.SUTRA_BIN) : resolve(packageDir, "../../target/release/sutra");
  if (!existsSync(bin)) {
    throw new Error(`no sutra binary at ${bin}: build it (cargo build --release -p sutra-cli) or set SUTRA_BIN`);
  }
  return bin;
}

/** A running `sutra serve`: `url`, `client`, and `stop()`; `env` is added to its environment. */
export async function startServer({ env = {} } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "sutra-worker-test-"));
  const child = spawn(sutraBin(), ["serve", "--db", `sqlite://${join(dir, "sutra.db")}`, "--listen", "127.0.0.1:0"], {
    env: { ...process.env, SUTRA_LOG: process.env.SUTRA_LOG ?? "warn", ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const stderr = [];
  let exited = null;
  const exit = new Promise((done) =>
    child.once("exit", (code, signal) => {
      exited = { code, signal };
      done(exited);
    }),
  );
  const url = await new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`sutra serve did not listen within 30 s:\n${stderr.join("\n")}`)), 30_000);
    createInterface({ input: child.stderr }).on("line", (line) => {
      stderr.push(line);
      const match = /sutra: listening on (\S+)/.exec(line);
      if (match) {
        clearTimeout(timer);
        done(match[1]);
      }
    });
    exit.then(({ code, signal }) => {
      clearTimeout(timer);
      fail(new Error(`sutra serve exited (${code ?? signal}) before it listened:\n${stderr.join("\n")}`));
    });
  });
  const client = new Client({ url });
  await waitFor(async () => {
    try {
      await client.ready();
      return true;
    } catch {
      return false;
    }
  }, { timeoutMs: 30_000, what: "GET /readyz" });
  return {
    url,
    client,
    stderr: () => stderr.join("\n"),
    async stop() {
      if (exited === null) {
        process.kill(child.pid, "SIGTERM");
        const timer = setTimeout(() => exited === null && process.kill(child.pid, "SIGKILL"), 10_000);
        await exit;
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Polls `check` until it answers something truthy, which it returns. */
export async function waitFor(check, { timeoutMs = 20_000, intervalMs = 50, what = "a condition" } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    last = await check();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((done) => setTimeout(done, intervalMs));
  }
}

/** Waits until the instance has `status`, and returns its snapshot. */
export function waitForStatus(client, id, status, timeoutMs = 20_000) {
  return waitFor(
    async () => {
      const instance = await client.instance(id);
      return instance.status === status ? instance : null;
    },
    { timeoutMs, what: `instance ${id} to be ${status}` },
  );
}

/**
 * Deploys a one-task flow named `name` whose channel is `name` too: a task of topic `name`, its
 * result in `vars.result`, and an `on-error` path that records `vars.error` in `vars.recovered`.
 */
export async function deployTaskFlow(client, name, { retries = 2, backoff = "PT1S", lock = "PT1M" } = {}) {
  const yaml = `
name: ${name}
channels:
  ${name}:
    transport: http
    correlate: data.key
flows:
  main:
    start: { channel: ${name} }
    nodes:
      - id: work
        task: { topic: ${name}, input: { key: "= vars.input.key", n: "= vars.input.n" }, retries: ${retries}, backoff: ${backoff}, lock: ${lock} }
        output: result
        on-error: recover
      - id: done
        end: {}
      - id: recover
        set: { recovered: "= vars.error" }
`;
  return client.deploy(yaml);
}

/**
 * Deploys a two-task flow named `name` whose channel is `name` too: a task of topic `name`,
 * then one of topic `${name}-next` on its output, armed by the step the first task's completion
 * resumes; the results in `vars.first` and `vars.second`.
 */
export async function deployTwoTaskFlow(client, name, { lock = "PT1M" } = {}) {
  const yaml = `
name: ${name}
channels:
  ${name}:
    transport: http
    correlate: data.key
flows:
  main:
    start: { channel: ${name} }
    nodes:
      - id: first
        task: { topic: ${name}, input: { key: "= vars.input.key", n: "= vars.input.n" }, lock: ${lock} }
        output: first
      - id: second
        task: { topic: ${name}-next, input: "= vars.first", lock: ${lock} }
        output: second
      - id: done
        end: {}
`;
  return client.deploy(yaml);
}

/** Starts an instance of a flow deployed by deployTaskFlow (or deployTwoTaskFlow); answers its id. */
export async function startInstance(client, name, key, n = 1) {
  const answer = await client.send(name, { id: `${name}-${key}`, type: "test.start", data: { key, n } });
  return answer.instance;
}

/** A logger that keeps what it is told, for tests to print on failure. */
export function recordingLogger() {
  const lines = [];
  const record = (level) => (message) => lines.push(`${level} ${message}`);
  return { lines, debug: record("debug"), info: record("info"), warn: record("warn") };
}

export const delay = (ms) => new Promise((done) => setTimeout(done, ms));
