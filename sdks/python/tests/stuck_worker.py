"""A worker whose handler never finishes, run as a child process that a test SIGKILLs.

Usage: stuck_worker.py SERVER_URL TOPIC MARKER_FILE — the handler writes the task's attempt to
MARKER_FILE, then sleeps."""

import os
import sys
import time
from pathlib import Path

from sutra import Worker

url, topic, marker = sys.argv[1:4]
worker = Worker(url, worker_id="py-doomed", lock=1.0, poll_wait=1.0)


@worker.task(topic)
def stuck(task):
    # Written whole, then renamed: the test never reads a half-written marker.
    Path(marker + ".tmp").write_text(str(task.attempt))
    os.replace(marker + ".tmp", marker)
    time.sleep(600)


worker.run()
