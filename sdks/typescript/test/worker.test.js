// The worker against a real `sutra serve` (see harness.js). Every test deploys a flow of its own,
// named after its topic, so that no test's worker takes another's tasks.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { createInterface } from "node:readline";
import { join } from "node:path";

import { ApiError, Client, TaskError, Worker, TASK_LOCK_LOST, codes } from "sutra-worker";
import {
  startServer,
  deployTaskFlow,
  deployTwoTaskFlow,
  startInstance,
  waitFor,
  waitForStatus,
  recordingLogger,
  delay,
  packageDir,
} from "./harness.js";

let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

/** A client whose calls are counted, for tests that look at what the worker sent. */
function countingClient(url) {
  const client = new Client({ url });
  const calls = { polls: [], batches: [], extends: 0, releases: 0, fails: 0, singles: 0 };
  const poll = client.poll.bind(client);
  client.poll = (request, options) => {
    calls.polls.push(request.max);
    return poll(request, options);
  };
  const completeMany = client.completeMany.bind(client);
  client.completeMany = (items) => {
    calls.batches.push(items.length);
    return completeMany(items);
  };
  for (const [name, counter] of [
    ["extend", "extends"],
    ["release", "releases"],
    ["fail", "fails"],
    ["complete", "singles"],
  ]) {
    const original = client[name].bind(client);
    client[name] = (...args) => {
      calls[counter]++;
      return original(...args);
    };
  }
  return { client, calls };
}

/** Runs `worker` for the length of `body`, then stops it. */
async function running(worker, body) {
  const run = worker.run();
  try {
    return await body();
  } finally {
    await worker.stop();
    await run;
  }
}

test("tasks are completed, in batches, polling for no more than the free slots", async () => {
  const topic = "ts-complete";
  await deployTaskFlow(server.client, topic);
  const { client, calls } = countingClient(server.url);
  const worker = new Worker({ client, workerId: "ts-1", concurrency: 3, pollWait: "PT1S" });
  worker.task(topic, async (task) => {
    await delay(50);
    return { doubled: task.input.n * 2, key: task.input.key };
  });
  // Listeners left behind on the worker's signals, one per task or per full poll loop, would
  // show as a MaxListenersExceededWarning after ten.
  const warnings = [];
  const onWarning = (warning) => warnings.push(warning.name);
  process.on("warning", onWarning);
  await running(worker, async () => {
    const ids = [];
    for (let n = 1; n <= 15; n++) ids.push(await startInstance(server.client, topic, `k${n}`, n));
    for (const [i, id] of ids.entries()) {
      const instance = await waitForStatus(server.client, id, "completed");
      assert.deepEqual(instance.vars.result, { doubled: (i + 1) * 2, key: `k${i + 1}` });
    }
  });
  process.off("warning", onWarning);
  assert.deepEqual(warnings, []);
  assert.ok(calls.polls.every((max) => max >= 1 && max <= 3), `poll sizes ${calls.polls}`);
  assert.equal(
    calls.batches.reduce((sum, size) => sum + size, 0),
    15,
    "every completion went through POST /v1/tasks/complete",
  );
  assert.equal(calls.singles, 0);
  assert.equal(calls.fails, 0);
});

test("a TaskError is a business error: the flow takes on-error at once, with no retry", async () => {
  const topic = "ts-business";
  await deployTaskFlow(server.client, topic, { retries: 3 });
  let calls = 0;
  const worker = new Worker({ url: server.url, workerId: "ts-2", pollWait: "PT1S" });
  worker.task(topic, () => {
    calls++;
    throw new TaskError("FUNDS.INSUFFICIENT", "the account is empty");
  });
  const instance = await running(worker, async () => {
    const id = await startInstance(server.client, topic, "b1");
    return waitForStatus(server.client, id, "completed");
  });
  assert.deepEqual(instance.vars.recovered, { code: "FUNDS.INSUFFICIENT", message: "the account is empty" });
  assert.equal(instance.vars.result, undefined);
  assert.equal(calls, 1);
});

test("any other throw fails the task for a retry: attempt 2 after the node's backoff succeeds", async () => {
  const topic = "ts-retry";
  await deployTaskFlow(server.client, topic, { retries: 3, backoff: "PT1S" });
  const attempts = [];
  const at = [];
  const worker = new Worker({ url: server.url, workerId: "ts-3", pollWait: "PT1S", logger: recordingLogger() });
  worker.task(topic, (task) => {
    attempts.push(task.attempt);
    at.push(Date.now());
    if (task.attempt === 1) throw new Error("the ledger timed out");
    return { attempt: task.attempt };
  });
  const instance = await running(worker, async () => {
    const id = await startInstance(server.client, topic, "r1");
    return waitForStatus(server.client, id, "completed");
  });
  assert.deepEqual(attempts, [1, 2]);
  assert.ok(at[1] - at[0] >= 900, `the retry waited the backoff (${at[1] - at[0]} ms)`);
  assert.deepEqual(instance.vars.result, { attempt: 2 });
});

test("a handler slower than its lock keeps the lock by extending it", async () => {
  const topic = "ts-slow";
  await deployTaskFlow(server.client, topic);
  const { client, calls } = countingClient(server.url);
  let runs = 0;
  const worker = new Worker({ client, workerId: "ts-4", lock: "PT1S", pollWait: "PT1S" });
  worker.task(topic, async () => {
    runs++;
    await delay(2500);
    return { slow: true };
  });
  // A rival polling the same topic meanwhile would get the task if its lock lapsed.
  let stolen = 0;
  const rival = new Worker({ url: server.url, workerId: "ts-4-rival", pollWait: "PT1S" });
  rival.task(topic, () => {
    stolen++;
    return { stolen: true };
  });
  const instance = await running(worker, async () => {
    const id = await startInstance(server.client, topic, "s1");
    await waitFor(() => runs === 1, { what: "the slow handler to start" });
    return running(rival, () => waitForStatus(server.client, id, "completed"));
  });
  assert.deepEqual(instance.vars.result, { slow: true });
  assert.equal(runs, 1);
  assert.equal(stolen, 0);
  assert.ok(calls.extends >= 3, `extended ${calls.extends} times over 2.5 s with a 1 s lock`);
});

test("a worker killed mid-task: another takes the task once its lock lapses, and completes it", async () => {
  const topic = "ts-killed";
  await deployTaskFlow(server.client, topic, { retries: 3 });
  const child = spawn(process.execPath, [join(packageDir, "test/fixtures/stuck-worker.mjs"), server.url, topic, "PT2S"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let second;
  try {
    const started = new Promise((done) =>
      createInterface({ input: child.stdout }).on("line", (line) => line.startsWith("started ") && done(line)),
    );
    const id = await startInstance(server.client, topic, "x1");
    const [, taskId, attempt] = (await started).split(" ");
    assert.equal(attempt, "1");
    process.kill(child.pid, "SIGKILL");
    const killedAt = Date.now();
    let taken = null;
    second = new Worker({ url: server.url, workerId: "ts-5", pollWait: "PT1S" });
    second.task(topic, (task) => {
      taken = { id: task.id, attempt: task.attempt, after: Date.now() - killedAt };
      return { by: "ts-5" };
    });
    const instance = await running(second, () => waitForStatus(server.client, id, "completed"));
    assert.deepEqual(instance.vars.result, { by: "ts-5" });
    assert.equal(taken.id, taskId);
    assert.equal(taken.attempt, 2, "a lapsed lock spends the attempt, unlike a hand-back");
    assert.ok(taken.after >= 1000, `taken ${taken.after} ms after the kill: only once the 2 s lock lapsed`);
  } finally {
    if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGKILL");
  }
});

test("stop() hands a running task back: attempt unspent, another worker takes it at once", async () => {
  const topic = "ts-handback";
  await deployTaskFlow(server.client, topic);
  const { client, calls } = countingClient(server.url);
  let started = false;
  let sawAbort = false;
  const logger = recordingLogger();
  const first = new Worker({ client, workerId: "ts-6a", pollWait: "PT1S", grace: 300, lock: "PT1M", logger });
  first.task(topic, (task) => {
    started = true;
    return new Promise((_, fail) =>
      task.signal.addEventListener("abort", () => {
        sawAbort = true;
        fail(task.signal.reason);
      }),
    );
  });
  let taken = null;
  const second = new Worker({ url: server.url, workerId: "ts-6b", pollWait: "PT10S", logger });
  second.task(topic, (task) => {
    taken = { attempt: task.attempt, at: Date.now() };
    return { by: "ts-6b" };
  });
  const firstRun = first.run();
  const id = await startInstance(server.client, topic, "h1");
  await waitFor(() => started, { what: "the first worker's handler to start" });
  const instance = await running(second, async () => {
    const stoppedAt = Date.now();
    await first.stop();
    await firstRun;
    const stopped = await waitForStatus(server.client, id, "completed").catch(async (error) => {
      const tasks = await server.client.tasks({ topic });
      throw new Error(`${error.message}; tasks: ${JSON.stringify(tasks.items)}; log:\n${logger.lines.join("\n")}`);
    });
    assert.ok(taken.at - stoppedAt < 5000, `taken ${taken.at - stoppedAt} ms after stop(), long before the 1 min lock lapsed`);
    return stopped;
  });
  assert.equal(calls.releases, 1);
  assert.equal(calls.fails, 0);
  assert.ok(sawAbort, "the handler's task.signal was aborted");
  assert.equal(taken.attempt, 1, "the hand-back did not spend the attempt");
  assert.deepEqual(instance.vars.result, { by: "ts-6b" });
});

test("stop() on an idle worker aborts its long poll at once", async () => {
  const worker = new Worker({ url: server.url, workerId: "ts-7", pollWait: "PT30S" });
  worker.task("ts-idle", () => null);
  const run = worker.run();
  await delay(300);
  const asked = Date.now();
  await worker.stop();
  await run;
  assert.ok(Date.now() - asked < 2000, `stopped in ${Date.now() - asked} ms`);
});

test("poll failures back off and never end the worker", async () => {
  // A port nothing listens on: take one, then close it.
  const port = await new Promise((done) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
  const logger = recordingLogger();
  const worker = new Worker({ url: `http://127.0.0.1:${port}`, workerId: "ts-8", logger });
  worker.task("ts-away", () => null);
  let ended = false;
  const run = worker.run().then(() => (ended = true));
  await waitFor(() => logger.lines.filter((line) => line.includes("poll failed")).length >= 3, {
    timeoutMs: 10_000,
    what: "three failed polls",
  });
  assert.equal(ended, false);
  await worker.stop();
  await run;
  assert.equal(ended, true);
});

test("API errors carry the problem's code, status and retry advice", async () => {
  await assert.rejects(server.client.instance("0190f7a5-0000-7000-8000-000000000000"), (error) => {
    assert.ok(error instanceof ApiError);
    assert.equal(error.kind, "problem");
    assert.equal(error.code, "SUTRA.INSTANCE.NOT_FOUND");
    assert.equal(error.status, 404);
    assert.equal(error.retryable, false);
    return true;
  });
  await assert.rejects(server.client.extend("0190f7a5-0000-7000-8000-000000000000:1", "nope", "PT1M"), (error) => {
    assert.equal(error.code, "SUTRA.TASK.NOT_FOUND");
    assert.equal(error.status, 404);
    return true;
  });
  // A real task, driven by hand through the client: a wrong token is a lost lock.
  const topic = "ts-api";
  await deployTaskFlow(server.client, topic);
  const id = await startInstance(server.client, topic, "a1", 21);
  const [task] = await server.client.poll({ worker: "ts-9", topics: [topic], max: 1, lock: "PT1M", wait: "PT5S" });
  assert.equal(task.instance, id);
  assert.equal(task.attempt, 1);
  assert.deepEqual(task.input, { key: "a1", n: 21 });
  await assert.rejects(server.client.extend(task.id, "not-the-token", "PT1M"), (error) => {
    assert.equal(error.code, TASK_LOCK_LOST);
    assert.equal(error.status, 409);
    assert.equal(error.retryable, false);
    return true;
  });
  const extended = await server.client.extend(task.id, task.lock_token, 30_000);
  assert.equal(extended.id, task.id);
  assert.deepEqual(await server.client.complete(task.id, task.lock_token, { answer: 42 }), { id: task.id, state: "completed" });
  const instance = await waitForStatus(server.client, id, "completed");
  assert.deepEqual(instance.vars.result, { answer: 42 });
  await assert.rejects(server.client.release(task.id, task.lock_token), (error) => error.code === TASK_LOCK_LOST);
  await assert.rejects(
    server.client.deploy("name: Not A Name\n"),
    (error) => error instanceof ApiError && error.code === "SUTRA.DEPLOY.INVALID" && error.status === 400,
  );
  assert.equal(codes.HANDLER_FAILED, "WORKER.HANDLER.FAILED");
});

test("a completion takes the flow's next task: run in the same slot, never polled", async () => {
  // By hand: a completion asking to take is answered with the second task, locked for the
  // asking worker as a poll would have answered it.
  const topic = "ts-take-hand";
  const next = `${topic}-next`;
  await deployTwoTaskFlow(server.client, topic);
  const id = await startInstance(server.client, topic, "t1", 1);
  const [first] = await server.client.poll({ worker: "ts-taker", topics: [topic], max: 1, lock: "PT1M", wait: "PT5S" });
  const take = { worker: "ts-taker", topics: [topic, next], lock: "PT42S" };
  const [result] = await server.client.completeMany([{ id: first.id, lock_token: first.lock_token, output: { n: 2 }, take }]);
  assert.equal(result.state, "completed");
  const taken = result.taken;
  assert.equal(taken.topic, next);
  assert.equal(taken.instance, id);
  assert.equal(taken.attempt, 1);
  assert.deepEqual(taken.input, { n: 2 });
  assert.ok(taken.lock_token);
  const lockMs = Date.parse(taken.lock_expires_at) - Date.now();
  assert.ok(lockMs > 30_000 && lockMs <= 42_000, `locked for the 42 s asked for, not the node's minute (${lockMs} ms left)`);
  const listed = (await server.client.tasks({ topic: next })).items.find((task) => task.id === taken.id);
  assert.equal(listed.state, "locked");
  assert.equal(listed.worker, "ts-taker");
  // Nothing is left for a poll: the task is the asking worker's.
  assert.deepEqual(await server.client.poll({ worker: "ts-other", topics: [next], max: 1 }), []);
  await server.client.completeMany([{ id: taken.id, lock_token: taken.lock_token, output: { n: 3 } }]);
  assert.deepEqual((await waitForStatus(server.client, id, "completed")).vars.second, { n: 3 });

  // The worker: every completion asks, and each second task runs from a completion's answer,
  // never from a poll (it is armed locked, so no poll could see it), within the concurrency.
  const flow = "ts-take-worker";
  await deployTwoTaskFlow(server.client, flow);
  const client = new Client({ url: server.url });
  const seen = { polled: [], taken: [], takes: [] };
  const poll = client.poll.bind(client);
  client.poll = async (request, options) => {
    const tasks = await poll(request, options);
    seen.polled.push(...tasks.map((task) => task.id));
    return tasks;
  };
  const completeMany = client.completeMany.bind(client);
  client.completeMany = async (items) => {
    seen.takes.push(...items.map((item) => item.take));
    const results = await completeMany(items);
    seen.taken.push(...results.filter((r) => r.taken).map((r) => r.taken.id));
    return results;
  };
  const ran = { first: [], second: [] };
  let active = 0;
  let peak = 0;
  const worker = new Worker({ client, workerId: "ts-taking", concurrency: 2, lock: "PT30S", pollWait: "PT1S" });
  const handler = (kind, answer) => async (task) => {
    ran[kind].push(task.id);
    peak = Math.max(peak, ++active);
    await delay(20);
    active--;
    return answer(task.input);
  };
  worker.task(flow, handler("first", (input) => ({ n: input.n + 1 })));
  worker.task(`${flow}-next`, handler("second", (input) => ({ n: input.n * 10 })));
  await running(worker, async () => {
    const ids = [];
    for (let n = 0; n < 4; n++) ids.push(await startInstance(server.client, flow, `w${n}`, n));
    for (const [n, instance] of ids.entries()) {
      assert.deepEqual((await waitForStatus(server.client, instance, "completed")).vars.second, { n: (n + 1) * 10 });
    }
  });
  assert.equal(ran.second.length, 4);
  assert.deepEqual([...seen.taken].sort(), [...ran.second].sort(), "every second task was handed over by a completion");
  assert.ok(!seen.polled.some((task) => ran.second.includes(task)), "no second task was polled");
  assert.deepEqual([...seen.polled].sort(), [...ran.first].sort());
  assert.ok(peak <= 2, `at most the concurrency ran at once (peak ${peak})`);
  const expected = { worker: "ts-taking", topics: [flow, `${flow}-next`].sort(), lock: "PT30S" };
  for (const asked of seen.takes) assert.deepEqual(asked, expected);
});
