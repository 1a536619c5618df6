"""A pretend bank for examples/money-transfer.yaml: handles its `debit-account` and
`credit-account` tasks, as `sutra demo`'s built-in worker does. Every account can pay, except
mallory's: debiting it is a business error (`INSUFFICIENT_FUNDS`), which the flow's payment
scope catches: it compensates what had completed and fails the transfer (`TRANSFER.FAILED`).

Run a server, deploy the example and send it a transfer (its channels are http: no broker is
needed; examples/workers/worker.py answers every example's tasks, this one's among them):

    sutra serve &
    sutra deploy examples/money-transfer.yaml
    python sdks/python/examples/money_transfer_worker.py &
    sutra send transfer-requests --id t-1 \
        --data '{"transferId": "t-1", "from": "alice", "to": "dave", "amount": 250}'
    sutra instances list

Stop it with Ctrl-C (SIGINT) or SIGTERM: running tasks get a grace period, then go back to the
server for another worker.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from sutra import Task, TaskError, Worker


def receipt(task: Task, kind: str) -> dict[str, Any]:
    return {
        "account": task.input["account"],
        "amount": task.input["amount"],
        "reference": f"{kind}-{task.id[-6:]}",
    }


def make_worker(server: str, *, token: str | None = None, worker_id: str = "py-bank", concurrency: int = 8) -> Worker:
    worker = Worker(server, worker_id=worker_id, concurrency=concurrency, token=token)

    @worker.task("debit-account")
    def debit(task: Task) -> dict[str, Any]:
        if task.input["account"] == "mallory":
            raise TaskError("INSUFFICIENT_FUNDS", "mallory's account is empty")
        return receipt(task, "debit")

    @worker.task("credit-account")
    def credit(task: Task) -> dict[str, Any]:
        return receipt(task, "credit")

    return worker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default=os.environ.get("SUTRA_SERVER", "http://127.0.0.1:7480"))
    parser.add_argument("--token", default=os.environ.get("SUTRA_TOKEN"))
    parser.add_argument("--worker-id", default=f"py-bank-{os.getpid()}")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker = make_worker(args.server, token=args.token, worker_id=args.worker_id, concurrency=args.concurrency)
    print(f"bank worker {worker.worker_id} polling {args.server} for {', '.join(worker.topics)}", flush=True)
    worker.run()


if __name__ == "__main__":
    main()
