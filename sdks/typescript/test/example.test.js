// examples/money-transfer-worker.mjs --demo against a real `sutra serve`: it deploys
// examples/money-transfer.yaml, sends three transfers and shows how they end.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";

import { startServer, packageDir } from "./harness.js";

let server;

before(async () => {
  // money-transfer.yaml's channels are http: a bare server takes it.
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

test("the money-transfer example worker debits, credits and refuses mallory", async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [join(packageDir, "examples/money-transfer-worker.mjs"), "--demo"], {
    env: { ...process.env, SUTRA_URL: server.url },
    timeout: 45_000,
  });
  assert.match(stdout, /deployed payments version 1/);
  assert.match(stdout, /-1: completed \{"account":"alice","amount":120,"reference":"debit-/);
  assert.match(stdout, /-2: completed \{"account":"bob","amount":75,/);
  assert.match(stdout, /-3: failed TRANSFER\.FAILED: \S+: mallory's account is empty/);
});
