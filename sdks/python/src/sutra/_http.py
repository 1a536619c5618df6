"""The wire: one HTTP exchange per call (standard library only), problems as `ApiError`."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.parse
from typing import Any, Callable, Mapping, Optional

#: How long any call but a poll may take: far above a healthy answer, short enough that a
#: wedged connection does not hang a worker or a script forever.
REQUEST_TIMEOUT = 30.0
#: A long poll answers at the end of its `wait`; this covers the trip and a busy server.
POLL_TIMEOUT_MARGIN = 10.0

#: The problem code that tells a worker its lock is gone: drop the result.
TASK_LOCK_LOST = "SUTRA.TASK.LOCK.LOST"


class ApiError(Exception):
    """The server refused a call (an `application/problem+json` answer), answered something
    that is not the documented JSON, or could not be reached (`TransportError`).

    `code`, `title`, `detail` and `retryable` come from the problem; `status` is the HTTP
    status (None when no answer came); `problem` is the whole problem document."""

    def __init__(
        self,
        message: str,
        *,
        url: str,
        status: Optional[int] = None,
        code: Optional[str] = None,
        title: Optional[str] = None,
        detail: Optional[str] = None,
        retryable: bool = False,
        problem: Optional[dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.code = code
        self.title = title
        self.detail = detail
        self.retryable = retryable
        self.problem = problem

    @classmethod
    def from_problem(cls, url: str, status: int, problem: Mapping[str, Any]) -> "ApiError":
        code = problem.get("code")
        title = problem.get("title")
        detail = problem.get("detail")
        text = f"{code}: {detail or title}" if code else str(detail or title)
        return cls(
            text,
            url=url,
            status=int(problem.get("status") or status),
            code=code,
            title=title,
            detail=detail,
            retryable=bool(problem.get("retryable", False)),
            problem=dict(problem),
        )

    @property
    def lock_lost(self) -> bool:
        """Whether this is `SUTRA.TASK.LOCK.LOST`: another worker may hold the task now."""
        return self.code == TASK_LOCK_LOST


class TransportError(ApiError):
    """No answer: the server is away, the connection broke or the call timed out. Retryable."""

    def __init__(self, url: str, reason: BaseException) -> None:
        super().__init__(
            f"{url}: no answer ({type(reason).__name__}: {reason})", url=url, retryable=True
        )
        self.reason = reason


def iso8601(seconds: float) -> str:
    """A duration in seconds as ISO-8601, to the millisecond: 30 -> PT30S, 1.5 -> PT1.500S."""
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    millis = round(seconds * 1000)
    whole, frac = divmod(millis, 1000)
    return f"PT{whole}S" if frac == 0 else f"PT{whole}.{frac:03d}S"


class Http:
    """Sends requests to one server; safe to share between threads (every call opens its own
    connection)."""

    def __init__(self, base_url: str, token: Optional[str] = None) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"`{base_url}` is not an http:// or https:// server URL")
        self.base_url = base_url.rstrip("/")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._token = token
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None

    def path(self, *segments: str) -> str:
        """`segments` as a path below the base URL, each percent-encoded as one segment."""
        return self._prefix + "/" + "/".join(urllib.parse.quote(s, safe="") for s in segments)

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._ssl is not None:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=self._ssl
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: Optional[bytes] = None,
        content_type: str = "application/json",
        headers: Optional[Mapping[str, str]] = None,
        timeout: float = REQUEST_TIMEOUT,
        registered: Optional[Callable[[http.client.HTTPConnection], bool]] = None,
    ) -> tuple[int, Mapping[str, str], Any]:
        """Sends one request and answers (status, headers, decoded JSON body). An error status
        raises `ApiError`; no answer raises `TransportError`.

        `registered`, if given, is called with the connected connection before the request is
        sent; answering False abandons the request (a `TransportError`), which lets a caller
        on another thread abort a long poll by shutting the connection's socket down."""
        url = self.base_url + path[len(self._prefix):]
        payload: Optional[bytes]
        if raw is not None:
            payload = raw
        elif body is not None:
            payload = json.dumps(body).encode()
        else:
            payload = None
        sent_headers = {"accept": "application/json, application/problem+json"}
        if payload is not None:
            sent_headers["content-type"] = content_type
        if self._token:
            sent_headers["authorization"] = f"Bearer {self._token}"
        if headers:
            sent_headers.update(headers)
        conn = self.connection(timeout)
        try:
            try:
                conn.connect()
                if registered is not None and not registered(conn):
                    raise ConnectionAbortedError("the request was abandoned")
                conn.request(method, path, body=payload, headers=sent_headers)
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as error:
                raise TransportError(url, error) from None
            status = response.status
            answer_headers = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        if 200 <= status < 300:
            if not data:
                return status, answer_headers, None
            try:
                return status, answer_headers, json.loads(data)
            except ValueError:
                raise ApiError(
                    f"{url}: answered {status} with a body that is not JSON",
                    url=url,
                    status=status,
                    retryable=False,
                ) from None
        try:
            problem = json.loads(data)
        except ValueError:
            problem = None
        if isinstance(problem, dict) and ("code" in problem or "title" in problem):
            raise ApiError.from_problem(url, status, problem)
        excerpt = data[:200].decode("utf-8", "replace")
        raise ApiError(
            f"{url}: answered {status}: {excerpt}",
            url=url,
            status=status,
            retryable=status >= 500,
        )


def shutdown(conn: http.client.HTTPConnection) -> None:
    """Breaks a connection another thread may be blocked on, so its call ends at once."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
