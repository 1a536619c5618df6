"""Sutra's worker SDK: a `Client` for the HTTP API and a `Worker` that runs handlers for a
server's external tasks (docs/spec.md §4, §5.5). Standard library only."""

from ._http import TASK_LOCK_LOST, ApiError, TransportError, iso8601
from .client import Client
from .worker import Task, TaskError, Worker, codes

__all__ = [
    "ApiError",
    "Client",
    "TASK_LOCK_LOST",
    "Task",
    "TaskError",
    "TransportError",
    "Worker",
    "codes",
    "iso8601",
]

__version__ = "0.1.0"
