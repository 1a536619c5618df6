// sutra-worker: a worker for Sutra's external tasks (docs/spec.md §5.5), and a small client for
// the HTTP API (§4). Plain JavaScript ESM with hand-written declarations (index.d.ts), no
// runtime dependencies, Node >= 20 (global fetch, AbortController).
//
// The behaviour mirrors the Rust worker (crates/sutra-client/src/worker.rs):
// - one loop polls for exactly as many tasks as there are free slots, long-polling with `wait`;
// - each task runs on its own, its lock extended at about half the remaining period;
// - a lost lock (SUTRA.TASK.LOCK.LOST on an extend or a report) drops the result;
// - completions are sent in batches (POST /v1/tasks/complete), one call in flight at a time,
//   carrying whatever queued meanwhile; failures, extensions and hand-backs go alone;
// - a completion asks for the worker's next task (`take`), and a task the server locks for the
//   worker with it runs at once in the slot the completion held: a flow's next task needs no
//   poll (docs/decisions/0038-eager-dispatch.md). A stopping worker asks for nothing, so that
//   its drain cannot be fed forever, and hands a task that still comes back unrun once the
//   grace period is over;
// - poll failures back off with jitter and never end the worker;
// - stop() stops polling at once (aborting the long poll in flight), lets running handlers
//   finish within a grace period, then hands the rest back with POST /v1/tasks/{id}/release,
//   which does not spend an attempt.

/** The code a server answers when a lock token is wrong or expired, or the task is done. */
export const TASK_LOCK_LOST = "SUTRA.TASK.LOCK.LOST";

/** Codes a worker reports for failures it detects itself rather than its handlers. */
export const codes = Object.freeze({
  /** Any error thrown by a handler other than a TaskError. Retried. */
  HANDLER_FAILED: "WORKER.HANDLER.FAILED",
  /** The handler's output cannot be sent as JSON. Retried. */
  OUTPUT_INVALID: "WORKER.OUTPUT.INVALID",
  /** The server sent a task of a topic this worker has no handler for. Retried. */
  TOPIC_UNKNOWN: "WORKER.TOPIC.UNKNOWN",
});

/** The most completions one POST /v1/tasks/complete may carry (the server refuses more). */
export const COMPLETE_BATCH_MAX = 100;

const REQUEST_TIMEOUT_MS = 30_000;
const CONCURRENCY_DEFAULT = 8;
const LOCK_DEFAULT = "PT1M";
const POLL_WAIT_DEFAULT = "PT20S";
// Shorter than the usual 30 s an orchestrator allows between SIGTERM and SIGKILL, so that the
// hand-back still happens before the process is killed.
const GRACE_DEFAULT = "PT10S";
const POLL_BACKOFF_FIRST_MS = 250;
const POLL_BACKOFF_MAX_MS = 30_000;
const REPORT_ATTEMPTS_MAX = 4;
const REPORT_BACKOFF_FIRST_MS = 250;
const REPORT_BACKOFF_MAX_MS = 2_000;

// ---------------------------------------------------------------------------------------------
// Errors

/**
 * A failed API call: the server refused it with a problem (`kind: "problem"`, with its stable
 * `code`), it got no answer (`kind: "transport"`), or the answer was not what the API documents
 * (`kind: "unexpected"`).
 */
export class ApiError extends Error {
  constructor(message, { kind, status = null, code = null, title = null, detail = null, retryable = false, problem = null, url = null, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "ApiError";
    this.kind = kind;
    this.status = status;
    this.code = code;
    this.title = title;
    this.detail = detail;
    this.retryable = retryable;
    this.problem = problem;
    this.url = url;
  }

  /** An ApiError for a problem+json body (or one item's `error` of a batched completion). */
  static fromProblem(problem, { url = null, status = null } = {}) {
    const code = typeof problem.code === "string" ? problem.code : null;
    const detail = problem.detail ?? null;
    const message = `${code ?? "problem"}: ${detail ?? problem.title ?? "refused"}`;
    return new ApiError(message, {
      kind: "problem",
      status: problem.status ?? status,
      code,
      title: problem.title ?? null,
      detail,
      retryable: problem.retryable === true,
      problem,
      url,
    });
  }
}

/**
 * Why a handler did not produce an output. By default a business error: not retried, the flow
 * takes the node's `on-error` path with `vars.error = {code, message}` (or fails without one).
 * With `{ retry: true }` it is a transient failure, retried with the node's backoff.
 */
export class TaskError extends Error {
  constructor(code, message = "", { retry = false } = {}) {
    super(message);
    if (typeof code !== "string" || code === "") {
      throw new TypeError("a TaskError needs a non-empty code: on-error routes on it");
    }
    this.name = "TaskError";
    this.code = code;
    this.retry = retry === true;
  }

  /** A transient failure with the code WORKER.HANDLER.FAILED: the task is retried. */
  static retry(message, code = codes.HANDLER_FAILED) {
    return new TaskError(code, message, { retry: true });
  }

  /** A business error: not retried; the flow's on-error path gets `{code, message}`. */
  static business(code, message) {
    return new TaskError(code, message, { retry: false });
  }
}

// ---------------------------------------------------------------------------------------------
// Durations

/**
 * Milliseconds from a number of milliseconds or an ISO-8601 duration of days, hours, minutes and
 * seconds ("PT30S", "PT1M30S", "P1DT2H", "PT0.5S").
 */
export function toMillis(duration) {
  if (typeof duration === "number") {
    if (!Number.isFinite(duration) || duration < 0) throw new RangeError(`not a duration: ${duration}`);
    return duration;
  }
  const match = /^P(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/.exec(String(duration));
  if (!match || duration === "P" || String(duration).endsWith("T")) {
    throw new RangeError(`not an ISO-8601 duration such as PT30S: ${JSON.stringify(duration)}`);
  }
  const [, d = 0, h = 0, m = 0, s = 0] = match;
  return Math.round(((Number(d) * 24 + Number(h)) * 60 + Number(m)) * 60_000 + Number(s) * 1000);
}

/** An ISO-8601 duration ("PT1.5S") for a number of milliseconds, or the string unchanged. */
export function toIso(duration) {
  if (typeof duration === "string") {
    toMillis(duration);
    return duration;
  }
  const ms = toMillis(duration);
  const seconds = Math.floor(ms / 1000);
  const rest = ms % 1000;
  return rest === 0 ? `PT${seconds}S` : `PT${seconds}.${String(rest).padStart(3, "0").replace(/0+$/, "")}S`;
}

// ---------------------------------------------------------------------------------------------
// Client

/** The HTTP API of a Sutra server. */
export class Client {
  /**
   * @param {{url?: string, token?: string, timeout?: number|string}} options `url` defaults to
   * http://127.0.0.1:7480; `token` is sent as a bearer token; `timeout` bounds each call
   * (default 30 s; a poll gets its `wait` on top).
   */
  constructor({ url = "http://127.0.0.1:7480", token, timeout = REQUEST_TIMEOUT_MS } = {}) {
    let base;
    try {
      base = new URL(url);
    } catch {
      throw new TypeError(`not a server URL: ${JSON.stringify(url)}`);
    }
    if (base.protocol !== "http:" && base.protocol !== "https:") {
      throw new TypeError(`a server URL is http:// or https://, not ${JSON.stringify(url)}`);
    }
    this.url = base.href.replace(/\/+$/, "");
    this.token = token ?? undefined;
    this.timeoutMs = toMillis(timeout);
  }

  /** Deploys a YAML document as the next version of its name → {name, version, status}. */
  async deploy(yaml, { file } = {}) {
    const headers = { "content-type": "application/yaml" };
    if (file) headers["sutra-file"] = file;
    return (await this.#call("POST", ["v1", "deployments"], { body: yaml, headers })).body;
  }

  /**
   * Sends a CloudEvent on an `http` channel. `specversion` defaults to "1.0" and `source` to
   * "sutra-worker". Answers the intake's answer `{instance, status, dedup}`; a channel with
   * `ack: complete` that replied answers `{instance, reply}` instead.
   */
  async send(channel, event) {
    const cloudEvent = { specversion: "1.0", source: "sutra-worker", ...event };
    for (const field of ["id", "type"]) {
      if (typeof cloudEvent[field] !== "string" || cloudEvent[field] === "") {
        throw new TypeError(`a CloudEvent needs a non-empty string \`${field}\``);
      }
    }
    const answer = await this.#call("POST", ["v1", "channels", channel, "messages"], {
      body: JSON.stringify(cloudEvent),
      headers: { "content-type": "application/cloudevents+json" },
    });
    if (answer.status === 200) {
      return { instance: answer.headers.get("sutra-instance"), reply: answer.body };
    }
    return answer.body;
  }

  /** An instance's snapshot: status, vars, tokens, version, failure. */
  async instance(id) {
    return (await this.#call("GET", ["v1", "instances", id])).body;
  }

  /** An instance's audit events in sequence order. */
  async history(id) {
    return (await this.#call("GET", ["v1", "instances", id, "history"])).body;
  }

  /** Lists tasks: `{items, next}`; `query` takes topic, state, limit and after. */
  async tasks(query = {}) {
    return (await this.#call("GET", ["v1", "tasks"], { query })).body;
  }

  /**
   * Locks up to `max` tasks of `topics` for `worker`, waiting up to `wait` for one to arrive
   * → [{id, topic, instance, input, attempt, lock_token, lock_expires_at}]. `signal` aborts it.
   */
  async poll({ worker, topics, max = 1, lock, wait }, { signal } = {}) {
    const body = { worker, topics, max };
    if (lock !== undefined) body.lock = toIso(lock);
    if (wait !== undefined) body.wait = toIso(wait);
    const waitMs = wait === undefined ? 0 : toMillis(wait);
    return (await this.#post(["v1", "tasks", "poll"], body, { signal, timeoutMs: this.timeoutMs + waitMs })).body;
  }

  /** Completes one task → {id, state: "completed"}. */
  async complete(id, lockToken, output = null) {
    return (await this.#post(["v1", "tasks", id, "complete"], { lock_token: lockToken, output })).body;
  }

  /**
   * Completes many tasks in one call (at most 100): each item `{id, lock_token, output}` →
   * one result per item in order, `{id, state}` or `{id, error}` with `error` an ApiError.
   *
   * An item may carry `take: {worker, topics, lock?}`: when the step its completion resumes
   * arms a task of one of `topics`, the server locks the first for `worker` (for `lock`, else
   * the task's own) in the same transaction, and the result carries it as `taken`, a task as
   * poll() answers one. Whoever asks must run it as a polled task (decision 0038).
   */
  async completeMany(items) {
    if (items.length > COMPLETE_BATCH_MAX) {
      throw new RangeError(`a batch completes at most ${COMPLETE_BATCH_MAX} tasks, not ${items.length}`);
    }
    const answer = await this.#post(["v1", "tasks", "complete"], items);
    const results = answer.body?.items;
    if (!Array.isArray(results) || results.length !== items.length || results.some((r, i) => r?.id !== items[i].id)) {
      throw new ApiError(`unexpected answer from ${answer.url}: the results do not answer the items one by one`, {
        kind: "unexpected",
        status: answer.status,
        retryable: false,
        url: answer.url,
      });
    }
    return results.map((result) => {
      if (result.error) return { id: result.id, error: ApiError.fromProblem(result.error, { url: answer.url }) };
      return result.taken ? { id: result.id, state: result.state, taken: result.taken } : { id: result.id, state: result.state };
    });
  }

  /**
   * Fails a task → {id, state}: `retry: true` (a technical failure) makes it available again
   * after its backoff; `retry: false` is a business error the flow handles at once.
   */
  async fail(id, lockToken, { code, message = "" }, retry = true) {
    return (await this.#post(["v1", "tasks", id, "fail"], { lock_token: lockToken, error: { code, message }, retry })).body;
  }

  /** Extends a task's lock to `lock` from now → {id, lock_expires_at}. */
  async extend(id, lockToken, lock) {
    return (await this.#post(["v1", "tasks", id, "extend"], { lock_token: lockToken, lock: toIso(lock) })).body;
  }

  /** Hands a task back without spending its attempt → {id, state: "available"}. */
  async release(id, lockToken) {
    return (await this.#post(["v1", "tasks", id, "release"], { lock_token: lockToken })).body;
  }

  /** GET /readyz: resolves when the server is ready, throws an ApiError otherwise. */
  async ready() {
    return (await this.#call("GET", ["readyz"])).body;
  }

  #post(segments, json, options = {}) {
    return this.#call("POST", segments, {
      ...options,
      body: JSON.stringify(json),
      headers: { "content-type": "application/json" },
    });
  }

  async #call(method, segments, { body, headers = {}, query, signal, timeoutMs = this.timeoutMs } = {}) {
    const url = new URL(`${this.url}/${segments.map(encodeURIComponent).join("/")}`);
    for (const [name, value] of Object.entries(query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    const allHeaders = { accept: "application/json, application/problem+json", ...headers };
    if (this.token) allHeaders.authorization = `Bearer ${this.token}`;
    const timeout = AbortSignal.timeout(timeoutMs);
    const { signal: combined, dispose } = anySignal([timeout, signal]);
    let response;
    let text;
    try {
      response = await fetch(url, { method, headers: allHeaders, body, signal: combined });
      text = await response.text();
    } catch (error) {
      if (signal?.aborted) throw signal.reason ?? error;
      const reason = timeout.aborted ? `no answer within ${timeoutMs} ms` : describeFetchError(error);
      throw new ApiError(`${method} ${url.href}: ${reason}`, { kind: "transport", retryable: true, url: url.href, cause: error });
    } finally {
      dispose();
    }
    let parsed;
    let parseError = null;
    try {
      parsed = text === "" ? null : JSON.parse(text);
    } catch (error) {
      parseError = error;
    }
    if (!response.ok) {
      if (parseError === null && parsed && typeof parsed === "object" && typeof parsed.code === "string") {
        throw ApiError.fromProblem(parsed, { url: url.href, status: response.status });
      }
      throw new ApiError(`unexpected answer from ${url.href} (HTTP ${response.status}): ${text.slice(0, 200)}`, {
        kind: "unexpected",
        status: response.status,
        retryable: response.status >= 500,
        url: url.href,
      });
    }
    if (parseError !== null) {
      throw new ApiError(`unexpected answer from ${url.href} (HTTP ${response.status}): the body is not JSON`, {
        kind: "unexpected",
        status: response.status,
        retryable: false,
        url: url.href,
      });
    }
    return { status: response.status, headers: response.headers, body: parsed, url: url.href };
  }
}

function describeFetchError(error) {
  const cause = error?.cause;
  return cause?.code ? `${cause.code} ${cause.message ?? ""}`.trim() : String(error?.message ?? error);
}

/** A signal aborted when any of `signals` is; `dispose` detaches it. */
function anySignal(signals) {
  const controller = new AbortController();
  const present = signals.filter(Boolean);
  const listeners = [];
  for (const signal of present) {
    if (signal.aborted) {
      controller.abort(signal.reason);
      break;
    }
    const onAbort = () => controller.abort(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    listeners.push([signal, onAbort]);
  }
  return {
    signal: controller.signal,
    dispose: () => listeners.forEach(([signal, onAbort]) => signal.removeEventListener("abort", onAbort)),
  };
}

// ---------------------------------------------------------------------------------------------
// Worker helpers

/** Resolves after `ms`, or early (without throwing) when `signal` aborts. */
function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** Exponential backoff with jitter: each delay is between half and all of a doubling step. */
class Backoff {
  constructor(firstMs, maxMs) {
    this.first = firstMs;
    this.max = maxMs;
    this.next = firstMs;
  }
  delay() {
    const step = this.next;
    this.next = Math.min(step * 2, this.max);
    return step / 2 + (Math.random() * step) / 2;
  }
  reset() {
    this.next = this.first;
  }
}

/**
 * Sends completions in batches: a completion joins a queue; one call at a time carries
 * everything queued (up to 100), then the next takes what queued meanwhile. An idle worker's
 * completion leaves at once, alone.
 *
 * A completion may ask for the worker's next task (`take`, the same for all of a worker's
 * completions): when the step it resumes arms a task of the worker's topics, the server locks
 * it for this worker in the same transaction and answers it as the item's `taken`.
 */
class Completer {
  constructor(client, logger, take) {
    this.client = client;
    this.logger = logger;
    this.take = take;
    this.queue = [];
    this.sending = false;
  }

  /**
   * Resolves with `{state, taken}` (`taken` the task locked for this worker with the
   * completion, or null; asked for only with `takeNext`), or rejects with the item's (or the
   * call's) ApiError.
   */
  complete(id, lockToken, output, takeNext) {
    return new Promise((resolve, reject) => {
      const item = { id, lock_token: lockToken, output };
      if (takeNext) item.take = this.take;
      this.queue.push({ item, resolve, reject });
      if (!this.sending) this.#send();
    });
  }

  async #send() {
    this.sending = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, COMPLETE_BATCH_MAX);
        try {
          const results = await this.client.completeMany(batch.map((queued) => queued.item));
          results.forEach((result, i) =>
            result.error ? batch[i].reject(result.error) : batch[i].resolve({ state: result.state, taken: result.taken ?? null }),
          );
        } catch (error) {
          for (const queued of batch) queued.reject(error);
        }
      }
    } finally {
      this.sending = false;
    }
  }
}

const quiet = () => {};
/** The default logger: warnings to stderr, nothing else. */
export const defaultLogger = Object.freeze({
  debug: quiet,
  info: quiet,
  warn: (message, fields) => console.warn(`sutra-worker: ${message}`, ...(fields ? [fields] : [])),
});

// ---------------------------------------------------------------------------------------------
// Worker

/** Polls a server for tasks of the topics it has handlers for, and runs them. */
export class Worker {
  /**
   * @param {object} options
   * @param {string} [options.url] the server (default http://127.0.0.1:7480), unless `client`
   * @param {string} [options.token] a bearer token, unless `client`
   * @param {Client} [options.client] a client to use instead of `url` and `token`
   * @param {string} options.workerId shown as the lock holder in `sutra tasks list`
   * @param {number} [options.concurrency] handlers running at once (default 8)
   * @param {number|string} [options.lock] lock period per task, ms or ISO-8601 (default PT1M)
   * @param {number|string} [options.pollWait] long-poll wait (default PT20S; the server caps it at 60 s)
   * @param {number|string} [options.grace] how long handlers may finish after stop() (default PT10S)
   * @param {boolean} [options.handleSignals] run() stops the worker on SIGINT/SIGTERM (default false)
   * @param {{debug: Function, info: Function, warn: Function}} [options.logger]
   */
  constructor({
    url,
    token,
    client,
    workerId,
    concurrency = CONCURRENCY_DEFAULT,
    lock = LOCK_DEFAULT,
    pollWait = POLL_WAIT_DEFAULT,
    grace = GRACE_DEFAULT,
    handleSignals = false,
    logger = defaultLogger,
  } = {}) {
    if (typeof workerId !== "string" || workerId.trim() === "") {
      throw new TypeError("a Worker needs a `workerId`: the name it locks tasks under");
    }
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError("`concurrency` must be a whole number of at least 1");
    }
    this.client = client ?? new Client({ url, token });
    this.workerId = workerId;
    this.concurrency = concurrency;
    this.lockMs = toMillis(lock);
    if (this.lockMs <= 0) throw new RangeError("`lock` must be longer than zero");
    this.pollWaitMs = toMillis(pollWait);
    this.graceMs = toMillis(grace);
    this.handleSignals = handleSignals;
    this.logger = { ...defaultLogger, ...(logger ?? {}) };
    this.handlers = new Map();
    this.executions = new Set();
    this.stopping = null; // AbortController once run() starts
    this.running = null; // run()'s promise
    this.slotFreed = null; // resolves when an execution ends
  }

  /**
   * Runs `handler` for the tasks of `topic`. The handler gets `{id, topic, instance, attempt,
   * input, lockExpiresAt, signal}` and returns the task's output (any JSON value), or throws:
   * a TaskError as it says, anything else as a retryable WORKER.HANDLER.FAILED.
   */
  task(topic, handler) {
    if (typeof handler !== "function") throw new TypeError("a handler is a function");
    if (this.handlers.has(topic)) throw new Error(`topic \`${topic}\` has two handlers`);
    this.handlers.set(topic, handler);
    return this;
  }

  /** Polls and runs tasks until stop(); resolves once the worker has stopped. */
  run() {
    if (this.running) throw new Error("this worker is running already");
    if (this.handlers.size === 0) throw new Error("a worker needs at least one handler");
    this.stopping = new AbortController();
    this.running = this.#run();
    return this.running;
  }

  /**
   * Stops polling at once, lets running handlers finish within the grace period, then hands
   * the rest back. Resolves when run() has.
   */
  stop() {
    if (!this.running) return Promise.resolve();
    if (!this.stopping.signal.aborted) {
      this.logger.info("stopping", { worker: this.workerId, inFlight: this.executions.size });
      this.stopping.abort(new Error("the worker is stopping"));
    }
    return this.running;
  }

  async #run() {
    const topics = [...this.handlers.keys()].sort();
    const stopping = this.stopping.signal;
    // What a completion asks for: a task of this worker's topics, locked as its polls lock.
    const take = { worker: this.workerId, topics, lock: toIso(this.lockMs) };
    const completer = new Completer(this.client, this.logger, take);
    const backoff = new Backoff(POLL_BACKOFF_FIRST_MS, POLL_BACKOFF_MAX_MS);
    const abandon = new AbortController();
    // A first signal stops gracefully; a second, while stopping, takes its default action.
    const onSignal = (signal) => {
      if (!stopping.aborted) return void this.stop();
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      process.kill(process.pid, signal);
    };
    if (this.handleSignals) {
      process.on("SIGINT", onSignal);
      process.on("SIGTERM", onSignal);
    }
    this.logger.info("worker started", { worker: this.workerId, topics, concurrency: this.concurrency });
    const stopped = abortedPromise(stopping);
    try {
      while (!stopping.aborted) {
        const free = this.concurrency - this.executions.size;
        if (free <= 0) {
          await Promise.race([this.#nextSlot(), stopped]);
          continue;
        }
        let tasks;
        try {
          tasks = await this.client.poll(
            { worker: this.workerId, topics, max: free, lock: this.lockMs, wait: this.pollWaitMs },
            { signal: stopping },
          );
          backoff.reset();
        } catch (error) {
          if (stopping.aborted) break;
          const delay = backoff.delay();
          this.logger.warn(`poll failed; polling again in ${Math.round(delay)} ms: ${error.message}`);
          await sleep(delay, stopping);
          continue;
        }
        if (!Array.isArray(tasks)) {
          this.logger.warn("the poll did not answer an array of tasks; polling again");
          await sleep(backoff.delay(), stopping);
          continue;
        }
        const lockedAt = Date.now();
        if (tasks.length > free) this.logger.warn("the server sent more tasks than asked for; running them anyway");
        for (const task of tasks) this.#start(task, lockedAt, completer, abandon.signal);
      }
      await this.#drain(abandon);
    } finally {
      if (this.handleSignals) {
        process.off("SIGINT", onSignal);
        process.off("SIGTERM", onSignal);
      }
      this.running = null;
      this.logger.info("worker stopped", { worker: this.workerId });
    }
  }

  #nextSlot() {
    if (!this.slotFreed) {
      let resolve;
      this.slotFreed = new Promise((r) => (resolve = r));
      this.slotFreed.resolve = resolve;
    }
    return this.slotFreed;
  }

  /**
   * Runs a polled task, then each task the server locks for this worker with a completion, in
   * the same slot: `executions` holds one promise per slot taken, so the worker never runs more
   * than its concurrency, and the drain waits for the tasks handed over too.
   */
  #start(task, lockedAt, completer, abandoned) {
    const done = (async () => {
      let next = task;
      let at = lockedAt;
      while (next) {
        const execution = new Execution(this, next, at, completer);
        const current = next;
        next = await execution.run(this.handlers.get(next.topic), abandoned).catch((error) => {
          this.logger.warn(`task ${current.id}: ${error?.message ?? error}`);
          return null;
        });
        if (next && !isLockedTask(next)) {
          // Not a task as a poll answers one: nothing to run; whatever it locked lapses.
          this.logger.warn(`task ${current.id}: the completion was handed something that is not a task: ${safeString(next)}`);
          break;
        }
        // Its lock counted from the answer, as a polled task's is: the first extension comes at
        // half the lock, long before the server's slightly earlier start matters.
        at = Date.now();
      }
    })();
    this.executions.add(done);
    done.finally(() => {
      this.executions.delete(done);
      const freed = this.slotFreed;
      this.slotFreed = null;
      freed?.resolve();
    });
  }

  /** Lets executions finish within the grace period, then tells the rest to hand their tasks back. */
  async #drain(abandon) {
    if (this.executions.size === 0) return;
    this.logger.info(`stopping: letting ${this.executions.size} running task(s) finish`, { graceMs: this.graceMs });
    const graceOver = new AbortController();
    const timer = setTimeout(() => graceOver.abort(), this.graceMs);
    await Promise.race([Promise.allSettled([...this.executions]), abortedPromise(graceOver.signal)]);
    clearTimeout(timer);
    if (this.executions.size > 0) {
      this.logger.warn(`grace period over: handing ${this.executions.size} task(s) back`);
      abandon.abort(new Error("the worker stopped before the handler finished"));
      await Promise.allSettled([...this.executions]);
    }
  }
}

/** Resolves when `signal` aborts. Its listener stays until then: use it once per signal. */
function abortedPromise(signal) {
  return abortWatch(signal).promise;
}

/** A promise resolved when `signal` aborts, and `dispose` to stop listening before that. */
function abortWatch(signal) {
  let dispose = () => {};
  const promise = new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const onAbort = () => resolve();
    signal.addEventListener("abort", onAbort, { once: true });
    dispose = () => signal.removeEventListener("abort", onAbort);
  });
  return { promise, dispose };
}

/** One task, from lock to report. */
class Execution {
  constructor(worker, task, lockedAt, completer) {
    this.worker = worker;
    this.client = worker.client;
    this.logger = worker.logger;
    this.task = task;
    this.lockedAt = lockedAt;
    this.completer = completer;
    this.lockLost = false;
  }

  /**
   * Runs the handler and reports how it ended; resolves with the task the server locked for
   * this worker with the completion (to run next, in this slot), or null.
   */
  async run(handler, abandoned) {
    const task = this.task;
    if (abandoned.aborted) {
      // Handed over with a completion after the grace period ended: back at once, unrun.
      await this.#report({ kind: "release" });
      return null;
    }
    const controller = new AbortController();
    const finished = new AbortController();
    const keeper = this.#keepLock(finished.signal, controller);
    const view = Object.freeze({
      id: task.id,
      topic: task.topic,
      instance: task.instance,
      attempt: task.attempt,
      input: task.input,
      lockExpiresAt: task.lock_expires_at,
      signal: controller.signal,
    });
    const running = handler
      ? Promise.resolve().then(() => handler(view))
      : Promise.reject(TaskError.retry(`this worker has no handler for topic \`${task.topic}\``, codes.TOPIC_UNKNOWN));
    // One listener per task on the worker-wide `abandoned` signal, removed once the task ends.
    const abandonment = abortWatch(abandoned);
    let ending;
    try {
      ending = await Promise.race([
        running.then(
          (output) => ({ kind: "complete", output }),
          (error) => ({ kind: "fail", error }),
        ),
        abandonment.promise.then(() => ({ kind: "release" })),
      ]);
    } finally {
      abandonment.dispose();
      finished.abort();
    }
    if (ending.kind === "release") {
      controller.abort(abandoned.reason);
      // The handler cannot be killed; whatever it still does is ignored.
      running.catch(() => {});
    }
    // An extension still in flight is not waited for: a lock lost meanwhile shows in the report.
    keeper.catch(() => {});
    if (this.lockLost) {
      this.logger.info(`task ${task.id}: dropping the result: the lock was lost, so another worker may have the task`);
      return null;
    }
    return this.#report(this.#toReport(ending));
  }

  #toReport(ending) {
    if (ending.kind === "release") return { kind: "release" };
    if (ending.kind === "fail") {
      const error = ending.error;
      if (error instanceof TaskError) return { kind: "fail", error: { code: error.code, message: error.message }, retry: error.retry };
      const message = error instanceof Error ? `${error.name}: ${error.message}` : `the handler threw ${safeString(error)}`;
      this.logger.warn(`task ${this.task.id}: the handler failed; the task is retried: ${message}`);
      return { kind: "fail", error: { code: codes.HANDLER_FAILED, message }, retry: true };
    }
    const output = ending.output === undefined ? null : ending.output;
    try {
      const json = JSON.stringify(output);
      return { kind: "complete", output: json === undefined ? null : JSON.parse(json) };
    } catch (error) {
      return { kind: "fail", error: { code: codes.OUTPUT_INVALID, message: `the handler's output is not JSON: ${error.message}` }, retry: true };
    }
  }

  /** Extends the lock while the handler runs; on LOCK_LOST marks it lost and aborts the handler's signal. */
  async #keepLock(finished, handlerController) {
    const lockMs = this.worker.lockMs;
    let expires = this.lockedAt + lockMs;
    while (!finished.aborted) {
      const remaining = Math.max(0, expires - Date.now());
      await sleep(Math.max(remaining / 2, lockMs / 8), finished);
      if (finished.aborted) return;
      const sent = Date.now();
      try {
        await this.client.extend(this.task.id, this.task.lock_token, lockMs);
        expires = sent + lockMs;
        this.logger.debug(`task ${this.task.id}: lock extended`);
      } catch (error) {
        if (error?.code === TASK_LOCK_LOST) {
          this.logger.warn(`task ${this.task.id}: the lock was lost while the handler ran; its result will be dropped`);
          this.lockLost = true;
          handlerController.abort(error);
          return;
        }
        this.logger.warn(`task ${this.task.id}: could not extend the lock; trying again: ${error?.message ?? error}`);
      }
    }
  }

  /**
   * Tells the server how the task ended, retrying briefly while the server is away; resolves
   * with the task the server locked for this worker with a completion, or null.
   */
  async #report(report) {
    const backoff = new Backoff(REPORT_BACKOFF_FIRST_MS, REPORT_BACKOFF_MAX_MS);
    const what = describeReport(report);
    for (let attempt = 1; attempt <= REPORT_ATTEMPTS_MAX; attempt++) {
      try {
        const { state, taken } = await this.#send(report);
        this.logger.debug(`task ${this.task.id}: ${what}: ${state}${taken ? `; handed task ${taken.id}` : ""}`);
        return taken;
      } catch (error) {
        if (error?.code === TASK_LOCK_LOST) {
          this.logger.warn(`task ${this.task.id}: ${what} refused: the lock was lost; the result is dropped`);
          return null;
        }
        if (!(error instanceof ApiError) || !error.retryable || attempt === REPORT_ATTEMPTS_MAX) {
          this.logger.warn(`task ${this.task.id}: ${what} failed; the task runs again once its lock expires: ${error?.message ?? error}`);
          return null;
        }
        await sleep(backoff.delay());
      }
    }
    return null;
  }

  /** Sends the report → {state, taken}; only a completion can be handed a task. */
  async #send(report) {
    const { id, lock_token: token } = this.task;
    switch (report.kind) {
      case "complete":
        // A stopping worker asks for no next task: its drain must come to an end.
        return this.completer.complete(id, token, report.output, !this.worker.stopping.signal.aborted);
      case "fail":
        return { state: (await this.client.fail(id, token, report.error, report.retry)).state, taken: null };
      case "release":
        return { state: (await this.client.release(id, token)).state, taken: null };
    }
  }
}

function describeReport(report) {
  switch (report.kind) {
    case "complete":
      return "completing the task";
    case "release":
      return "handing the task back";
    default:
      return report.retry
        ? `failing the task for a retry (${report.error.code})`
        : `failing the task with a business error (${report.error.code})`;
  }
}

/** Whether `value` is a task as a poll answers one, as far as running it needs. */
function isLockedTask(value) {
  return typeof value === "object" && value !== null && typeof value.id === "string" && typeof value.topic === "string" && typeof value.lock_token === "string";
}

function safeString(value) {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
