"""`Worker`: runs handlers for a server's external tasks (docs/spec.md §5.5).

The behaviour mirrors the Rust worker (crates/sutra-client/src/worker.rs):

* one loop polls for exactly as many tasks as there are free slots (long-polling with `wait`),
  so the worker never holds a lock on a task it has no capacity to start;
* each task runs on its own — a sync handler on a thread of the worker's pool, an `async def`
  handler on the worker's event loop — and keeps its slot until its result is reported;
* while a handler runs its lock is extended at about half the remaining period; a lock the
  server says is lost (`SUTRA.TASK.LOCK.LOST`) drops the handler's result;
* completions are sent in batches (`POST /v1/tasks/complete`): one call in flight, carrying
  whatever queued up meanwhile; failures, extensions and hand-backs go alone;
* a completion asks for the worker's next task (`take`): a task the server locks for the worker
  with it runs at once in the slot the completion held, so a flow's next task needs no poll
  (docs/decisions/0038-eager-dispatch.md); a stopping worker asks for nothing, so that its
  drain cannot be fed forever, and hands a task that still comes back unrun once the grace
  period is over;
* poll failures are logged and retried with jittered exponential backoff, never ending the loop;
* shutdown (`stop()`, SIGINT or SIGTERM) stops polling at once, aborting a long poll in flight,
  lets running handlers finish within a grace period, then hands what still runs back to the
  server (`POST /v1/tasks/{id}/release`) without spending its attempt.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import inspect
import itertools
import json
import logging
import os
import queue
import random
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, TypeVar, Union

from ._http import ApiError, iso8601, shutdown
from .client import COMPLETE_BATCH_MAX, Client

log = logging.getLogger("sutra.worker")

CONCURRENCY_DEFAULT = 8
LOCK_DEFAULT = 60.0
POLL_WAIT_DEFAULT = 20.0
#: Shorter than the usual 30 s an orchestrator allows between SIGTERM and SIGKILL, so that the
#: hand-back still happens before the process is killed.
GRACE_DEFAULT = 10.0
POLL_BACKOFF_FIRST = 0.25
POLL_BACKOFF_MAX = 30.0
#: How often a report is tried while the server is away: briefly, as the lock runs out
#: meanwhile and the task is redone after it anyway.
REPORT_ATTEMPTS_MAX = 4
REPORT_BACKOFF_FIRST = 0.25
REPORT_BACKOFF_MAX = 2.0


class codes:
    """Codes a worker reports for failures it detects itself, rather than its handlers."""

    #: The handler's output is not JSON. Retried: a fixed worker can still take the task.
    OUTPUT_INVALID = "WORKER.OUTPUT.INVALID"
    #: The handler raised an exception other than `TaskError`. Retried.
    HANDLER_FAILED = "WORKER.HANDLER.FAILED"
    #: The server sent a task of a topic this worker has no handler for. Retried.
    TOPIC_UNKNOWN = "WORKER.TOPIC.UNKNOWN"


class TaskError(Exception):
    """Raised by a handler to fail its task with a `code` the flow's `on-error` routes on.

    By default a business error (insufficient funds, an unknown account): not retried, the
    flow takes the node's `on-error` path with `vars.error = {code, message}` at once (or fails
    without one). `retry=True` makes it a transient failure, retried with the node's backoff —
    as any other exception a handler raises is (with code `WORKER.HANDLER.FAILED`)."""

    def __init__(self, code: str, message: str = "", *, retry: bool = False) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retry = retry


@dataclass(frozen=True)
class Task:
    """A task locked for this worker, as its handler sees it."""

    id: str
    topic: str
    #: The instance waiting for this task.
    instance: str
    #: The task's input, as the flow's template made it (usually a dict).
    input: Any
    #: Which attempt this is, from 1.
    attempt: int
    lock_token: str
    lock_expires_at: str


Handler = Callable[[Task], Union[Any, Awaitable[Any]]]
H = TypeVar("H", bound=Handler)


class Worker:
    """Polls a server for tasks of the topics it has handlers for, and runs them.

    ```python
    worker = Worker("http://127.0.0.1:7480", worker_id="ledger-1", concurrency=8)

    @worker.task("debit-account")
    def debit(task):
        if task.input["amount"] > 1000:
            raise TaskError("FUNDS.INSUFFICIENT", "not enough money")
        return {"balance": 1000 - task.input["amount"]}

    worker.run()   # until worker.stop(), SIGINT or SIGTERM
    ```

    `lock` (seconds) is how long a task stays locked without word from this worker: the lock
    is extended while the handler runs, so it bounds how long a crashed worker's task waits for
    someone else, not how long a handler may take. `poll_wait` is how long one poll waits on the
    server for a task (the server caps it at 60 s); `grace` how long running handlers may take
    to finish once shutdown is asked for."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:7480",
        worker_id: Optional[str] = None,
        *,
        concurrency: int = CONCURRENCY_DEFAULT,
        token: Optional[str] = None,
        lock: float = LOCK_DEFAULT,
        poll_wait: float = POLL_WAIT_DEFAULT,
        grace: float = GRACE_DEFAULT,
        client: Optional[Client] = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("a worker needs room for at least one task")
        if lock <= 0:
            raise ValueError("a lock must last longer than zero")
        self.client = client if client is not None else Client(base_url, token)
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.concurrency = concurrency
        self.lock = float(lock)
        self.poll_wait = float(poll_wait)
        self.grace = float(grace)
        self._handlers: dict[str, Handler] = {}
        self._stopping = threading.Event()
        self._hurry = threading.Event()
        # Reentrant: stop() runs in a signal handler, maybe on the thread that holds it.
        self._poll_lock = threading.RLock()
        self._poll_conn: Any = None
        self._running = False
        # Set up by run().
        self._slots: _Slots
        self._executions: set[_Execution] = set()
        self._executions_changed = threading.Condition()
        # Set by the drain, under `_executions_changed`, once it hands the running tasks back.
        self._abandoning = False

    # Set-up.

    def task(self, topic: str) -> Callable[[H], H]:
        """Decorator: runs the function for the tasks of `topic`. It takes a `Task` and returns
        the task's output (anything JSON can hold); `async def` functions run on the worker's
        event loop, others on its thread pool."""

        def register(handler: H) -> H:
            self.handler(topic, handler)
            return handler

        return register

    def handler(self, topic: str, handler: Handler) -> "Worker":
        """Runs `handler` for the tasks of `topic` (the non-decorator form of `task`)."""
        if topic in self._handlers:
            raise ValueError(f"topic `{topic}` has two handlers")
        self._handlers[topic] = handler
        return self

    @property
    def topics(self) -> list[str]:
        return sorted(self._handlers)

    # Running.

    def stop(self, now: bool = False) -> None:
        """Asks the worker to stop, from any thread: polling stops at once, running handlers
        get the grace period (none with `now=True`), then their tasks are handed back."""
        self._stopping.set()
        if now:
            self._hurry.set()
        with self._poll_lock:
            if self._poll_conn is not None:
                shutdown(self._poll_conn)
        if self._running:
            self._slots.wake()
        with self._executions_changed:
            self._executions_changed.notify_all()

    def run(self) -> None:
        """Polls and runs tasks until `stop()` is called (from any thread) or, when called on
        the main thread, SIGINT or SIGTERM arrives; then stops gracefully and returns. A worker
        runs once: a stopped worker's `run()` returns at once."""
        if not self._handlers:
            raise RuntimeError("a worker needs at least one handler")
        if self._running:
            raise RuntimeError("the worker is running already")
        self._running = True
        self._slots = _Slots(self.concurrency)
        previous = self._install_signals()
        threads = _Pool("sutra-handler", self.concurrency)
        io = _Pool("sutra-io", self.concurrency + 2)
        loop = _Loop() if any(_is_async(h) for h in self._handlers.values()) else None
        # What a completion asks for: a task of this worker's topics, locked as a poll locks.
        take = {"worker": self.worker_id, "topics": self.topics, "lock": iso8601(self.lock)}
        completer = _Completer(self.client, take)
        keeper = _Keeper(self, io)
        runtime = _Runtime(self, threads, io, loop, completer, keeper)
        log.info(
            "worker %s started: topics %s, concurrency %d",
            self.worker_id,
            self.topics,
            self.concurrency,
        )
        try:
            self._poll_loop(runtime)
            self._drain()
        finally:
            completer.close()
            keeper.close()
            io.close()
            threads.close()
            if loop is not None:
                loop.close()
            self._restore_signals(previous)
            self._running = False
            log.info("worker %s stopped", self.worker_id)

    def _poll_loop(self, runtime: "_Runtime") -> None:
        backoff = _Backoff(POLL_BACKOFF_FIRST, POLL_BACKOFF_MAX)
        topics = self.topics
        while not self._stopping.is_set():
            free = self._slots.take_all(self._stopping)
            if free == 0:
                break
            try:
                polled = self.client.poll(
                    self.worker_id,
                    topics,
                    max=free,
                    lock=self.lock,
                    wait=self.poll_wait,
                    _registered=self._register_poll,
                )
            except ApiError as error:
                self._slots.give(free)
                if self._stopping.is_set():
                    break
                delay = backoff.delay()
                log.warning("poll failed (%s); polling again in %.2f s", error, delay)
                self._stopping.wait(delay)
                continue
            finally:
                with self._poll_lock:
                    self._poll_conn = None
            backoff.reset()
            locked_at = time.monotonic()
            if len(polled) > free:
                log.warning("the server sent more tasks than asked for; running them anyway")
            self._slots.give(free - len(polled))
            for raw in polled:
                execution = _Execution(runtime, raw, locked_at)
                if self._stopping.is_set():
                    # Stopped while the poll answered: hand the task straight back.
                    execution.start_released()
                else:
                    execution.start()

    def _register_poll(self, conn: Any) -> bool:
        with self._poll_lock:
            if self._stopping.is_set():
                return False
            self._poll_conn = conn
            return True

    def _drain(self) -> None:
        """Lets running executions finish within the grace period, then tells the rest to hand
        their tasks back, and waits until they have."""
        with self._executions_changed:
            if not self._executions:
                return
            log.info(
                "stopping: letting %d running task(s) finish (grace %.1f s)",
                len(self._executions),
                self.grace,
            )
            deadline = time.monotonic() + self.grace
            while self._executions and not self._hurry.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._executions_changed.wait(left)
            remaining = list(self._executions)
            self._abandoning = True
        if remaining:
            log.warning("grace period over: handing %d task(s) back", len(remaining))
            for execution in remaining:
                execution.abandon()
        with self._executions_changed:
            while self._executions:
                self._executions_changed.wait()

    def _install_signals(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return previous

        def on_signal(signum: int, frame: Any) -> None:
            # A second signal skips what is left of the grace period.
            self.stop(now=self._stopping.is_set())

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous[sig] = signal.signal(sig, on_signal)
            except (ValueError, OSError):
                pass
        return previous

    @staticmethod
    def _restore_signals(previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    # Bookkeeping for executions.

    def _started(self, execution: "_Execution") -> None:
        with self._executions_changed:
            self._executions.add(execution)

    def _finished(self, execution: "_Execution") -> None:
        with self._executions_changed:
            self._executions.discard(execution)
            self._executions_changed.notify_all()
        self._slots.give(1)

    def _handed_over(self, execution: "_Execution", taken: "_Execution") -> None:
        """`execution`'s completion was answered with `taken`, a task the server locked for
        this worker: it runs in the slot `execution` held, which is therefore not given back."""
        with self._executions_changed:
            # Decided under the lock the drain hands the running tasks back under: a task that
            # comes before runs, and the drain waits for it (a stopping worker's completions ask
            # for nothing, so few can come); one that comes after goes straight back, unrun.
            abandoning = self._abandoning
            self._executions.add(taken)
            self._executions.discard(execution)
            self._executions_changed.notify_all()
        if abandoning:
            taken.start_released()
        else:
            taken.start()


def _is_async(handler: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)
    )


@dataclass
class _Runtime:
    worker: Worker
    threads: "_Pool"
    io: "_Pool"
    loop: Optional["_Loop"]
    completer: "_Completer"
    keeper: "_Keeper"


class _Execution:
    """One task, from lock to report: run its handler, keep its lock meanwhile, and tell the
    server how it ended — exactly once, whether the handler finished or was abandoned."""

    def __init__(self, runtime: _Runtime, raw: dict[str, Any], locked_at: float) -> None:
        self.runtime = runtime
        self.worker = runtime.worker
        self.task = Task(
            id=raw["id"],
            topic=raw["topic"],
            instance=raw["instance"],
            input=raw.get("input"),
            attempt=int(raw.get("attempt", 1)),
            lock_token=raw["lock_token"],
            lock_expires_at=raw.get("lock_expires_at", ""),
        )
        self.lock = self.worker.lock
        self.expires = locked_at + self.lock
        self.lock_lost = False
        self.keeping = True
        self._ended = False
        self._guard = threading.Lock()
        self.future: Optional[concurrent.futures.Future[Any]] = None

    def __repr__(self) -> str:
        return f"<task {self.task.id} ({self.task.topic}, attempt {self.task.attempt})>"

    def start(self) -> None:
        self.worker._started(self)
        log.debug("running %r", self)
        handler = self.worker._handlers.get(self.task.topic)
        if handler is None:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_exception(
                TaskError(
                    codes.TOPIC_UNKNOWN,
                    f"this worker has no handler for topic `{self.task.topic}`",
                    retry=True,
                )
            )
        elif _is_async(handler):
            assert self.runtime.loop is not None
            future = self.runtime.loop.submit(handler, self.task)
        else:
            future = self.runtime.threads.run(handler, self.task)
        self.future = future
        self.runtime.keeper.add(self, self._next_extend())
        future.add_done_callback(self._on_done)

    def start_released(self) -> None:
        """The worker stopped as this task arrived: hand it back without running it."""
        self.worker._started(self)
        self._ended = True
        self.keeping = False
        self.runtime.io.submit(self._report, "release", None)

    def abandon(self) -> None:
        """The grace period is over: stop waiting for the handler and hand the task back. An
        async handler is cancelled; a sync one cannot be, and its result is ignored."""
        with self._guard:
            if self._ended:
                return
            self._ended = True
        self.keeping = False
        if self.future is not None:
            self.future.cancel()
        self.runtime.io.submit(self._report, "release", None)

    def _on_done(self, future: concurrent.futures.Future[Any]) -> None:
        with self._guard:
            if self._ended:
                return
            self._ended = True
        self.keeping = False
        if self.lock_lost:
            log.info("%r: dropping the result: the lock was lost, so another worker may have the task", self)
            self.worker._finished(self)
            return
        try:
            output = future.result()
        except TaskError as error:
            self.runtime.io.submit(self._report, "fail", error)
            return
        except BaseException as error:  # noqa: BLE001 - any handler failure is reported
            log.warning("%r: the handler raised %s: %s", self, type(error).__name__, error)
            failure = TaskError(
                codes.HANDLER_FAILED, f"{type(error).__name__}: {error}", retry=True
            )
            self.runtime.io.submit(self._report, "fail", failure)
            return
        try:
            json.dumps(output)
        except (TypeError, ValueError) as error:
            failure = TaskError(
                codes.OUTPUT_INVALID, f"the handler's output is not JSON: {error}", retry=True
            )
            self.runtime.io.submit(self._report, "fail", failure)
            return
        self.runtime.io.submit(self._report, "complete", output)

    def _next_extend(self) -> float:
        remaining = max(0.0, self.expires - time.monotonic())
        return time.monotonic() + max(remaining / 2, self.lock / 8)

    def extend(self) -> None:
        """Called by the keeper (on an io thread) when the lock is due for an extension."""
        if not self.keeping:
            return
        sent = time.monotonic()
        try:
            self.worker.client.extend(self.task.id, self.task.lock_token, self.lock)
        except ApiError as error:
            if error.lock_lost:
                log.warning("%r: the lock was lost while the handler ran; its result will be dropped", self)
                self.lock_lost = True
                return
            log.warning("%r: could not extend the lock (%s); trying again", self, error)
        else:
            self.expires = sent + self.lock
            log.debug("%r: lock extended", self)
        if self.keeping:
            self.runtime.keeper.add(self, self._next_extend())

    def _report(self, kind: str, payload: Any) -> None:
        """Tells the server how the task ended, retrying briefly while the server is away; a
        task the server locked for this worker with the completion then runs in this slot."""
        taken: Optional[dict[str, Any]] = None
        try:
            backoff = _Backoff(REPORT_BACKOFF_FIRST, REPORT_BACKOFF_MAX)
            describe = {
                "complete": "completing the task",
                "release": "handing the task back",
                "fail": f"failing the task ({payload})" if payload is not None else "",
            }[kind]
            for attempt in range(1, REPORT_ATTEMPTS_MAX + 1):
                try:
                    state, taken = self._send(kind, payload)
                    log.debug("%r: %s: %s", self, describe, state)
                    return
                except ApiError as error:
                    if error.lock_lost:
                        log.warning("%r: %s refused: the lock was lost; the result is dropped", self, describe)
                        return
                    if not error.retryable or attempt == REPORT_ATTEMPTS_MAX:
                        log.warning(
                            "%r: %s failed (%s); the task runs again once its lock expires",
                            self,
                            describe,
                            error,
                        )
                        return
                    log.debug("%r: %s failed (%s); trying again", self, describe, error)
                    time.sleep(backoff.delay())
        finally:
            next_execution = self._taken(taken) if taken is not None else None
            if next_execution is None:
                self.worker._finished(self)
            else:
                log.debug("%r: the completion was handed %r", self, next_execution)
                self.worker._handed_over(self, next_execution)

    def _taken(self, raw: Any) -> Optional["_Execution"]:
        """The execution of a task the server locked for this worker with the completion; None
        (the slot is freed, the lock left to lapse) if it is not a task as a poll answers one."""
        try:
            # Its lock counted from the answer, as a polled task's is: the first extension comes
            # at half the lock, long before the server's slightly earlier start matters.
            return _Execution(self.runtime, raw, time.monotonic())
        except (KeyError, TypeError, ValueError) as error:
            log.warning(
                "%r: the completion was handed something that is not a task (%s); its lock lapses",
                self,
                error,
            )
            return None

    def _send(self, kind: str, payload: Any) -> tuple[str, Optional[dict[str, Any]]]:
        """Sends the report; answers the task's state and, for a completion, the task the
        server locked for this worker with it, if any."""
        client, task = self.worker.client, self.task
        if kind == "complete":
            # A stopping worker asks for no next task: its drain must come to an end.
            take_next = not self.worker._stopping.is_set()
            completed = self.runtime.completer.complete(task.id, task.lock_token, payload, take_next)
            return completed.result()
        if kind == "fail":
            error: TaskError = payload
            answer = client.fail(task.id, task.lock_token, error.code, error.message, retry=error.retry)
            return str(answer.get("state")), None
        return str(client.release(task.id, task.lock_token).get("state")), None


class _Slots:
    """How many more tasks the worker may run: a counting semaphore whose free count can be
    taken whole."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._changed = threading.Condition()

    def take_all(self, stopping: threading.Event) -> int:
        """Waits for at least one free slot and takes every free one; 0 once stopping."""
        with self._changed:
            while self._free <= 0 and not stopping.is_set():
                self._changed.wait()
            if stopping.is_set():
                return 0
            taken, self._free = self._free, 0
            return taken

    def give(self, count: int) -> None:
        with self._changed:
            self._free += count
            self._changed.notify_all()

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()


class _Pool:
    """A fixed set of daemon threads: a handler still running when the worker gives up on it
    never keeps the process from exiting."""

    def __init__(self, name: str, size: int) -> None:
        self._jobs: "queue.SimpleQueue[Optional[Callable[[], None]]]" = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job()
            except BaseException:  # noqa: BLE001 - a pool thread must outlive any job
                log.exception("a worker job failed")

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        self._jobs.put(lambda: fn(*args))

    def run(self, fn: Callable[[Task], Any], task: Task) -> "concurrent.futures.Future[Any]":
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(task)
            except BaseException as error:  # noqa: BLE001 - reported as the task's failure
                if not future.cancelled():
                    future.set_exception(error)
            else:
                if not future.cancelled():
                    future.set_result(result)

        self._jobs.put(job)
        return future

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)


class _Loop:
    """An asyncio event loop on a daemon thread, for `async def` handlers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="sutra-asyncio", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, handler: Callable[[Task], Any], task: Task) -> "concurrent.futures.Future[Any]":
        async def call() -> Any:
            return await handler(task)

        return asyncio.run_coroutine_threadsafe(call(), self.loop)

    def close(self) -> None:
        def cancel_all() -> None:
            for pending in asyncio.all_tasks(self.loop):
                pending.cancel()
            self.loop.stop()

        self.loop.call_soon_threadsafe(cancel_all)
        self._thread.join(timeout=5)


_Completed = tuple[str, Optional[dict[str, Any]]]


class _Completer:
    """Sends completions in batches: one call in flight, carrying whatever queued up while the
    previous one was out. An idle worker's completion leaves at once, alone.

    A completion may ask for the worker's next task (`take`): when the step it resumes arms a
    task of the worker's topics, the server locks it for this worker in the same transaction
    and answers it as the item's `taken` (decision 0038)."""

    def __init__(self, client: Client, take: dict[str, Any]) -> None:
        self._client = client
        self._take = take
        self._queue: list[tuple[dict[str, Any], concurrent.futures.Future[_Completed]]] = []
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="sutra-completer", daemon=True)
        self._thread.start()

    def complete(
        self, task_id: str, lock_token: str, output: Any, take_next: bool
    ) -> "concurrent.futures.Future[_Completed]":
        """Queues a completion, asking for the worker's next task with `take_next`; the future
        answers the task's state and the task taken with it (or None), or raises the item's
        `ApiError` (or the whole call's)."""
        future: concurrent.futures.Future[_Completed] = concurrent.futures.Future()
        item: dict[str, Any] = {"id": task_id, "lock_token": lock_token, "output": output}
        if take_next:
            item["take"] = self._take
        with self._changed:
            self._queue.append((item, future))
            self._changed.notify()
        return future

    def _serve(self) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._closed:
                    self._changed.wait()
                if not self._queue:
                    return
                batch = self._queue[:COMPLETE_BATCH_MAX]
                del self._queue[:COMPLETE_BATCH_MAX]
            items = [item for item, _ in batch]
            try:
                results = self._client.complete_tasks(items)
            except ApiError as error:
                for _, future in batch:
                    future.set_exception(error)
                continue
            except BaseException as error:  # noqa: BLE001 - never leave a future unanswered
                for _, future in batch:
                    future.set_exception(error)
                continue
            log.debug("completed a batch of %d task(s)", len(batch))
            for (item, future), result in zip(batch, results):
                problem = result.get("error")
                if problem:
                    future.set_exception(ApiError.from_problem(self._client.base_url, 0, problem))
                else:
                    future.set_result((str(result.get("state", "")), result.get("taken") or None))

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join(timeout=REPORT_BACKOFF_MAX + 35)


class _Keeper:
    """Extends the locks of running tasks when they are due, on the io threads."""

    def __init__(self, worker: Worker, io: _Pool) -> None:
        self._io = io
        self._due: list[tuple[float, int, _Execution]] = []
        self._seq = itertools.count()
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="sutra-lock-keeper", daemon=True)
        self._thread.start()

    def add(self, execution: _Execution, due: float) -> None:
        with self._changed:
            heapq.heappush(self._due, (due, next(self._seq), execution))
            self._changed.notify()

    def _serve(self) -> None:
        with self._changed:
            while not self._closed:
                if not self._due:
                    self._changed.wait()
                    continue
                due, _, execution = self._due[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                heapq.heappop(self._due)
                if execution.keeping:
                    self._io.submit(execution.extend)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join(timeout=5)


class _Backoff:
    """Exponential backoff with jitter: each delay is between half and all of the current step,
    which doubles up to the maximum; jitter keeps a fleet of workers that lost the same server
    from coming back in lockstep."""

    def __init__(self, first: float, maximum: float) -> None:
        self._first = first
        self._max = maximum
        self._next = first

    def delay(self) -> float:
        step = self._next
        self._next = min(step * 2, self._max)
        return step / 2 + random.random() * step / 2

    def reset(self) -> None:
        self._next = self._first
