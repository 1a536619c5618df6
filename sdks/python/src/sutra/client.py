"""`Client`: the calls a script or a worker makes to a Sutra server (docs/spec.md §4)."""

from __future__ import annotations

import http.client
import urllib.parse
from typing import Any, Callable, Optional, Sequence

from ._http import POLL_TIMEOUT_MARGIN, ApiError, Http, iso8601

#: The header naming the instance behind an `ack: complete` reply.
INSTANCE_HEADER = "sutra-instance"
#: The most items one `POST /v1/tasks/complete` may carry.
COMPLETE_BATCH_MAX = 100


class Client:
    """A client for one Sutra server. Thread-safe; every call raises `ApiError` when the
    server refuses it (or `TransportError`, a subclass, when no answer came).

    >>> client = Client("http://127.0.0.1:7480")
    >>> client.deploy(open("flow.yaml").read())        # doctest: +SKIP
    {'name': 'orders', 'version': 1, 'status': 'active'}
    """

    def __init__(self, base_url: str = "http://127.0.0.1:7480", token: Optional[str] = None):
        self._http = Http(base_url, token)

    @property
    def base_url(self) -> str:
        return self._http.base_url

    # Deployments, messages, instances.

    def deploy(self, yaml_text: str, *, file: Optional[str] = None) -> dict[str, Any]:
        """Deploys a YAML document as the next version of its name: `{name, version, status}`.
        An invalid document raises `ApiError` with code `SUTRA.DEPLOY.INVALID`, whose `detail`
        is the rendered diagnostics; `file` names the file they point at."""
        headers = {"sutra-file": file} if file and file.isascii() else None
        _, _, body = self._http.request(
            "POST",
            self._http.path("v1", "deployments"),
            raw=yaml_text.encode(),
            content_type="application/yaml",
            headers=headers,
        )
        return body

    def send(
        self,
        channel: str,
        *,
        id: str,
        type: str,
        data: Any = None,
        source: str = "sutra-python",
        subject: Optional[str] = None,
        **attributes: Any,
    ) -> dict[str, Any]:
        """Sends a CloudEvent on an `http` channel; `id` is the dedup key.

        Answers the intake answer `{instance, status, dedup}`; on an `ack: complete` channel
        whose instance completed in time, `{instance, status: "completed", reply}` with the
        `end` node's reply."""
        event: dict[str, Any] = {
            "specversion": "1.0",
            "id": id,
            "type": type,
            "source": source,
            **attributes,
        }
        if subject is not None:
            event["subject"] = subject
        if data is not None:
            event["datacontenttype"] = "application/json"
            event["data"] = data
        status, headers, body = self._http.request(
            "POST",
            self._http.path("v1", "channels", channel, "messages"),
            event,
            content_type="application/cloudevents+json",
        )
        if status == 200:
            return {"instance": headers.get(INSTANCE_HEADER), "status": "completed", "reply": body}
        return body

    def instance(self, instance_id: str) -> dict[str, Any]:
        """An instance's snapshot: status, vars, tokens with their parks, failure."""
        return self._get("v1", "instances", instance_id)

    def history(self, instance_id: str) -> list[dict[str, Any]]:
        """An instance's audit events, in sequence order."""
        return self._get("v1", "instances", instance_id, "history")

    def tasks(
        self,
        *,
        topic: Optional[str] = None,
        state: Optional[str] = None,
        limit: Optional[int] = None,
        after: Optional[str] = None,
    ) -> dict[str, Any]:
        """One page of tasks: `{items, next}`."""
        query = {
            k: str(v)
            for k, v in {"topic": topic, "state": state, "limit": limit, "after": after}.items()
            if v is not None
        }
        path = self._http.path("v1", "tasks")
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return self._http.request("GET", path)[2]

    def ready(self) -> dict[str, Any]:
        """`GET /readyz`; raises `ApiError` (503) while the server is not ready."""
        return self._get("readyz")

    # The pull surface (docs/spec.md §5.5).

    def poll(
        self,
        worker: str,
        topics: Sequence[str],
        *,
        max: int = 1,
        lock: Optional[float] = None,
        wait: float = 0.0,
        _registered: Optional[Callable[[http.client.HTTPConnection], bool]] = None,
    ) -> list[dict[str, Any]]:
        """Locks up to `max` tasks of `topics` for `lock` seconds (the task's own lock when
        None), waiting up to `wait` seconds for the first. Answers a list of
        `{id, topic, instance, input, attempt, lock_token, lock_expires_at}`, empty when none
        came in time."""
        body: dict[str, Any] = {"worker": worker, "topics": list(topics), "max": max}
        if lock is not None:
            body["lock"] = iso8601(lock)
        if wait:
            body["wait"] = iso8601(wait)
        return self._http.request(
            "POST",
            self._http.path("v1", "tasks", "poll"),
            body,
            timeout=wait + POLL_TIMEOUT_MARGIN,
            registered=_registered,
        )[2]

    def complete(self, task_id: str, lock_token: str, output: Any = None) -> dict[str, Any]:
        """Completes one task with `output`: `{id, state: "completed"}`."""
        return self._post(("v1", "tasks", task_id, "complete"), {"lock_token": lock_token, "output": output})

    def complete_tasks(self, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Completes several tasks (`{id, lock_token, output}` each, at most 100) in one call.
        Answers one result per item, in order: `{id, state}` or `{id, error: problem}`; one
        item's refusal fails no other.

        An item may also carry `take: {worker, topics, lock?}` (`lock` an ISO-8601 duration,
        else the task's own): when the step its completion resumes arms a task of one of
        `topics`, the server locks the first for `worker` in the same transaction and the
        result carries it as `taken`, a task as `poll` answers one. Whoever asks must run it
        (or fail or release it) as a polled task; a malformed `take` refuses the whole batch
        (docs/decisions/0038-eager-dispatch.md)."""
        answer = self._post(("v1", "tasks", "complete"), list(items))
        results = answer.get("items") if isinstance(answer, dict) else None
        if not isinstance(results, list) or [r.get("id") for r in results] != [
            i["id"] for i in items
        ]:
            raise ApiError(
                "the batched completion's results do not answer the items one by one, in order",
                url=self.base_url,
                status=200,
            )
        return results

    def fail(
        self,
        task_id: str,
        lock_token: str,
        code: str,
        message: str = "",
        *,
        retry: bool = True,
    ) -> dict[str, Any]:
        """Fails a task. `retry=True`: available again after its backoff (terminal once out of
        retries); `retry=False`: a business error the flow's `on-error` handles at once.
        Answers `{id, state}`."""
        return self._post(
            ("v1", "tasks", task_id, "fail"),
            {"lock_token": lock_token, "error": {"code": code, "message": message}, "retry": retry},
        )

    def extend(self, task_id: str, lock_token: str, lock: float) -> dict[str, Any]:
        """Keeps the lock for `lock` seconds from now: `{id, lock_expires_at}`."""
        return self._post(
            ("v1", "tasks", task_id, "extend"), {"lock_token": lock_token, "lock": iso8601(lock)}
        )

    def release(self, task_id: str, lock_token: str) -> dict[str, Any]:
        """Hands a task back without spending its attempt: `{id, state: "available"}`; another
        worker may take it at once."""
        return self._post(("v1", "tasks", task_id, "release"), {"lock_token": lock_token})

    def _get(self, *segments: str) -> Any:
        return self._http.request("GET", self._http.path(*segments))[2]

    def _post(self, segments: Sequence[str], body: Any) -> Any:
        return self._http.request("POST", self._http.path(*segments), body)[2]
