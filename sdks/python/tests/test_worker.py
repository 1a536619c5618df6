"""The worker against a real `sutra serve`: completions, business errors, retries, lock
extension, a killed worker, graceful hand-back, async handlers, the next task taken with a
completion."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import threading
import time
from datetime import datetime, timezone

import pytest

from sutra import ApiError, Client, TaskError, Worker

from .conftest import HERE, child_process, wait_for


def make_worker(server, worker_id, **options) -> Worker:
    options.setdefault("poll_wait", 1.0)
    return Worker(server.url, worker_id=worker_id, **options)


def test_tasks_are_completed_with_the_handlers_output(server, flow, run_worker):
    f = flow()
    worker = make_worker(server, "py-complete", concurrency=4)
    seen = []

    @worker.task(f.topic)
    def handle(task):
        seen.append((task.topic, task.instance, task.attempt))
        return {"doubled": task.input["n"] * 2}

    running = run_worker(worker)
    instances = [f.start({"n": n}) for n in range(10)]
    for n, instance in enumerate(instances):
        snapshot = f.wait_status(instance)
        assert snapshot["vars"]["result"] == {"doubled": n * 2}
    assert sorted(i for _, i, _ in seen) == sorted(instances)
    assert all(attempt == 1 and topic == f.topic for topic, _, attempt in seen)
    running.stop()


def test_a_business_error_takes_the_on_error_path_without_a_retry(server, flow, run_worker):
    f = flow()
    worker = make_worker(server, "py-business")
    calls = []

    @worker.task(f.topic)
    def reserve(task):
        calls.append(task.attempt)
        raise TaskError("OUT_OF_STOCK", "no stock for item 3")

    running = run_worker(worker)
    instance = f.start({"item": 3})
    snapshot = f.wait_status(instance)
    assert snapshot["vars"]["handled"] == {"code": "OUT_OF_STOCK", "message": "no stock for item 3"}
    assert "result" not in snapshot["vars"]
    assert calls == [1]
    running.stop()


def test_an_exception_is_retried_with_backoff_on_the_next_attempt(server, flow, run_worker):
    f = flow()
    worker = make_worker(server, "py-retry")
    attempts = []

    @worker.task(f.topic)
    def flaky(task):
        attempts.append((task.attempt, time.monotonic()))
        if task.attempt == 1:
            raise ConnectionError("the stock service timed out")
        return {"attempt": task.attempt}

    running = run_worker(worker)
    instance = f.start({})
    snapshot = f.wait_status(instance)
    assert snapshot["vars"]["result"] == {"attempt": 2}
    assert [a for a, _ in attempts] == [1, 2]
    # The flow's backoff is PT1S: the retry waited for it.
    assert attempts[1][1] - attempts[0][1] >= 0.9
    running.stop()


def test_a_handler_slower_than_its_lock_keeps_it_by_extending(server, flow, run_worker):
    f = flow(lock="PT1S")
    worker = make_worker(server, "py-slow", lock=1.0)
    attempts = []

    @worker.task(f.topic)
    def slow(task):
        attempts.append(task.attempt)
        time.sleep(2.5)
        return {"slow": True}

    # A second worker polls the same topic all along: had the lock lapsed, it would take the task.
    rival = make_worker(server, "py-rival", lock=1.0)
    stolen = []
    rival.handler(f.topic, lambda task: stolen.append(task.id))
    running = run_worker(worker)
    instance = f.start({})
    wait_for(lambda: attempts, what="the slow handler to start")
    rivalling = run_worker(rival)
    snapshot = f.wait_status(instance, timeout=10)
    assert snapshot["vars"]["result"] == {"slow": True}
    assert attempts == [1]
    assert stolen == []
    running.stop()
    rivalling.stop()


def test_a_killed_workers_task_is_taken_by_another_once_its_lock_lapses(server, flow, run_worker, tmp_path):
    f = flow(lock="PT1S")
    started = tmp_path / "started"
    script = HERE / "stuck_worker.py"
    with child_process([sys.executable, str(script), server.url, f.topic, str(started)]) as child:
        instance = f.start({"item": 7})
        wait_for(started.exists, timeout=15, what="the child worker's handler to start")
        assert started.read_text() == "1"
        time.sleep(1.5)  # past its one-second lock: the child has been extending it
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    killed_at = time.monotonic()
    assert f.client.instance(instance)["status"] == "suspended"

    successor = make_worker(server, "py-after-kill", lock=1.0)
    attempts = []

    @successor.task(f.topic)
    def finish(task):
        attempts.append(task.attempt)
        return {"item": task.input["item"], "by": "successor"}

    running = run_worker(successor)
    snapshot = f.wait_status(instance, timeout=15)
    assert snapshot["vars"]["result"] == {"item": 7, "by": "successor"}
    assert attempts and attempts[0] >= 2, attempts
    assert time.monotonic() - killed_at < 10
    running.stop()


def test_graceful_stop_hands_the_task_back_without_spending_its_attempt(server, flow, run_worker):
    f = flow(lock="PT1M")
    release_handler = threading.Event()
    first_attempts = []
    worker = make_worker(server, "py-stopping", lock=60.0, grace=0.5)

    @worker.task(f.topic)
    def stuck(task):
        first_attempts.append(task.attempt)
        release_handler.wait(30)
        return {"by": "first"}

    running = run_worker(worker)
    instance = f.start({})
    wait_for(lambda: first_attempts, what="the first handler to start")
    took = running.stop()
    assert took < 5, f"stopping took {took:.1f} s"

    second = make_worker(server, "py-successor", lock=60.0)
    second_attempts = []

    @second.task(f.topic)
    def finish(task):
        second_attempts.append(task.attempt)
        return {"by": "second"}

    began = time.monotonic()
    successor = run_worker(second)
    snapshot = f.wait_status(instance, timeout=10)
    # Taken at once, not after the one-minute lock, and on the same attempt.
    assert time.monotonic() - began < 5
    assert snapshot["vars"]["result"] == {"by": "second"}
    assert first_attempts == [1] and second_attempts == [1]
    release_handler.set()
    successor.stop()


def test_sigterm_stops_a_worker_process_which_hands_its_task_back(server, flow, run_worker, tmp_path):
    f = flow(lock="PT1M")
    started = tmp_path / "started"
    script = HERE / "stuck_worker.py"
    with child_process([sys.executable, str(script), server.url, f.topic, str(started), "0.5"]) as child:
        instance = f.start({})
        wait_for(started.exists, timeout=15, what="the child worker's handler to start")
        os.kill(child.pid, signal.SIGTERM)
        out, _ = child.communicate(timeout=10)
        assert child.returncode == 0 and "stopped" in out
    successor = make_worker(server, "py-after-sigterm")
    attempts = []

    @successor.task(f.topic)
    def finish(task):
        attempts.append(task.attempt)
        return {"done": True}

    began = time.monotonic()
    running = run_worker(successor)
    f.wait_status(instance, timeout=10)
    assert time.monotonic() - began < 5
    assert attempts == [1]
    running.stop()


class CountingClient(Client):
    def __init__(self, url):
        super().__init__(url)
        self.batches = []
        self.single = 0

    def complete_tasks(self, items):
        self.batches.append(len(items))
        return super().complete_tasks(items)

    def complete(self, *args, **kwargs):
        self.single += 1
        return super().complete(*args, **kwargs)


def test_completions_are_sent_in_batches(server, flow, run_worker):
    f = flow()
    spy = CountingClient(server.url)
    worker = Worker(client=spy, worker_id="py-batches", concurrency=8, poll_wait=1.0)
    gate = threading.Barrier(8, timeout=10)

    @worker.task(f.topic)
    def together(task):
        # All eight finish at the same moment, so their completions queue up together.
        gate.wait()
        return {"n": task.input["n"]}

    instances = [f.start({"n": n}) for n in range(8)]
    running = run_worker(worker)
    for n, instance in enumerate(instances):
        assert f.wait_status(instance)["vars"]["result"] == {"n": n}
    assert sum(spy.batches) == 8 and spy.single == 0
    assert max(spy.batches) > 1, spy.batches
    running.stop()


def test_async_handlers_run_concurrently_within_the_bound(server, flow, run_worker):
    f = flow()
    worker = make_worker(server, "py-async", concurrency=3)
    active = 0
    peak = 0

    @worker.task(f.topic)
    async def handle(task):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.3)
        active -= 1
        return {"n": task.input["n"], "async": True}

    running = run_worker(worker)
    began = time.monotonic()
    instances = [f.start({"n": n}) for n in range(6)]
    for n, instance in enumerate(instances):
        assert f.wait_status(instance)["vars"]["result"] == {"n": n, "async": True}
    elapsed = time.monotonic() - began
    assert peak == 3, peak
    assert elapsed < 6 * 0.3, f"the handlers ran one at a time ({elapsed:.2f} s)"
    running.stop()


def test_an_async_handler_can_raise_a_business_error(server, flow, run_worker):
    f = flow()
    worker = make_worker(server, "py-async-error")

    @worker.task(f.topic)
    async def handle(task):
        await asyncio.sleep(0)
        raise TaskError("CARD.DECLINED", "declined")

    running = run_worker(worker)
    instance = f.start({})
    snapshot = f.wait_status(instance)
    assert snapshot["vars"]["handled"]["code"] == "CARD.DECLINED"
    running.stop()


def test_a_worker_whose_server_is_away_keeps_polling_and_stops_when_asked(run_worker):
    worker = Worker("http://127.0.0.1:9", worker_id="py-away", poll_wait=1.0)
    worker.handler("anything", lambda task: None)
    running = run_worker(worker)
    time.sleep(1.0)
    assert running.thread.is_alive()
    assert running.stop() < 2


def test_a_long_poll_in_flight_is_aborted_by_stop(server, run_worker):
    worker = Worker(server.url, worker_id="py-idle", poll_wait=30.0)
    worker.handler("py-nothing-ever", lambda task: None)
    running = run_worker(worker)
    time.sleep(0.5)
    assert running.stop() < 2


def test_api_errors_carry_the_problems_code_status_and_advice(client):
    with pytest.raises(ApiError) as raised:
        client.deploy("name: [not a flow")
    assert raised.value.code == "SUTRA.DEPLOY.INVALID"
    assert raised.value.status == 400
    assert raised.value.retryable is False
    with pytest.raises(ApiError) as raised:
        client.extend("no-such-task", "no-token", 1.0)
    assert raised.value.status in (404, 409)


def test_a_server_with_tokens_wants_the_bearer_token(secured_server, run_worker):
    from .conftest import SECRET, Flow

    anonymous = Client(secured_server.url)
    with pytest.raises(ApiError) as raised:
        anonymous.instance("anything")
    assert raised.value.status == 401 and raised.value.code
    f = Flow(Client(secured_server.url, token=SECRET), lock="PT1M")
    worker = Worker(secured_server.url, worker_id="py-token", token=SECRET, poll_wait=1.0)
    worker.handler(f.topic, lambda task: {"authorized": True})
    running = run_worker(worker)
    instance = f.start({})
    assert f.wait_status(instance)["vars"]["result"] == {"authorized": True}
    running.stop()


class LockLosingClient(Client):
    """Answers every extend of the first attempt's lock as the server does once another worker
    may hold the task; records the lock tokens it completes."""

    def __init__(self, url):
        super().__init__(url)
        self.first_token = None
        self.completed_tokens = []

    def extend(self, task_id, lock_token, lock):
        if lock_token == self.first_token:
            raise ApiError("lost", url=self.base_url, status=409, code="SUTRA.TASK.LOCK.LOST")
        return super().extend(task_id, lock_token, lock)

    def complete_tasks(self, items):
        self.completed_tokens += [item["lock_token"] for item in items]
        return super().complete_tasks(items)


def test_a_lost_lock_drops_the_handlers_result(server, flow, run_worker):
    f = flow(lock="PT1S")
    spy = LockLosingClient(server.url)
    worker = Worker(client=spy, worker_id="py-lock-lost", lock=1.0, poll_wait=1.0)
    attempts = []

    @worker.task(f.topic)
    def handle(task):
        attempts.append(task.attempt)
        if task.attempt == 1:
            spy.first_token = task.lock_token
            time.sleep(1.5)  # the extend at ~0.5 s answers LOCK.LOST
        return {"attempt": task.attempt}

    running = run_worker(worker)
    instance = f.start({})
    snapshot = f.wait_status(instance, timeout=15)
    # The first attempt's result was dropped; the task ran again once its lock lapsed.
    assert snapshot["vars"]["result"]["attempt"] >= 2
    assert spy.first_token not in spy.completed_tokens
    assert attempts[0] == 1 and len(attempts) >= 2
    running.stop()


# Two tasks in sequence: the second is armed by the step the first one's completion resumes.
TWO_TASKS = """
name: {name}
channels:
  {name}-in:
    transport: http
flows:
  main:
    start: {{ channel: {name}-in }}
    nodes:
      - id: first
        task: {{ topic: {topic}, input: "= vars.input", lock: {lock} }}
        output: first
      - id: second
        task: {{ topic: {topic}-next, input: "= vars.first", lock: {lock} }}
        output: second
      - id: done
        end: {{}}
"""


class TakeRecordingClient(Client):
    """Records the ids of the tasks polls answer and of those completions were handed."""

    def __init__(self, url):
        super().__init__(url)
        self.polled = []
        self.taken = []
        self.takes = []

    def poll(self, *args, **kwargs):
        answer = super().poll(*args, **kwargs)
        self.polled += [task["id"] for task in answer]
        return answer

    def complete_tasks(self, items):
        self.takes += [item.get("take") for item in items]
        results = super().complete_tasks(items)
        self.taken += [result["taken"]["id"] for result in results if result.get("taken")]
        return results


def test_a_completion_takes_the_next_task_of_its_flow_without_a_poll(server, client, flow, run_worker):
    # By hand: a completion asking to take is answered with the second task, locked for the
    # asking worker with the lock it asked for, as a poll would have answered it.
    f = flow(template=TWO_TASKS)
    second = f"{f.topic}-next"
    instance = f.start({"n": 1})
    [first] = client.poll("py-taker", [f.topic], max=1, lock=60.0, wait=5.0)
    take = {"worker": "py-taker", "topics": [f.topic, second], "lock": "PT42S"}
    [result] = client.complete_tasks(
        [{"id": first["id"], "lock_token": first["lock_token"], "output": {"n": 2}, "take": take}]
    )
    assert result["state"] == "completed"
    taken = result["taken"]
    assert taken["topic"] == second and taken["instance"] == instance
    assert taken["input"] == {"n": 2} and taken["attempt"] == 1
    assert taken["lock_token"]
    # Whole seconds: Python 3.10's fromisoformat reads no other fraction than 3 or 6 digits.
    expires = datetime.fromisoformat(re.sub(r"\.\d+", "", taken["lock_expires_at"]).replace("Z", "+00:00"))
    assert 30 < (expires - datetime.now(timezone.utc)).total_seconds() <= 42
    [listed] = [t for t in client.tasks(topic=second)["items"] if t["id"] == taken["id"]]
    assert listed["state"] == "locked" and listed["worker"] == "py-taker"
    # Nothing is left for a poll: the task is the asking worker's.
    assert client.poll("py-other", [second], max=1, wait=0.0) == []
    client.complete_tasks([{"id": taken["id"], "lock_token": taken["lock_token"], "output": {"n": 3}}])
    assert f.wait_status(instance)["vars"]["second"] == {"n": 3}

    # The worker: every completion asks, and each second task runs from a completion's answer,
    # never from a poll (it is armed locked, so no poll could see it).
    f = flow(template=TWO_TASKS)
    second = f"{f.topic}-next"
    spy = TakeRecordingClient(server.url)
    worker = Worker(client=spy, worker_id="py-taking", concurrency=2, poll_wait=1.0, lock=30.0)
    ran = {f.topic: [], second: []}
    worker.handler(f.topic, lambda task: ran[f.topic].append(task.id) or {"n": task.input["n"] + 1})
    worker.handler(second, lambda task: ran[second].append(task.id) or {"n": task.input["n"] * 10})
    running = run_worker(worker)
    instances = [f.start({"n": n}) for n in range(4)]
    for n, instance in enumerate(instances):
        assert f.wait_status(instance)["vars"]["second"] == {"n": (n + 1) * 10}
    running.stop()
    assert len(ran[second]) == 4
    assert sorted(spy.taken) == sorted(ran[second])
    assert not set(spy.polled) & set(ran[second])
    assert sorted(spy.polled) == sorted(ran[f.topic])
    expected = {"worker": "py-taking", "topics": sorted([f.topic, second]), "lock": "PT30S"}
    assert all(take == expected for take in spy.takes), spy.takes
