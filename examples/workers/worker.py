"""The outside world of every example in examples/: one worker for all their task topics, and the
receiver of their webhooks on 127.0.0.1:9000 (the `url` of each http channel they emit to).

    sutra serve                                 # another terminal
    python3 examples/workers/worker.py          # this one: Ctrl-C stops it
    sutra deploy examples/money-transfer.yaml
    sutra send transfer-requests --id t-1 \\
        --data '{"transferId":"t-1","from":"alice","to":"bob","amount":10}'

It uses the Python worker SDK of sdks/python (standard library only): installed
(`pip install ./sdks/python`) or, when it is not, straight from this checkout. The server is
$SUTRA_SERVER (default http://127.0.0.1:7480), as for the `sutra` commands, with $SUTRA_TOKEN as
its bearer token when it has tokens.

What it answers is plain so that each example's paths can be tried: mallory's account cannot be
debited; a claim over 100 needs a manager (`sutra send approvals …`) and a claim of nothing
breaks the policy; an order line of more than 100 items is out of stock.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

try:
    from sutra import Task, TaskError, Worker
except ImportError:  # not installed: the SDK of the checkout this file is in
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdks" / "python" / "src"))
    from sutra import Task, TaskError, Worker

WEBHOOKS = ("127.0.0.1", 9000)


def reference(task: Task, kind: str) -> str:
    return f"{kind}-{task.id[-6:]}"


def money_transfer(worker: Worker) -> None:
    """examples/money-transfer.yaml: a pretend bank."""

    @worker.task("debit-account")
    def debit(task: Task) -> dict[str, Any]:
        if task.input["account"] == "mallory":
            raise TaskError("INSUFFICIENT_FUNDS", "mallory's account is empty")
        return {**task.input, "reference": reference(task, "debit")}

    @worker.task("credit-account")
    def credit(task: Task) -> dict[str, Any]:
        return {**task.input, "reference": reference(task, "credit")}


def approval(worker: Worker) -> None:
    """examples/approval.yaml: the expense policy and the payroll."""

    @worker.task("check-expense-policy")
    def check_policy(task: Task) -> dict[str, Any]:
        if task.input["amount"] <= 0:
            raise TaskError("NOT_AN_EXPENSE", f"claim {task.input['claimId']} is for nothing")
        return {"autoApprove": task.input["amount"] <= 100, "manager": "mia"}

    @worker.task("pay-expense")
    def pay(task: Task) -> dict[str, Any]:
        return {"paid": task.input["amount"], "reference": reference(task, "pay")}


def order(worker: Worker) -> None:
    """examples/order.yaml: the warehouse, the approver and the carrier."""

    @worker.task("reserve-stock")
    def reserve(task: Task) -> dict[str, Any]:
        if task.input["qty"] > 100:
            raise TaskError("OUT_OF_STOCK", f"only 100 of {task.input['sku']} in stock")
        return {"sku": task.input["sku"], "qty": task.input["qty"], "bin": reference(task, "bin")}

    @worker.task("approve-order")
    def approve(task: Task) -> dict[str, Any]:
        return {"approved": True, "by": "worker"}

    @worker.task("escalate-order")
    def escalate(task: Task) -> dict[str, Any]:
        return {"escalated": True}

    @worker.task("book-carrier")
    def book(task: Task) -> dict[str, Any]:
        return {"tracking": f"TRK-{task.input['order']}", "parcels": task.input["parcels"]}


def nightly(worker: Worker) -> None:
    """examples/nightly.yaml: the night's report."""

    @worker.task("compile-report")
    def compile_report(task: Task) -> dict[str, Any]:
        return {"night": task.input["night"], "orders": 0, "transfers": 0}

    @worker.task("publish-report")
    def publish(task: Task) -> dict[str, Any]:
        return {"published": task.input["night"]}


class Webhooks(BaseHTTPRequestHandler):
    """Answers every webhook 200 and says what came: the outbox then marks it sent."""

    def do_POST(self) -> None:  # noqa: N802 (the name http.server calls)
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            data = json.loads(body).get("data")
        except (ValueError, AttributeError):
            data = body.decode(errors="replace")
        print(f"webhook {self.path}: {json.dumps(data)}", flush=True)
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's name)
        pass  # the line above says it


def receive_webhooks() -> None:
    try:
        server = ThreadingHTTPServer(WEBHOOKS, Webhooks)
    except OSError as error:
        host, port = WEBHOOKS
        sys.exit(f"cannot receive the examples' webhooks on {host}:{port}: {error}")
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main() -> None:
    server = os.environ.get("SUTRA_SERVER", "http://127.0.0.1:7480")
    worker = Worker(server, worker_id=f"examples-{os.getpid()}", token=os.environ.get("SUTRA_TOKEN"))
    for example in (money_transfer, approval, order, nightly):
        example(worker)
    receive_webhooks()
    host, port = WEBHOOKS
    print(f"worker {worker.worker_id} polling {server} for {', '.join(worker.topics)}", flush=True)
    print(f"receiving webhooks on http://{host}:{port}/", flush=True)
    worker.run()


if __name__ == "__main__":
    main()
