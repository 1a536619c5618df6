"""A worker whose handler never finishes, run as a child process that a test kills or stops.

Usage: stuck_worker.py SERVER_URL TOPIC MARKER_FILE [GRACE] — the handler writes the task's
attempt to MARKER_FILE, then sleeps. The lock is one second; GRACE (seconds, default 10) is how
long a SIGTERM waits for the handler before handing its task back. Prints "stopped" when run()
returns."""

import os
import sys
import time
from pathlib import Path

from sutra import Worker

url, topic, marker = sys.argv[1:4]
grace = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
worker = Worker(url, worker_id=f"py-child-{os.getpid()}", lock=1.0, poll_wait=1.0, grace=grace)


@worker.task(topic)
def stuck(task):
    # Written whole, then renamed: the test never reads a half-written marker.
    Path(marker + ".tmp").write_text(str(task.attempt))
    os.replace(marker + ".tmp", marker)
    time.sleep(600)


worker.run()
print("stopped", flush=True)
