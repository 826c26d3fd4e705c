"""`EnvClient`: a small client of `lis-tui env serve` (stdlib only, one kept-alive connection).

    client = EnvClient("http://127.0.0.1:8765", token)
    env_id, first = client.reset({"id": "t1", "problem_statement": "...", "ground_truth": "4"})
    out = client.step(env_id, completion_text)      # {"messages", "done", "reward", ...}
    client.close(env_id)

One client is one connection: give each thread its own.
"""
from __future__ import annotations

import http.client
import json
import os
import select
from typing import Any
from urllib.parse import urlsplit


class EnvServerError(RuntimeError):
    """The server refused a call; `status` is its HTTP status, the message its explanation."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class EnvClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 300.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the server URL must be http://HOST:PORT, not {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.token = token or os.environ.get("LIS_ENV_TOKEN", "")
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def reset(self, task: dict | str, max_steps: int | None = None) -> tuple[str, dict[str, Any]]:
        """A new environment on `task` (a task object, or an id from the server's --tasks)."""
        body: dict[str, Any] = {"task_id": task} if isinstance(task, str) else {"task": task}
        if max_steps:
            body["max_steps"] = max_steps
        answer = self.call("POST", "/envs", body)
        return answer.pop("env_id"), answer

    def step(self, env_id: str, assistant: dict | str) -> dict[str, Any]:
        return self.call("POST", f"/envs/{env_id}/step", {"assistant": assistant})

    def close(self, env_id: str) -> None:
        self.call("DELETE", f"/envs/{env_id}")

    def health(self) -> dict[str, Any]:
        return self.call("GET", "/health")

    def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        if self._conn is not None and self._conn.sock is not None and _closed_by_server(self._conn.sock):
            self.disconnect()  # it closes kept-alive connections idle past its --read-timeout
        for attempt in (0, 1):  # a kept-alive connection the server closed is opened again once
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._conn.request(method, path, body=data, headers=headers)
                response = self._conn.getresponse()
                raw = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.disconnect()
                if attempt or method == "POST" and path.endswith("/step"):
                    raise  # a step may have run: sending it again could run it twice
                continue
            if response.will_close:
                self.disconnect()
            answer = json.loads(raw or b"{}")
            if response.status >= 400:
                raise EnvServerError(response.status, answer.get("error", raw.decode(errors="replace")))
            return answer
        raise AssertionError("unreachable")

    def disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _closed_by_server(sock) -> bool:
    """Whether an idle kept-alive connection has something to read: between requests the server
    sends nothing, so that is its close. Checked before sending, so that a step is not sent on a
    connection already gone, where sending it again could run it twice."""
    poller = select.poll()  # not select(): a trainer may hold descriptors past FD_SETSIZE
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
