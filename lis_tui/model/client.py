"""Chat completions with tools against any OpenAI-compatible server: retries, usage, streaming.

`ModelClient.complete()` runs each request in a worker thread and waits on a queue, so the caller
can be interrupted at any moment (`cancel()` from another thread, or Ctrl-C), and every callback
(`on_delta`, `on_retry`) still runs in the caller's thread.
"""

from __future__ import annotations

import email.utils
import errno
import http
import itertools
import json
import os
import queue
import random
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from lis_tui.config.settings import ModelConfig
from lis_tui.model.reply import ModelReply, StreamAssembler, ToolCall, Usage, reply_from_completion  # noqa: F401
from lis_tui.model.tokens import estimate_usage

if TYPE_CHECKING:  # openai loads with the first call: half a second of CPU the app's first frame does not need
    import openai

PLACEHOLDER_KEY = "sk-no-key-required"
WORKER_IDLE = 120.0  # seconds an idle call worker waits for the next call before it ends
# Nothing listening, no such host, no route: a second try a moment later catches a server that was
# just starting; a minute of backoff would only hide the mistake (a wrong port, no network).
UNREACHABLE_RETRIES = 1
UNREACHABLE_DELAY = 0.5
NOT_OPENAI = (404, 405, 501)
"""What a web server that is no model server answers a POST to /chat/completions (a 404 page, a
static server's 405, `python3 -m http.server`'s 501): said at once, never retried, when the body is
no JSON (an OpenAI-compatible server's errors are)."""
OnDelta = Callable[[str, str], None]
"""Called with (kind, text): kind is "text", "reasoning", or "reset" (a retry starts over)."""


@dataclass(frozen=True)
class RetryNotice:
    """Given to `on_retry` before each wait: the attempt that failed, why, and the wait."""

    attempt: int
    delay: float
    reason: str


class ModelError(Exception):
    """The server gave no usable reply; the message names the server, its answer and a fix."""

    def __init__(self, message: str, *, url: str, status: int | None = None, attempts: int = 1,
                 detail: str = ""):
        super().__init__(message)
        self.url, self.status, self.attempts = url, status, attempts
        self.detail = detail
        """What the server said, when it answered."""


class ModelCancelled(Exception):
    """The call was cancelled before the server answered."""


class ModelClient:
    """One model server; call `complete()` from one thread and `cancel()` from any."""

    def __init__(self, config: ModelConfig, *,
                 on_retry: Callable[[RetryNotice], None] | None = None):
        self.config = config
        self.on_retry = on_retry
        self._model = config.model
        self._client: openai.OpenAI | None = None
        self._owns_client = True
        self._lock = threading.Lock()
        self._call: _Call | None = None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._idle = 0  # workers waiting on _jobs; guarded by _lock
        self._window: list[int | None] = []  # the model's context, once asked (shared by siblings)

    def __enter__(self) -> ModelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def api_key(self) -> str:
        """The key sent: the configured one, the one in `api_key_env`, or a placeholder."""
        return self.config.api_key or os.environ.get(self.config.api_key_env) or PLACEHOLDER_KEY

    def complete(self, messages: list[dict], tools: list[dict] | None = None,
                 on_delta: OnDelta | None = None, max_tokens: int | None = None) -> ModelReply:
        """One chat completion; streamed (with `on_delta` calls) when `on_delta` is given;
        `max_tokens` replaces model.max_tokens for this call."""
        call = _Call(streaming=on_delta is not None and self.config.stream)
        call.max_tokens = max_tokens
        self._call = call
        self._submit((call, list(messages), tools))
        try:
            return self._drain(call, on_delta)
        finally:
            if not call.finished:
                call.cancel()  # we were interrupted: stop the worker's retries and stream
            self._call = None

    def cancel(self) -> None:
        """Interrupt the call in progress, if any: `complete()` raises ModelCancelled."""
        call = self._call
        if call is not None:
            call.cancel()

    @property
    def model_name(self) -> str:
        """The model in use: the configured one, else the server's first once asked ("" before)."""
        return self._model or ""

    def list_models(self) -> list[str]:
        """The model names the server offers (`GET /models`)."""
        return self._with_retries(_Call(streaming=False), self._list_models)

    def context_length(self) -> int | None:
        """The model's context as the server says it (vLLM, SGLang, llama.cpp, OpenRouter, ...:
        lis_tui.model.window), asked once; None when it says none or does not answer."""
        if not self._window:
            from lis_tui.model.window import context_length  # noqa: PLC0415 (asked in long runs only)
            try:
                model = self._model_name()
            except Exception:  # noqa: BLE001 (the next model call says what is wrong)
                return None
            self._window.append(context_length(self._openai(), self.config.base_url, model))
        return self._window[0]

    def sibling(self) -> ModelClient:
        """A client for another caller thread that shares this one's HTTP client and connections
        (building an openai client loads the CA bundle: about 40 ms of CPU each). Close the
        siblings before this one, which closes the HTTP client."""
        other = ModelClient(self.config, on_retry=self.on_retry)
        other._model, other._client, other._owns_client = self._model, self._openai(), False
        other._window = self._window
        return other

    def close(self) -> None:
        """Close the HTTP client (unless it is shared from another) and let idle workers go."""
        with self._lock:
            client, self._client = self._client, None
            for _ in range(self._idle):
                self._jobs.put(None)
            self._idle = 0
        if client is not None and self._owns_client:
            client.close()

    # -- the caller's side ---------------------------------------------------------------------
    def _drain(self, call: _Call, on_delta: OnDelta | None) -> ModelReply:
        while True:
            event = call.events.get()
            if event[0] == "reply":
                call.finished = True
                return event[1]
            if event[0] == "error":
                call.finished = True
                raise event[1]
            if event[0] == "cancelled":
                raise ModelCancelled(f"model call to {self.config.base_url} cancelled")
            if event[0] == "retry":
                if self.on_retry:
                    self.on_retry(event[1])
            elif on_delta is not None:
                on_delta(event[1], event[2])

    # -- the worker's side ---------------------------------------------------------------------
    def _submit(self, job: tuple) -> None:
        # An idle worker takes the call: starting a thread per call cost a millisecond a step.
        # None idle (the first call, or one stuck on a cancelled request): start another.
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._jobs.put(job)
                return
        threading.Thread(target=self._serve, args=(job,), daemon=True, name="lis-model-call").start()

    def _serve(self, job: tuple | None) -> None:
        while job is not None:
            self._work(*job)
            with self._lock:
                self._idle += 1
            try:
                job = self._jobs.get(timeout=WORKER_IDLE)
            except queue.Empty:
                with self._lock:  # _submit hands out jobs under this lock: none can slip past
                    if self._jobs.empty():
                        self._idle -= 1
                        return
                    job = self._jobs.get_nowait()

    def _work(self, call: _Call, messages: list[dict], tools: list[dict] | None) -> None:
        try:
            reply = self._with_retries(call, lambda: self._request(call, messages, tools))
            call.events.put(("reply", reply))
        except BaseException as exc:  # handed to the caller's thread
            call.events.put(("error", exc))

    def _with_retries(self, call: _Call, attempt_once: Callable[[], Any]) -> Any:
        for attempt in itertools.count(1):
            try:
                return attempt_once()
            except ModelCancelled:
                raise
            except Exception as exc:
                failure = exc
            if call.cancelled.is_set():
                raise ModelCancelled(f"model call to {self.config.base_url} cancelled")
            unreachable = _unreachable(failure)
            limit = min(UNREACHABLE_RETRIES, self.config.max_retries) if unreachable else self.config.max_retries
            if not _retryable(failure) or attempt > limit:
                raise self._error(failure, attempt) from failure
            delay = self._delay(attempt, failure)
            notice = RetryNotice(attempt, min(delay, UNREACHABLE_DELAY) if unreachable else delay,
                                 _describe(failure))
            call.events.put(("retry", notice))
            if call.sent_deltas:
                call.sent_deltas = False
                call.events.put(("delta", "reset", ""))
            if call.cancelled.wait(notice.delay):
                raise ModelCancelled(f"model call to {self.config.base_url} cancelled")
        raise AssertionError("unreachable")

    def _request(self, call: _Call, messages: list[dict], tools: list[dict] | None) -> ModelReply:
        reply = self._ask(call, messages, tools)
        if reply.usage is None:  # e.g. llama.cpp streaming: never leave the counters at 0
            reply.usage = estimate_usage(messages, tools, reply)
        return reply

    def _ask(self, call: _Call, messages: list[dict], tools: list[dict] | None) -> ModelReply:
        import openai  # noqa: PLC0415 (lazy: see the top)
        # client.post, not chat.completions.create: create() walks every message against its
        # TypedDicts, about 0.4 ms a message (90 ms a call at 200 messages), to send the same JSON.
        # cast_to=object: the reply stays plain JSON; building the pydantic models cost ~1 ms a call.
        client, body = self._openai(), self._body(messages, tools, call.streaming)
        if call.max_tokens is not None:
            body["max_tokens"] = call.max_tokens
        if not call.streaming:
            data = client.post("/chat/completions", cast_to=object, body=body)
            # a server that labels its JSON text/plain comes back as a string
            return reply_from_completion(_parsed(data, self.config.base_url) if isinstance(data, str) else data)
        stream = client.post("/chat/completions", cast_to=object, body=body, stream=True,
                             stream_cls=openai.Stream[object])
        call.response = stream
        try:
            assembler = StreamAssembler()
            for chunk in stream:
                if call.cancelled.is_set():
                    raise ModelCancelled("cancelled")
                for kind, text in assembler.add(chunk):
                    call.sent_deltas = True
                    call.events.put(("delta", kind, text))
            return assembler.reply()
        finally:
            stream.close()

    def _body(self, messages: list[dict], tools: list[dict] | None,
              streaming: bool) -> dict[str, Any]:
        """The request JSON: settings that are set, then extra_body, then the stream flags."""
        c = self.config
        body: dict[str, Any] = {"model": self._model_name(), "messages": messages}
        if tools:
            body["tools"] = tools
        for name in ("temperature", "top_p", "max_tokens", "seed"):
            if getattr(c, name) is not None:
                body[name] = getattr(c, name)
        body.update(c.extra_body)
        if streaming:
            body.update(stream=True, stream_options={"include_usage": True})
        return body

    def _model_name(self) -> str:
        """The configured model, or the first one the server lists (local servers serve one)."""
        if not self._model:
            names = self._list_models()
            if not names:
                raise ModelError(f"no model name set and {self.config.base_url} lists none; "
                                 "set model in [model], LIS_MODEL or --model",
                                 url=self.config.base_url)
            self._model = names[0]
        return self._model

    def _list_models(self) -> list[str]:
        return [m.id for m in self._openai().models.list()]

    def _openai(self) -> openai.OpenAI:
        import openai  # noqa: PLC0415 (lazy: see the top)
        with self._lock:
            if self._client is None:
                # max_retries=0: our retries are the only ones, so limits and notices are exact
                self._client = openai.OpenAI(api_key=self.api_key, base_url=self.config.base_url,
                                             timeout=self.config.timeout, max_retries=0)
            return self._client

    def _delay(self, attempt: int, failure: Exception) -> float:
        """Retry-After when the server sent one, else exponential backoff with jitter."""
        wait = _retry_after(failure)
        if wait is None:
            wait = self.config.retry_base_delay * 2 ** (attempt - 1) * random.uniform(0.5, 1.0)
        return max(0.0, min(wait, self.config.retry_max_delay))

    def _error(self, failure: Exception, attempts: int) -> ModelError:
        import openai  # noqa: PLC0415 (lazy: see the top)
        if isinstance(failure, ModelError):
            return failure
        url, c = self.config.base_url, self.config
        tries = f" (after {attempts} attempts)" if attempts > 1 else ""
        status = getattr(failure, "status_code", None)
        if _not_openai(failure):
            return ModelError(f"model server {url} answered {status} {_phrase(status)} with "
                              f"{_what(_text_of(failure.response))}: {NOT_OPENAI_FIX}", url=url, status=status)
        if isinstance(failure, openai.APIStatusError):
            message = (f"model server {url} answered {status} {_phrase(status)}: "
                       f"{_server_message(failure)}{tries}; {_status_fix(status, c)}")
        elif isinstance(failure, openai.APITimeoutError):
            message = (f"model server {url} did not answer within {c.timeout:g} s{tries}; "
                       "check the server, or raise model.timeout")
        elif isinstance(failure, openai.APIConnectionError):
            message = (f"could not reach model server {url}: {_describe(failure)}{tries}; "
                       "is the server running? check model.base_url")
        else:
            message = f"model server {url} sent an unusable reply: {_describe(failure)}{tries}"
        detail = _server_message(failure) if isinstance(failure, openai.APIStatusError) else ""
        return ModelError(message, url=url, status=status, attempts=attempts, detail=detail)


class _Call:
    """One `complete()` in flight: the queue to the caller and the cancel flag."""

    def __init__(self, streaming: bool):
        self.streaming = streaming
        self.events: queue.SimpleQueue = queue.SimpleQueue()
        self.cancelled = threading.Event()
        self.response: Any = None
        self.sent_deltas = False
        self.finished = False
        self.max_tokens: int | None = None

    def cancel(self) -> None:
        self.cancelled.set()
        self.events.put(("cancelled",))
        if self.response is not None:
            try:
                self.response.close()  # ends a stream the worker is reading
            except Exception:
                pass  # the worker is abandoned; how its stream ends does not matter


# -- reading replies -------------------------------------------------------------------------


# -- failures --------------------------------------------------------------------------------

NOT_OPENAI_FIX = ("this does not look like an OpenAI-compatible endpoint (it usually ends in /v1). "
                  "Fix: check model.base_url (--base-url)")


def _parsed(text: str, url: str) -> Any:
    """A 200 answer's body that came back as text: its JSON, or (a web page) ModelError at once."""
    try:
        return json.loads(text)
    except ValueError:
        raise ModelError(f"model server {url} answered with {_what(text)}: {NOT_OPENAI_FIX}", url=url,
                         status=200) from None


def _not_openai(exc: BaseException) -> bool:
    """A 404, 405 or 501 whose body is no JSON: a web server, not a model server (NOT_OPENAI)."""
    import openai  # noqa: PLC0415 (lazy: see the top)
    return isinstance(exc, openai.APIStatusError) and exc.status_code in NOT_OPENAI \
        and not isinstance(exc.body, (dict, list))


def _text_of(response: Any) -> str:
    try:
        return response.text
    except Exception:  # the body could not be read: say what is known
        return ""


def _what(text: str) -> str:
    """A web page (and its title), or what else a body that is no JSON is, in a few words."""
    text = text[:20000]
    if not text.strip():
        return "an empty body"
    if "<html" not in text.lower() and "<!doctype" not in text.lower():
        return "text that is not JSON"
    title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
    words = " ".join(title.group(1).split())[:80] if title else ""
    return f'a web page ("{words}")' if words else "a web page"


def _retryable(exc: Exception) -> bool:
    """429, 408, 409, 5xx, timeouts and dropped connections are worth another try."""
    import openai  # noqa: PLC0415 (lazy: see the top)
    if isinstance(exc, openai.APIStatusError):
        if "--jinja" in _server_message(exc):  # llama.cpp's 500 for `tools` it is not set up for
            return False
        if _not_openai(exc):  # waiting will not make a web page a model server
            return False
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    if isinstance(exc, openai.APIConnectionError):
        return True
    # a stream cut mid-way surfaces as the HTTP library's own error, not openai's
    return isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in (
        "httpx", "httpx2", "httpcore", "httpcore2", "h11")


def _unreachable(exc: BaseException) -> bool:
    """Connection refused, a name that does not resolve, no route: waiting will not fix these."""
    import openai  # noqa: PLC0415 (lazy: see the top)
    if isinstance(exc, openai.APITimeoutError):
        return False
    seen: BaseException | None = exc
    for _ in range(8):  # openai -> httpx -> httpcore -> the socket's own error
        if seen is None:
            return False
        if isinstance(seen, (ConnectionRefusedError, socket.gaierror)) or getattr(seen, "errno", None) in (
                errno.ENETUNREACH, errno.EHOSTUNREACH):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _retry_after(exc: Exception) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, `Retry-After` seconds or date)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        if headers.get("retry-after-ms"):
            return float(headers["retry-after-ms"]) / 1000
        value = headers.get("retry-after")
        if value:
            try:
                return float(value)
            except ValueError:
                return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError):
        pass
    return None


def _describe(exc: BaseException) -> str:
    """A short reason, reaching through to the cause (e.g. "Connection refused")."""
    import openai  # noqa: PLC0415 (lazy: see the top)
    if isinstance(exc, openai.APIStatusError):
        return f"{exc.status_code} {_phrase(exc.status_code)}"
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__ or exc.__context__
    return f"{text} ({_describe(cause)})" if cause is not None and str(cause) not in text else text


def _phrase(status: int | None) -> str:
    try:
        return http.HTTPStatus(status).phrase  # type: ignore[arg-type]
    except ValueError:
        return ""


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        return str(body.get("message") or json.dumps(body))[:500]
    if body:
        return str(body)[:500]
    try:
        return exc.response.text[:500] or "(empty body)"
    except Exception:
        return "(no body)"


def _status_fix(status: int | None, config: ModelConfig) -> str:
    if status in (401, 403):
        return f"check the API key in ${config.api_key_env} (model.api_key_env names the variable)"
    if status == 404:
        return f'check model.base_url (usually ends in /v1) and the model name "{config.model}"'
    if status == 429:
        return "the server is rate limiting: wait, or raise model.max_retries"
    if status is not None and status >= 500:
        return "the server failed: check its logs, or try again later"
    return "check the request settings (model, max_tokens, extra_body) and the context length"
