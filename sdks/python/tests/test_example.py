"""The example worker (examples/money_transfer_worker.py) on the money-transfer example's tasks."""

from __future__ import annotations

import os
import signal
import sys

from .conftest import SDK, child_process, wait_for

# examples/money-transfer.yaml without its broker and webhook channels: the same tasks.
TRANSFERS = """
name: py-example-payments
channels:
  py-example-transfers:
    transport: http
    correlate: data.transferId
flows:
  money-transfer:
    start: { channel: py-example-transfers }
    nodes:
      - id: debit
        task: { topic: debit-account, input: { account: "= vars.input.from", amount: "= vars.input.amount" }, retries: 3, backoff: PT5S, lock: PT1M }
        output: debit
      - id: credit
        task: { topic: credit-account, input: { account: "= vars.input.to", amount: "= vars.input.amount" } }
        output: credit
      - id: done
        end: { reply: { status: ok } }
"""


def test_the_example_bank_worker_debits_credits_and_refuses_mallory(server, client):
    client.deploy(TRANSFERS)
    script = SDK / "examples" / "money_transfer_worker.py"
    with child_process([sys.executable, str(script), "--server", server.url]) as child:
        ok = client.send(
            "py-example-transfers", id="py-t-1", type="transfer",
            data={"transferId": "py-t-1", "from": "alice", "to": "dave", "amount": 250},
        )["instance"]
        refused = client.send(
            "py-example-transfers", id="py-t-2", type="transfer",
            data={"transferId": "py-t-2", "from": "mallory", "to": "dave", "amount": 10},
        )["instance"]
        done = wait_for(
            lambda: (s := client.instance(ok))["status"] == "completed" and s, timeout=15,
            what="alice's transfer",
        )
        failed = wait_for(
            lambda: (s := client.instance(refused))["status"] == "failed" and s, timeout=15,
            what="mallory's transfer to fail",
        )
        os.kill(child.pid, signal.SIGTERM)
        out, err = child.communicate(timeout=15)
        assert child.returncode == 0, err
    assert done["vars"]["debit"]["account"] == "alice"
    assert done["vars"]["debit"]["reference"].startswith("debit-")
    assert done["vars"]["credit"] == {"account": "dave", "amount": 250, "reference": done["vars"]["credit"]["reference"]}
    assert failed["failure"]["code"] == "INSUFFICIENT_FUNDS", failed["failure"]
