"""Fixtures: one real `sutra serve` (embedded SQLite store, a free loopback port) for the whole
session, started from `$SUTRA_BIN` (default: the repository's release build) and stopped by
PID at the end; helpers to deploy a small flow per test and to run workers on threads."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pytest

from sutra import Client, Worker

HERE = Path(__file__).resolve().parent
SDK = HERE.parent
DEFAULT_BIN = SDK / ".." / ".." / "target" / "release" / "sutra"


def sutra_bin() -> Path:
    configured = os.environ.get("SUTRA_BIN")
    path = Path(configured) if configured else DEFAULT_BIN
    if not configured and not path.is_absolute():
        path = SDK / path
    return path.resolve()


class Server:
    def __init__(self, binary: Path, directory: Path, env: Optional[dict[str, str]] = None) -> None:
        self.process = subprocess.Popen(
            [
                str(binary),
                "serve",
                "--db",
                f"sqlite://{directory / 'sutra.db'}",
                "--listen",
                "127.0.0.1:0",
            ],
            env={**os.environ, "SUTRA_LOG": "warn", **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._listening = threading.Event()
        self.url = ""
        threading.Thread(target=self._read_stderr, daemon=True).start()
        if not self._listening.wait(30):
            self.stop()
            raise RuntimeError("sutra serve did not listen within 30 s:\n" + self.stderr())
        self._wait_ready()

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))
            if not self._listening.is_set() and "sutra: listening on " in line:
                self.url = line.split("listening on ", 1)[1].split()[0]
                self._listening.set()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError("sutra serve never got ready:\n" + self.stderr())
            time.sleep(0.05)

    def stderr(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    binary = sutra_bin()
    if not binary.exists():
        pytest.exit(
            f"no sutra binary at {binary}: build one (cargo build --release -p sutra-cli) "
            "or set SUTRA_BIN",
            returncode=2,
        )
    started = Server(binary, tmp_path_factory.mktemp("sutra"))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def secured_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that requires a bearer token: `SECRET` for tenant `default`, every role."""
    started = Server(
        sutra_bin(),
        tmp_path_factory.mktemp("sutra-secured"),
        env={"SUTRA_AUTH_TOKENS": f"default:admin,worker,sender:{SECRET}"},
    )
    try:
        yield started
    finally:
        started.stop()


SECRET = "py-sdk-test-secret"


@pytest.fixture
def client(server: Server) -> Client:
    return Client(server.url)


_names = itertools.count(1)


FLOW = """
name: {name}
channels:
  {name}-in:
    transport: http
flows:
  main:
    start: {{ channel: {name}-in }}
    nodes:
      - id: work
        task: {{ topic: {topic}, input: "= vars.input", retries: 3, backoff: PT1S, lock: {lock} }}
        output: result
        on-error: handled
      - id: done
        end: {{}}
      - id: handled
        set: {{ handled: "= vars.error" }}
      - id: handled-end
        end: {{}}
"""


class Flow:
    """A flow deployed for one test, its own name, channel and topic: by default the one-task
    `FLOW`; `template` gives another, formatted with the same `name`, `topic` and `lock`."""

    def __init__(self, client: Client, lock: str, template: str = FLOW) -> None:
        self.client = client
        self.name = f"py-{os.getpid()}-{next(_names)}"
        self.channel = f"{self.name}-in"
        self.topic = f"{self.name}-topic"
        self.deployed = client.deploy(template.format(name=self.name, topic=self.topic, lock=lock))
        self._events = itertools.count(1)

    def start(self, data: Any) -> str:
        """Starts an instance with `data` as its input; answers its id."""
        answer = self.client.send(
            self.channel, id=f"{self.name}-evt-{next(self._events)}", type="test.start", data=data
        )
        return answer["instance"]

    def wait_status(self, instance: str, status: str = "completed", timeout: float = 15) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            snapshot = self.client.instance(instance)
            if snapshot["status"] == status:
                return snapshot
            if time.monotonic() > deadline:
                raise AssertionError(f"instance {instance} is {snapshot['status']}, not {status}: {snapshot}")
            time.sleep(0.05)


@pytest.fixture
def flow(client: Client) -> Callable[..., Flow]:
    def make(lock: str = "PT1M", template: str = FLOW) -> Flow:
        return Flow(client, lock, template)

    return make


class Running:
    """A worker running on a thread of the test process."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as error:  # noqa: BLE001
            self.error = error

    def stop(self, timeout: float = 20) -> float:
        """Stops the worker; answers how long run() took to return."""
        began = time.monotonic()
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert self.error is None, self.error
        return time.monotonic() - began


@pytest.fixture
def run_worker() -> Iterator[Callable[[Worker], Running]]:
    started: list[Running] = []

    def start(worker: Worker) -> Running:
        running = Running(worker)
        started.append(running)
        return running

    yield start
    for running in started:
        if running.thread.is_alive():
            running.worker.stop(now=True)
            running.thread.join(20)


@contextlib.contextmanager
def child_process(args: list[str]) -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(10)


def wait_for(predicate: Callable[[], Any], timeout: float = 10, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
