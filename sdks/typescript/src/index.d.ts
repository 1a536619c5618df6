// Type declarations for sutra-worker (src/index.js). Hand-written: the package is plain
// JavaScript so that it installs with no build step; test/types.ts checks these against use.

/** JSON, as task inputs, outputs and instance variables are. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Milliseconds, or an ISO-8601 duration such as "PT30S", "PT1M30S", "PT0.5S". */
export type Duration = number | string;

/** The code a server answers when a lock token is wrong or expired, or the task is done. */
export const TASK_LOCK_LOST: "SUTRA.TASK.LOCK.LOST";

/** Codes a worker reports for failures it detects itself rather than its handlers. */
export const codes: {
  /** Any error thrown by a handler other than a TaskError. Retried. */
  readonly HANDLER_FAILED: "WORKER.HANDLER.FAILED";
  /** The handler's output cannot be sent as JSON. Retried. */
  readonly OUTPUT_INVALID: "WORKER.OUTPUT.INVALID";
  /** The server sent a task of a topic this worker has no handler for. Retried. */
  readonly TOPIC_UNKNOWN: "WORKER.TOPIC.UNKNOWN";
};

/** The most completions one POST /v1/tasks/complete may carry. */
export const COMPLETE_BATCH_MAX: 100;

/** An application/problem+json body (docs/spec.md §4). */
export interface Problem {
  type?: string;
  title?: string;
  status?: number;
  code: string;
  detail?: string;
  retryable?: boolean;
  [extension: string]: unknown;
}

/**
 * A failed API call: the server refused it with a problem (`kind: "problem"`, with its stable
 * `code`), it got no answer (`"transport"`), or the answer was not what the API documents
 * (`"unexpected"`).
 */
export class ApiError extends Error {
  readonly name: "ApiError";
  readonly kind: "problem" | "transport" | "unexpected";
  /** The HTTP status, or null when there was no answer. */
  readonly status: number | null;
  /** The problem's stable code, such as "SUTRA.TASK.LOCK.LOST"; null unless `kind` is "problem". */
  readonly code: string | null;
  readonly title: string | null;
  readonly detail: string | null;
  /** Whether the same call may succeed if sent again unchanged (a transport failure is). */
  readonly retryable: boolean;
  readonly problem: Problem | null;
  readonly url: string | null;
  static fromProblem(problem: Problem, options?: { url?: string | null; status?: number | null }): ApiError;
}

/**
 * Why a handler did not produce an output. By default a business error: not retried, the flow
 * takes the node's `on-error` path with `vars.error = {code, message}` (or fails without one).
 * With `{ retry: true }` a transient failure, retried with the node's backoff.
 */
export class TaskError extends Error {
  constructor(code: string, message?: string, options?: { retry?: boolean });
  readonly name: "TaskError";
  readonly code: string;
  readonly retry: boolean;
  /** A transient failure (default code WORKER.HANDLER.FAILED): the task is retried. */
  static retry(message: string, code?: string): TaskError;
  /** A business error: not retried. */
  static business(code: string, message: string): TaskError;
}

/** Milliseconds for a number of milliseconds or an ISO-8601 duration. */
export function toMillis(duration: Duration): number;
/** An ISO-8601 duration for a number of milliseconds, or the string unchanged. */
export function toIso(duration: Duration): string;

export interface ClientOptions {
  /** Default http://127.0.0.1:7480. */
  url?: string;
  /** Sent as `Authorization: Bearer …` when the server has tokens configured. */
  token?: string;
  /** Bounds each call (default 30 s); a poll gets its `wait` on top. */
  timeout?: Duration;
}

export interface Deployment {
  name: string;
  version: number;
  status: string;
  [field: string]: unknown;
}

/** A CloudEvent to send; `specversion` defaults to "1.0", `source` to "sutra-worker". */
export interface CloudEventInput {
  id: string;
  type: string;
  source?: string;
  specversion?: string;
  data?: Json;
  [attribute: string]: unknown;
}

/** The intake's answer, or for an `ack: complete` channel that replied, `{instance, reply}`. */
export type SendAnswer =
  | { instance: string; status: string; dedup: boolean; [field: string]: unknown }
  | { instance: string | null; reply: Json };

export interface Instance {
  id: string;
  tenant: string;
  flow: string;
  deployment: string;
  version: number;
  status: "running" | "suspended" | "completed" | "cancelled" | "failed";
  vars: { [name: string]: Json };
  tokens: { id: string; node: string; park: unknown }[];
  failure: { code: string; detail: string } | null;
  created_at: string;
  updated_at: string;
  [field: string]: unknown;
}

export interface HistoryEvent {
  seq: number;
  at: string;
  kind: string;
  node: string | null;
  token: string | null;
  detail: unknown;
  [field: string]: unknown;
}

export interface Page<T> {
  items: T[];
  next: string | null;
}

export interface TaskSummary {
  id: string;
  topic: string;
  instance: string;
  state: "available" | "locked" | "completed" | "failed" | "terminal" | "cancelled";
  attempt: number;
  retries: number;
  worker: string | null;
  lock_expires_at: string | null;
  created_at: string;
  [field: string]: unknown;
}

export interface PollRequest {
  worker: string;
  topics: string[];
  /** Default 1. */
  max?: number;
  /** How long each task stays locked; the task node's own lock when left out. */
  lock?: Duration;
  /** How long the server may hold the poll waiting for a task (it caps this at 60 s). */
  wait?: Duration;
}

/** A task locked for the polling worker, as POST /v1/tasks/poll answers it. */
export interface LockedTask {
  id: string;
  topic: string;
  instance: string;
  input: Json;
  /** Which attempt this is, from 1. */
  attempt: number;
  lock_token: string;
  lock_expires_at: string;
  [field: string]: unknown;
}

export interface TaskState {
  id: string;
  /** "completed", or after a fail "available", "failed" or "terminal"; after a release "available". */
  state: string;
  [field: string]: unknown;
}

/**
 * What a completion asks for besides (decision 0038): when the step it resumes arms a task of
 * one of `topics`, the server locks the first for `worker` in the same transaction and answers
 * it as the result's `taken`. Whoever asks must run that task as a polled one.
 */
export interface Take {
  worker: string;
  topics: string[];
  /** How long the taken task stays locked (ISO-8601); the task node's own lock when left out. */
  lock?: string;
}

export interface CompleteItem {
  id: string;
  lock_token: string;
  output: Json;
  /** Ask for the task the completion's step arms, locked for this worker. */
  take?: Take;
}

export type CompleteResult =
  | {
      id: string;
      state: string;
      /** The task locked for the asking worker with this completion; absent when none was. */
      taken?: LockedTask;
      error?: undefined;
    }
  | { id: string; error: ApiError; state?: undefined; taken?: undefined };

/** The HTTP API of a Sutra server. Every method rejects with an ApiError. */
export class Client {
  constructor(options?: ClientOptions);
  readonly url: string;
  readonly token: string | undefined;
  deploy(yaml: string, options?: { file?: string }): Promise<Deployment>;
  send(channel: string, event: CloudEventInput): Promise<SendAnswer>;
  instance(id: string): Promise<Instance>;
  history(id: string): Promise<HistoryEvent[]>;
  tasks(query?: { topic?: string; state?: TaskSummary["state"]; limit?: number; after?: string }): Promise<Page<TaskSummary>>;
  poll(request: PollRequest, options?: { signal?: AbortSignal }): Promise<LockedTask[]>;
  complete(id: string, lockToken: string, output?: Json): Promise<TaskState>;
  /** At most 100 items; one result per item, in order, with `taken` when an item's `take` got a task. */
  completeMany(items: CompleteItem[]): Promise<CompleteResult[]>;
  fail(id: string, lockToken: string, error: { code: string; message?: string }, retry?: boolean): Promise<TaskState>;
  extend(id: string, lockToken: string, lock: Duration): Promise<{ id: string; lock_expires_at: string }>;
  release(id: string, lockToken: string): Promise<TaskState>;
  ready(): Promise<unknown>;
}

/** What a handler is given. */
export interface Task<I = Json> {
  readonly id: string;
  readonly topic: string;
  /** The instance waiting for this task. */
  readonly instance: string;
  /** Which attempt this is, from 1. */
  readonly attempt: number;
  readonly input: I;
  /** When the lock taken at the poll expires (the worker extends it while the handler runs). */
  readonly lockExpiresAt: string;
  /**
   * Aborted when the handler should give up: the worker stopped and the grace period is over
   * (the task is handed back), or the lock was lost (the result will be dropped).
   */
  readonly signal: AbortSignal;
}

/**
 * Returns the task's output (any JSON value; undefined is sent as null), or throws: a TaskError
 * as it says, anything else as a retryable WORKER.HANDLER.FAILED.
 */
export type Handler<I = any> = (task: Task<I>) => unknown | Promise<unknown>;

export interface Logger {
  debug(message: string, fields?: object): void;
  info(message: string, fields?: object): void;
  warn(message: string, fields?: object): void;
}

/** Warnings to stderr, nothing else. */
export const defaultLogger: Logger;

export interface WorkerOptions {
  /** The server (default http://127.0.0.1:7480), unless `client` is given. */
  url?: string;
  /** A bearer token, unless `client` is given. */
  token?: string;
  /** A client to use instead of `url` and `token`. */
  client?: Client;
  /** Shown as the lock holder in `sutra tasks list`. */
  workerId: string;
  /** How many handlers may run at once (default 8). */
  concurrency?: number;
  /**
   * How long a task stays locked without word from this worker (default PT1M). The lock is
   * extended while a handler runs, so this bounds how long a crashed worker's task waits for
   * another worker, not how long a handler may take.
   */
  lock?: Duration;
  /** How long one poll waits on the server for a task (default PT20S; the server caps it at 60 s). */
  pollWait?: Duration;
  /** How long running handlers may take to finish after stop() (default PT10S). */
  grace?: Duration;
  /** run() installs SIGINT and SIGTERM handlers: the first calls stop(), a second while stopping ends the process as usual (default false). */
  handleSignals?: boolean;
  /** Partial loggers are completed with the default's methods. */
  logger?: Partial<Logger>;
}

/**
 * Polls a server for tasks of the topics it has handlers for, and runs them. Each completion
 * asks for the worker's next task (unless it is stopping), and a task the server hands over
 * with it runs at once in the same slot, with no poll (decision 0038).
 */
export class Worker {
  constructor(options: WorkerOptions);
  readonly client: Client;
  readonly workerId: string;
  readonly concurrency: number;
  /** Runs `handler` for the tasks of `topic`; throws if the topic has a handler already. */
  task<I = any>(topic: string, handler: Handler<I>): this;
  /** Polls and runs tasks until stop(); resolves once the worker has stopped. */
  run(): Promise<void>;
  /**
   * Stops polling at once, lets running handlers finish within the grace period, then hands the
   * rest back (POST /v1/tasks/{id}/release, which spends no attempt). Resolves when run() has.
   */
  stop(): Promise<void>;
}
