"""The environment server: `SandboxEnv`s over HTTP+JSON for trainers in other processes.

    POST   /envs            {"task": {...}} or {"task_id": "..."}   -> 201 {env_id, messages, tools}
    POST   /envs/ID/step    {"assistant": message or text}          -> 200 {messages, done, reward, ...}
    DELETE /envs/ID                                                 -> 200 {closed: true}
    GET    /health                                                  -> 200 {status, live, max_envs}

Every request but /health carries `Authorization: Bearer TOKEN`. Errors are
`{"error": "what happened and what to do"}` with a fitting status. docs/env-server.md has the rest.

A client with the token is trusted like the user who started the server (it runs commands in
sandboxes), but a task sent over HTTP brings its files as name -> text: it can name a host
folder (`documents_dir`, `input_dir`) only under the server's --allow-dir (the one check of every
task's folders, lis_tui.bench.tasks), and answers never carry host paths (failures are logged here
and answered in general terms).
"""
from __future__ import annotations

import hmac
import io
import json
import logging
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lis_tui.bench.scoring.rewards import parse_reward
from lis_tui.bench.tasks import Task, TaskError, tasks_from_items
from lis_tui.rl.env import EnvError
from lis_tui.rl.pool import EnvPool, PoolError
from lis_tui.model.textcalls import AssistantError
from tools.terminal_text import safe_terminal_text

log = logging.getLogger(__name__)
STEP_PATH = re.compile(r"^/envs/([A-Za-z0-9_-]{1,64})/step$")
ENV_PATH = re.compile(r"^/envs/([A-Za-z0-9_-]{1,64})$")


@dataclass
class ServerConfig:
    """What one server accepts."""

    token: str
    tasks: dict[str, Task] = field(default_factory=dict)
    """Tasks a reset may name by id (from --tasks)."""
    allow_dir: Path | None = None
    """The one host folder tasks sent over HTTP may take `documents_dir` / `input_dir` from."""
    max_body: int = 64 << 20
    """Bytes a request body may have."""
    judge: bool = False
    """A judge model is set up, so `judge` rewards can be scored."""
    read_timeout: float = 60.0
    """Seconds a connection has to send a whole request (line, headers, body) from the moment the
    server waits for it, so an idle kept-alive connection closes after as long; also the bound on
    sending an answer. Never on the work in between: a step may run for minutes."""
    max_connections: int = 1024
    """Open connections at most; one past it is answered 503 and closed at once."""


class RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class EnvServer(ThreadingHTTPServer):
    """A threaded HTTP server over one EnvPool; `serve_forever()` runs it, `shutdown()` stops it."""

    daemon_threads = True
    request_queue_size = 1024  # hundreds of trainers' workers connect at once

    def __init__(self, address: tuple[str, int], pool: EnvPool | None, config: ServerConfig) -> None:
        # Set before binding: a port that cannot be had closes the server at once (server_close).
        self.pool, self.settings = pool, config
        self.workers: Any = None
        """The worker processes that hold the environments (lis_tui.rl.workers), or None: here."""
        super().__init__(address, _Handler)
        self._open, self._open_lock, self._full = 0, threading.Lock(), False

    def server_close(self) -> None:
        super().server_close()
        if self.pool is not None:
            self.pool.close_all()

    # A thread per connection: without a cap, connections that send nothing would take threads and
    # descriptors until sandboxes could not start; the read timeout ends each one in bounded time.
    def process_request(self, request: socket.socket, client_address: Any) -> None:
        with self._open_lock:
            full = self._open >= self.settings.max_connections
            if not full:
                self._open += 1
            warn = full and not self._full  # once each time the cap is reached, not per refusal
            self._full = full
        if full:
            if warn:
                log.warning("%d connections are open, the most --max-connections allows: new ones are "
                            "answered 503 until some close", self.settings.max_connections)
            return self._refuse(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed_one()
            raise

    def process_request_thread(self, request: socket.socket, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed_one()

    def _closed_one(self) -> None:
        with self._open_lock:
            self._open -= 1

    def _refuse(self, request: socket.socket) -> None:
        """503 and close, from the accepting thread, so without waiting on the client."""
        data = json.dumps({"error": f"{self.settings.max_connections} connections are open, the most "
                                    "this server takes: retry later, reuse connections, or restart the "
                                    "server with a higher --max-connections"}).encode()
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode()
        try:
            request.setblocking(False)
            request.send(head + data)
        except OSError:
            pass
        self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that resets or drops its connection is not the server's failure to report.
        if isinstance(sys.exc_info()[1], OSError):
            log.debug("the connection from %s ended", client_address, exc_info=True)
        else:
            log.exception("the connection from %s failed", client_address)

    def task_from(self, body: dict) -> Task:
        """The task a reset asks for: one by id from --tasks, or one sent in full."""
        if "task_id" in body:
            if not self.settings.tasks:
                raise RequestError(400, "this server has no task list: send the task itself "
                                        "({\"task\": {...}}), or start it with --tasks FILE")
            task = self.settings.tasks.get(str(body["task_id"]))
            if task is None:
                raise RequestError(404, f"no task {str(body['task_id'])[:200]!r} in the server's "
                                        "--tasks file")
            return self._scorable(task)
        return self._scorable(self._sent_task(body))

    def _scorable(self, task: Task) -> Task:
        if not self.settings.judge and parse_reward(task.reward)[0] == "judge":
            raise RequestError(400, f"task {task.id[:200]!r} is scored by a judge model: start the "
                                    "server with --judge-model M (and --judge-base-url U)")
        return task

    def _sent_task(self, body: dict) -> Task:
        item = body.get("task")
        if not isinstance(item, dict):
            raise RequestError(400, 'send {"task": {"id": ..., "problem_statement": ..., '
                                    '"ground_truth": ..., "input_files": {name: text}}} or '
                                    '{"task_id": ...}')
        try:  # its host folders only inside --allow-dir, as any task file's (lis_tui.bench.tasks)
            return tasks_from_items([item], None, "task", None, self.settings.allow_dir)[0]
        except TaskError as exc:
            raise RequestError(400, str(exc)) from None


class _RequestClock(io.RawIOBase):
    """A connection's reading side with one deadline per request: its line, headers and body must
    all be in by then. A timeout per read alone would let a client that sends a byte at a time
    (slowloris) hold its thread for ever."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.deadline = sock, 0.0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    server: EnvServer
    protocol_version = "HTTP/1.1"  # keep-alive: a trainer's worker reuses its connection
    disable_nagle_algorithm = True  # headers and body go out as two writes
    server_version = "lis-tui-env"

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the plain reader: replaced by one that keeps the request's deadline
        self._clock = _RequestClock(self.connection)
        self.rfile = io.BufferedReader(self._clock)

    def handle_one_request(self) -> None:
        # The clock runs from here, while the server waits for the request (an idle kept-alive
        # connection too), until its body is read; the work it asks for is not on it.
        self._clock.deadline = time.monotonic() + self.server.settings.read_timeout
        super().handle_one_request()

    def send_response(self, code: int, message: str | None = None) -> None:
        self.connection.settimeout(self.server.settings.read_timeout)  # the answer's own bound
        super().send_response(code, message)

    def do_GET(self) -> None:  # noqa: N802
        self._handle(self._get)

    def do_POST(self) -> None:  # noqa: N802
        self._handle(self._post)

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle(self._delete)

    def _get(self) -> tuple[int, dict]:
        if self.path == "/health":
            pool = self.server.pool
            return 200, {"status": "ok", "live": pool.live, "max_envs": pool.config.max_envs}
        self._authorize()
        raise RequestError(404, "unknown path: GET /health, POST /envs, POST /envs/ID/step, "
                                "DELETE /envs/ID")

    def _post(self) -> tuple[int, dict]:
        self._authorize()
        body = self._body()
        if self.path == "/envs":
            task = self.server.task_from(body)
            max_steps = body.get("max_steps")
            if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
                raise RequestError(400, "`max_steps` must be a positive integer")
            env_id, first = self.server.pool.create(task, max_steps)
            return 201, {"env_id": env_id, "task_id": task.id, **first}
        match = STEP_PATH.match(self.path)
        if not match:
            raise RequestError(404, "unknown path: POST /envs or POST /envs/ID/step")
        if "assistant" not in body:
            raise RequestError(400, 'send {"assistant": <the OpenAI assistant message, or the '
                                    'completion text>}')
        return 200, self.server.pool.step(match.group(1), body["assistant"]).to_dict()

    def _delete(self) -> tuple[int, dict]:
        self._authorize()
        match = ENV_PATH.match(self.path)
        if not match:
            raise RequestError(404, "unknown path: DELETE /envs/ID")
        self.server.pool.close(match.group(1))
        return 200, {"closed": True}

    # -- plumbing ------------------------------------------------------------------------------
    def _handle(self, route: Any) -> None:
        self._body_read = False
        try:
            status, answer = route()
        except RequestError as exc:
            status, answer = exc.status, {"error": str(exc)}
        except PoolError as exc:
            status, answer = exc.status, {"error": str(exc)}
        except (AssistantError, EnvError) as exc:
            # over HTTP a new episode is `POST /envs`, not the Python API's reset()
            text = str(exc).replace("reset() starts another", "POST /envs starts another")
            status, answer = (400 if isinstance(exc, AssistantError) else 409), {"error": text}
        except Exception:  # noqa: BLE001 (the text may hold host paths: it goes to the log only)
            log.exception("%s %s failed", self.command, safe_terminal_text(self.path[:200]))
            status, answer = 500, {"error": "the server failed on this request (a sandbox that "
                                            "could not start, or a bug); its log has the details"}
        if status >= 400 and not self._body_read and self.headers.get("Content-Length", "0") != "0":
            self.close_connection = True  # the unread body would be taken for the next request
        self._send(status, answer)

    def _authorize(self) -> None:
        given = self.headers.get("Authorization", "")
        want = f"Bearer {self.server.settings.token}"
        if not hmac.compare_digest(given.encode(), want.encode()):
            raise RequestError(401, "missing or wrong token: send `Authorization: Bearer TOKEN`, "
                                    "the token `lis-tui env serve` printed or was given")

    def _body(self) -> dict:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > self.server.settings.max_body:
            self.close_connection = True
            raise RequestError(413, f"the body must have a Content-Length of at most "
                                    f"{self.server.settings.max_body} bytes (--max-body)")
        try:
            data, self._body_read = self.rfile.read(length), True
        except TimeoutError:
            self.close_connection = True
            raise RequestError(408, f"the request's body did not arrive within "
                                    f"{self.server.settings.read_timeout:g} s (--read-timeout)") from None
        try:
            body = json.loads(data or b"{}")
        except ValueError as exc:
            raise RequestError(400, f"the body is not JSON: {exc}") from None
        except RecursionError:  # a nesting bomb: the client's error, not a server failure to log
            raise RequestError(400, "the body nests too deeply to be read") from None
        if not isinstance(body, dict):
            raise RequestError(400, "the body must be a JSON object")
        return body

    def _send(self, status: int, answer: dict) -> None:
        data = json.dumps(answer, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="lis-tui env"')
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        # The request line is the client's: shown on a terminal only made safe.
        log.debug("%s", safe_terminal_text(format % args))
