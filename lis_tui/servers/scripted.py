"""A scripted OpenAI-compatible HTTP server on loopback: the tests' model, and the one a person
can try lis-tui with before they have a model (`lis-tui fake-server`).

    with FakeOpenAI(script=[
        reply(tool_calls=[call("execute_bash", {"command": "echo hi"})]),
        lambda req: submit() if "hi" in req.tool_outputs[-1] else error(500),
    ]) as server:
        run_something(base_url=server.base_url)
        assert server.chat_requests[0].body["tools"]

Each `POST /v1/chat/completions` consumes script entries in order: `reply(...)`, `error(...)`,
`hangup()`, `delay(seconds, then=None)` (waits, then answers with `then` or the entry after it)
or a callable `f(request) -> entry`. When the script runs out, `default` answers (an entry or a
callable, reused for every later request), or a 500 if there is none.

Tests import it as `fakes.openai_server` (tests/conftest.py puts tests/ on sys.path). It imports
nothing of lis-tui's, so a test's server is the same with any lis-tui code under test.
"""

from __future__ import annotations

import itertools
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union

_ids = itertools.count(1)


@dataclass(frozen=True)
class Call:
    """One tool call in a scripted reply; `arguments` is sent verbatim, so it may be broken JSON."""

    name: str
    arguments: str
    id: str


@dataclass(frozen=True)
class Reply:
    """A scripted assistant message."""

    text: str | None = None
    tool_calls: tuple[Call, ...] = ()
    reasoning: str | None = None
    reasoning_key: str = "reasoning_content"
    usage: dict | None = None
    finish_reason: str | None = None
    chunk_size: int = 8
    chunk_delay: float = 0.0
    cut_after: int | None = None


@dataclass(frozen=True)
class Error:
    """A scripted HTTP error answer."""

    status: int
    message: str
    headers: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Hangup:
    """Close the connection without answering."""


@dataclass(frozen=True)
class Delay:
    """Wait, then answer with `then` (or the next script entry, taken when the delay is)."""

    seconds: float
    then: Any = None


@dataclass(frozen=True)
class Request:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    size: int = 0
    """The body's length in bytes."""

    @property
    def messages(self) -> list[dict]:
        """The chat messages of a completion request."""
        return (self.body or {}).get("messages", [])

    @property
    def last_content(self) -> str:
        """The content of the last message, as text ('' when there is none)."""
        content = self.messages[-1].get("content") if self.messages else ""
        return content if isinstance(content, str) else json.dumps(content)

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools the request offered."""
        return [t.get("function", {}).get("name") for t in (self.body or {}).get("tools", [])]

    @property
    def tool_outputs(self) -> list[str]:
        """The contents of every tool message, oldest first."""
        return [m.get("content") or "" for m in self.messages if m.get("role") == "tool"]


Entry = Union[Reply, Error, Hangup, Delay, Callable[[Request], Any]]


def call(name: str, arguments: dict | str | None = None, id: str | None = None) -> Call:
    """A tool call; a dict is JSON-encoded, a string is sent as is."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return Call(name, args, id or f"call_{next(_ids)}")


def reply(
    text: str | None = None,
    tool_calls: list[Call] | tuple[Call, ...] = (),
    *,
    reasoning: str | None = None,
    reasoning_key: str = "reasoning_content",
    usage: tuple[int, int] | tuple[int, int, int] | dict | None = None,
    finish_reason: str | None = None,
    chunk_size: int = 8,
    chunk_delay: float = 0.0,
    cut_after: int | None = None,
) -> Reply:
    """An assistant reply; usage is (prompt, completion[, cached]) or an OpenAI usage dict.

    Streaming: `chunk_size` characters a delta, `chunk_delay` seconds between deltas, and
    `cut_after` drops the connection after that many deltas.
    """
    if isinstance(usage, tuple):
        usage = _usage(*usage)
    return Reply(text, tuple(tool_calls), reasoning, reasoning_key, usage, finish_reason,
                 chunk_size, chunk_delay, cut_after)


def error(status: int = 500, message: str | None = None, *, retry_after: float | None = None,
          headers: dict | None = None) -> Error:
    """An HTTP error answer, with Retry-After when given."""
    headers = dict(headers or {})
    if retry_after is not None:
        headers["Retry-After"] = f"{retry_after:g}"
    return Error(status, message or f"scripted error {status}", headers)


def hangup() -> Hangup:
    """Drop the connection without an answer."""
    return Hangup()


def delay(seconds: float, then: Entry | None = None) -> Delay:
    """Wait this long, then answer with `then`, or else with the next script entry."""
    return Delay(seconds, then)


def submit() -> Reply:
    """A reply that calls `submit`, handy as `default=submit()`."""
    return reply(tool_calls=[call("submit", {})])


def _usage(prompt: int, completion: int, cached: int = 0) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _message(r: Reply) -> dict:
    msg: dict[str, Any] = {"role": "assistant", "content": r.text}
    if r.reasoning is not None:
        msg[r.reasoning_key] = r.reasoning
    if r.tool_calls:
        msg["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in r.tool_calls
        ]
    return msg


def _finish(r: Reply) -> str:
    return r.finish_reason or ("tool_calls" if r.tool_calls else "stop")


def _default_usage(r: Reply, request: Request) -> dict:
    """A deterministic stand-in for token counts: about four characters a token."""
    produced = len(r.text or "") + len(r.reasoning or "") + sum(
        len(c.name) + len(c.arguments) for c in r.tool_calls)
    return _usage(request.size // 4, produced // 4 + 1)


class FakeOpenAI:
    """The server; use as a context manager, it listens on 127.0.0.1 on a free port."""

    def __init__(self, script: list[Entry] | None = None, *, default: Entry | None = None,
                 models: list[str] | None = None, model: str = "fake-model",
                 api_key: str | None = None, send_usage: bool = True, token_ids: bool = True,
                 port: int = 0, max_model_len: int | None = None):
        self.send_usage = send_usage
        """False: like llama.cpp's server, no usage in any answer, even when asked for."""
        self.token_ids = token_ids
        self.max_model_len = max_model_len
        """Said of each model in GET /v1/models, as vLLM says its context there."""
        """False: like llama.cpp's server, logprobs with text tokens only, never token ids."""
        self.script: list[Entry] = list(script or [])
        self.default = default
        self.models = models or [model]
        self.model = model
        self.api_key = api_key
        self.requests: list[Request] = []
        self.errors: list[BaseException] = []  # raised by script callables; answered with 500
        self.handle_times: list[float] = []
        """Seconds each JSON answer took us, from its request line read to its last byte written."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._received = threading.Condition(self._lock)
        self._sockets: set[socket.socket] = set()
        self._httpd: ThreadingHTTPServer | None = None
        self._port: int | None = None
        self._want_port = port
        """0: a free port, chosen at start."""
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------
    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> "FakeOpenAI":
        """Start listening and serving in a background thread."""
        self._httpd = _Server(("127.0.0.1", self._want_port), _handler_for(self))
        self._port = self._httpd.server_address[1]
        # a short poll interval makes close() quick; tests start many servers
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                        daemon=True, name="fake-openai")
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, end pending delays and drop open connections."""
        self._stopping.set()
        if self._httpd is None:
            return
        self._httpd.shutdown()
        with self._lock:
            for sock in list(self._sockets):
                _shutdown(sock)
        self._httpd.server_close()
        self._httpd = None

    @property
    def port(self) -> int:
        """The port it listens (or listened) on."""
        assert self._port is not None, "server not started"
        return self._port

    @property
    def base_url(self) -> str:
        """The base URL to give an OpenAI client (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- script and records ----------------------------------------------------
    def push(self, *entries: Entry) -> None:
        """Append entries to the script."""
        with self._lock:
            self.script.extend(entries)

    @property
    def chat_requests(self) -> list[Request]:
        """The chat completion requests received, oldest first."""
        with self._lock:
            return self._chat_locked()

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[Request]:
        """Block until `count` chat requests have arrived (or raise TimeoutError)."""
        with self._received:
            done = self._received.wait_for(lambda: len(self._chat_locked()) >= count, timeout)
            if not done:
                raise TimeoutError(f"got {len(self._chat_locked())} chat requests, wanted {count}")
            return self._chat_locked()

    def _chat_locked(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def _record(self, request: Request) -> None:
        with self._received:
            self.requests.append(request)
            self._received.notify_all()

    def _next_entry(self, use_default: bool = True) -> Entry | None:
        with self._lock:
            if self.script:
                return self.script.pop(0)
        return self.default if use_default else None

    def _resolve(self, request: Request) -> Reply | Error | Hangup:
        """The answer to one request: call callables, add up delays, then wait them out."""
        wait, entry = 0.0, self._next_entry()
        while True:
            while callable(entry):
                entry = entry(request)
            if not isinstance(entry, Delay):
                break
            wait += entry.seconds
            # a delay binds its answer now, so requests that arrive meanwhile take later entries
            entry = entry.then if entry.then is not None else self._next_entry(use_default=False)
        if entry is None:
            return Error(500, "fake server: script exhausted and no default set")
        if wait and self._stopping.wait(wait):
            return Hangup()  # the server is closing
        return entry


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # resets and hangups are routine here
            super().handle_error(request, client_address)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _handler_for(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        fake = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else small writes wait ~40 ms for delayed ACKs
    fake: FakeOpenAI

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake._sockets.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._sockets.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def parse_request(self) -> bool:
        self._started = time.perf_counter()  # the request line is in: our own handling starts
        return super().parse_request()

    # -- routing ---------------------------------------------------------------
    def do_GET(self) -> None:
        self.fake._record(self._request(None))
        if self.path.rstrip("/").endswith("/models"):
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                    for m in self.fake.models]
            if self.fake.max_model_len:
                data = [{**entry, "max_model_len": self.fake.max_model_len} for entry in data]
            self._json(200, {"object": "list", "data": data})
        else:
            self._json(404, _error_body(f"no route GET {self.path}", 404))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = self._request(body, len(raw))
        self.fake._record(request)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            return self._json(404, _error_body(f"no route POST {self.path}", 404))
        if self.fake.api_key and self.headers.get("Authorization") != f"Bearer {self.fake.api_key}":
            return self._json(401, _error_body("Incorrect API key provided", 401))
        if not isinstance(body, dict):
            return self._json(400, _error_body("body is not a JSON object", 400))
        try:
            entry = self.fake._resolve(request)
        except Exception as exc:  # a test's callable failed: say so instead of hanging up
            self.fake.errors.append(exc)
            entry = Error(500, f"fake server: script callable raised {exc!r}")
        self._answer(request, entry)

    def _request(self, body: Any, size: int = 0) -> Request:
        headers = {k.lower(): v for k, v in self.headers.items()}
        return Request(self.command, self.path, headers, body, size)

    def _answer(self, request: Request, entry: Reply | Error | Hangup) -> None:
        if isinstance(entry, Hangup):
            self.close_connection = True
            _shutdown(self.connection)
        elif isinstance(entry, Error):
            self._json(entry.status, _error_body(entry.message, entry.status), entry.headers)
        elif request.body.get("stream"):
            self._stream(request, entry)
        else:
            self._json(200, self._completion(request, entry))

    # -- answers ---------------------------------------------------------------
    def _completion(self, request: Request, r: Reply) -> dict:
        answer = {
            **self._envelope(request, "chat.completion"),
            "choices": [{"index": 0, "message": _message(r), "finish_reason": _finish(r),
                         "logprobs": None}],
            "usage": r.usage or _default_usage(r, request),
        }
        if not self.fake.send_usage:
            del answer["usage"]
        if request.body.get("logprobs"):
            body = request.body if self.fake.token_ids else {
                k: v for k, v in request.body.items() if not k.startswith("return_token")}
            _add_tokens(answer, body, r)
        return answer

    def _envelope(self, request: Request, kind: str) -> dict:
        model = request.body.get("model") or self.fake.model
        return {"id": f"chatcmpl-{id(request):x}", "object": kind, "created": 0, "model": model}

    def _stream(self, request: Request, r: Reply) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        envelope = self._envelope(request, "chat.completion.chunk")
        include_usage = (request.body.get("stream_options") or {}).get("include_usage")
        try:
            for count, (delta, finish) in enumerate(_deltas(r)):
                if count == r.cut_after:
                    self.close_connection = True
                    return _shutdown(self.connection)
                self._event({**envelope, "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})
                if r.chunk_delay and self.fake._stopping.wait(r.chunk_delay):
                    return
            if include_usage and self.fake.send_usage:
                usage = r.usage or _default_usage(r, request)
                self._event({**envelope, "choices": [], "usage": usage})
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        except OSError:
            self.close_connection = True  # the client went away mid-stream

    def _event(self, obj: dict) -> None:
        self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, obj: dict, headers: dict | None = None) -> None:
        # One write for the status line, headers and body: "answering at once" should cost the
        # client's measurements next to nothing.
        data = json.dumps(obj).encode()
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "Content-Type: application/json",
                 f"Content-Length: {len(data)}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
        self.fake.handle_times.append(time.perf_counter() - self._started)


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i:i + size] for i in range(0, len(text), size)]


def _deltas(r: Reply):
    """The stream of (delta, finish_reason) pairs a real server would send for this reply."""
    yield {"role": "assistant", "content": ""}, None
    for piece in _pieces(r.reasoning or "", r.chunk_size):
        yield {r.reasoning_key: piece}, None
    for piece in _pieces(r.text or "", r.chunk_size):
        yield {"content": piece}, None
    for index, c in enumerate(r.tool_calls):
        head = {"index": index, "id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": ""}}
        yield {"tool_calls": [head]}, None
        for piece in _pieces(c.arguments, r.chunk_size):
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}, None
    yield {}, _finish(r)


# -- tokens as vLLM returns them ----------------------------------------------------------------
# A byte-level stand-in for a tokenizer and chat template: each message renders as
# <|role|>BODY<|end|> and the prompt ends with <|assistant|>, so, as with real templates, a
# prompt is the previous prompt plus the previous completion plus the new (environment) messages.

def render_message(message: dict) -> str:
    """A message as the fake chat template writes it (the assistant's body is its completion)."""
    return f"<|{message.get('role')}|>{_body(message)}<|end|>"


def _body(message: dict) -> str:
    calls = "".join(f"<call>{(c.get('function') or {}).get('name')}"
                    f"{(c.get('function') or {}).get('arguments')}</call>"
                    for c in message.get("tool_calls") or [])
    content = message.get("content")
    return (content if isinstance(content, str) else "") + calls


def token_ids(text: str) -> list[int]:
    """The fake tokenizer: one token a UTF-8 byte."""
    return list(text.encode("utf-8"))


def fake_logprob(index: int) -> float:
    return -0.01 * (index % 7 + 1)


def _add_tokens(answer: dict, body: dict, r: Reply) -> None:
    """logprobs (with `token_id:N` tokens when asked), and vLLM's `return_token_ids` fields."""
    prompt = token_ids("".join(render_message(m) for m in body.get("messages") or []) + "<|assistant|>")
    completion = token_ids(_body(_message(r)) + "<|end|>")
    as_ids = body.get("return_tokens_as_token_ids")
    choice = answer["choices"][0]
    choice["logprobs"] = {"content": [
        {"token": f"token_id:{t}" if as_ids else chr(t), "logprob": fake_logprob(i),
         "bytes": [t], "top_logprobs": []} for i, t in enumerate(completion)]}
    if body.get("return_token_ids"):
        answer["prompt_token_ids"], choice["token_ids"] = prompt, completion
    if r.usage is None:
        answer["usage"] = _usage(len(prompt), len(completion))


def _error_body(message: str, status: int) -> dict:
    kind = ("rate_limit_error" if status == 429 else "server_error" if status >= 500
            else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "code": status}}
