"""The model client against a real (scripted) HTTP server, through the real openai package."""

import socket
import subprocess
import sys
import threading

import pytest

from fakes.openai_server import FakeOpenAI, call, delay, error, hangup, reply
from lis_tui.config.settings import ModelConfig
from lis_tui.model.client import (
    PLACEHOLDER_KEY, ModelCancelled, ModelClient, ModelError, ToolCall, Usage,
)

USER = [{"role": "user", "content": "add 1 and 2"}]
TOOLS = [{"type": "function", "function": {"name": "execute_bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}]


def make(server_or_url, **settings) -> ModelClient:
    url = server_or_url if isinstance(server_or_url, str) else server_or_url.base_url
    settings = {"model": "m", "retry_base_delay": 0.001, "retry_max_delay": 0.01, **settings}
    return ModelClient(ModelConfig(base_url=url, **settings))


def free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_plain_reply():
    with FakeOpenAI([reply("3")]) as server:
        out = make(server).complete(USER)
    assert (out.text, out.tool_calls, out.finish_reason) == ("3", [], "stop")
    assert out.to_message() == {"role": "assistant", "content": "3"}


def test_siblings_share_one_connection_and_outlive_each_other_until_the_first_closes():
    with FakeOpenAI(default=lambda request: reply("ok")) as server:
        first = make(server)
        a, b = first.sibling(), first.sibling()
        shared = first._openai()  # noqa: SLF001
        assert a._openai() is shared and b._openai() is shared  # noqa: SLF001
        results = []
        threads = [threading.Thread(target=lambda c=c: results.append(c.complete(USER).text)) for c in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert results == ["ok", "ok"]
        a.close()
        assert b.complete(USER).text == "ok"  # closing a sibling leaves the shared HTTP client open
        b.close()
        assert not shared.is_closed()
        first.close()
        assert shared.is_closed()


def test_tool_calls_keep_their_raw_arguments():
    script = [reply(tool_calls=[call("execute_bash", {"command": "echo 3"}, id="a"),
                                call("submit", '{"oops": ', id="b")])]
    with FakeOpenAI(script) as server:
        out = make(server).complete(USER, TOOLS)
        assert server.chat_requests[0].body["tools"] == TOOLS
    assert out.tool_calls == [ToolCall("a", "execute_bash", '{"command": "echo 3"}'),
                              ToolCall("b", "submit", '{"oops": ')]
    assert out.finish_reason == "tool_calls"
    assert out.to_message()["content"] is None
    assert out.to_message()["tool_calls"][1]["function"]["arguments"] == '{"oops": '


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_reasoning_is_captured(key):
    with FakeOpenAI([reply("4", reasoning="2 plus 2", reasoning_key=key)]) as server:
        out = make(server).complete(USER)
    assert out.reasoning == "2 plus 2"
    assert "reasoning_content" not in out.to_message()
    assert out.to_message(include_reasoning=True)["reasoning_content"] == "2 plus 2"


def test_usage_is_captured():
    with FakeOpenAI([reply("x", usage=(120, 30, 100))]) as server:
        out = make(server).complete(USER)
    assert out.usage == Usage(prompt_tokens=120, completion_tokens=30, cached_tokens=100)
    assert out.usage.total_tokens == 150
    assert out.usage + out.usage == Usage(240, 60, 200)


def test_streamed_reply_equals_the_plain_one():
    def scripted():
        command = call("execute_bash", {"command": "python3 -c 'print(1+2)'"}, id="c1")
        return reply("the answer is 3", [command],
                     reasoning="think first", usage=(50, 20, 10), chunk_size=3)

    deltas = []
    with FakeOpenAI([scripted(), scripted()]) as server:
        client = make(server)
        plain = client.complete(USER, TOOLS)
        streamed = client.complete(USER, TOOLS, on_delta=lambda *delta: deltas.append(delta))
        plain_body, stream_body = (r.body for r in server.chat_requests)
    fields = ("text", "reasoning", "tool_calls", "usage", "finish_reason")
    assert [getattr(streamed, f) for f in fields] == [getattr(plain, f) for f in fields]
    assert streamed.to_message() == plain.to_message()
    assert "".join(t for k, t in deltas if k == "text") == "the answer is 3"
    assert "".join(t for k, t in deltas if k == "reasoning") == "think first"
    assert "stream" not in plain_body
    assert stream_body["stream"] is True
    assert stream_body["stream_options"] == {"include_usage": True}


def test_stream_off_in_settings_means_one_plain_request():
    with FakeOpenAI([reply("x")]) as server:
        out = make(server, stream=False).complete(USER, on_delta=lambda *a: None)
        assert "stream" not in server.chat_requests[0].body
    assert out.text == "x"


def test_429_then_success_honours_retry_after():
    notices = []
    with FakeOpenAI([error(429, retry_after=0.005), error(429, headers={"retry-after-ms": "3"}),
                     reply("ok")]) as server:
        client = make(server, retry_max_delay=1.0)
        client.on_retry = notices.append
        out = client.complete(USER)
        assert len(server.chat_requests) == 3
    assert out.text == "ok"
    assert [(n.attempt, n.delay) for n in notices] == [(1, 0.005), (2, 0.003)]
    assert "429" in notices[0].reason


def test_500_forever_stops_with_a_clear_error():
    with FakeOpenAI(default=error(500, "engine overloaded")) as server:
        with pytest.raises(ModelError) as info:
            make(server, max_retries=3).complete(USER)
        assert len(server.chat_requests) == 4
    err = info.value
    assert (err.status, err.attempts, err.url) == (500, 4, server.base_url)
    assert server.base_url in str(err) and "500" in str(err)
    assert "engine overloaded" in str(err) and "after 4 attempts" in str(err)


def test_client_errors_are_not_retried():
    with FakeOpenAI(default=error(400, "context length exceeded")) as server:
        with pytest.raises(ModelError, match="context length exceeded") as info:
            make(server).complete(USER)
        assert len(server.chat_requests) == 1
    assert info.value.status == 400


def test_bad_key_error_names_the_variable():
    with FakeOpenAI(default=reply("x"), api_key="right") as server:
        with pytest.raises(ModelError, match=r"401.*\$MY_KEY") as info:
            make(server, api_key="wrong", api_key_env="MY_KEY").complete(USER)
    assert info.value.attempts == 1


@pytest.mark.parametrize("url", [free_url(), "http://no-such-host.invalid/v1"])
def test_unreachable_server_gets_one_quick_retry_not_the_backoff(url):
    notices = []
    # a backoff this long would run past the test's timeout: only the quick retry may happen
    client = make(url, max_retries=5, retry_base_delay=60, retry_max_delay=60)
    client.on_retry = notices.append
    with pytest.raises(ModelError, match="could not reach model server") as info:
        client.complete(USER)
    assert url in str(info.value) and "is the server running?" in str(info.value)
    assert any(word in str(info.value).lower() for word in ("refused", "name", "resolution"))
    assert info.value.status is None and info.value.attempts == 2
    assert [(n.attempt, n.delay <= 0.5) for n in notices] == [(1, True)]


def test_dropped_connection_is_retried():
    with FakeOpenAI([hangup(), reply("back")]) as server:
        assert make(server).complete(USER).text == "back"


def test_stream_cut_mid_way_starts_over():
    deltas = []
    with FakeOpenAI([reply("abcdefghij", chunk_size=2, cut_after=3), reply("fresh")]) as server:
        out = make(server).complete(USER, on_delta=lambda k, t: deltas.append((k, t)))
    assert out.text == "fresh"
    kinds = [k for k, _ in deltas]
    assert "reset" in kinds
    assert "".join(t for k, t in deltas[kinds.index("reset"):]) == "fresh"


def test_timeout_is_retried_then_reported():
    with FakeOpenAI(default=delay(5, reply("late"))) as server:
        with pytest.raises(ModelError, match="did not answer within 0.05 s"):
            make(server, timeout=0.05, max_retries=1).complete(USER)
        assert len(server.chat_requests) == 2


def test_settings_and_extra_body_reach_the_server():
    extra = {"chat_template_kwargs": {"thinking": True}, "top_k": 20}
    with FakeOpenAI([reply("x"), reply("y")]) as server:
        make(server, temperature=0.6, top_p=0.95, max_tokens=512, seed=7,
             extra_body=extra).complete(USER)
        make(server).complete(USER)
        full, bare = (r.body for r in server.chat_requests)
    assert full["chat_template_kwargs"] == {"thinking": True} and full["top_k"] == 20
    assert (full["temperature"], full["top_p"], full["max_tokens"], full["seed"]) == (
        0.6, 0.95, 512, 7)
    assert full["model"] == "m" and full["messages"] == USER
    assert not {"temperature", "top_p", "max_tokens", "seed", "tools"} & set(bare)


def test_placeholder_key_when_none_is_set(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OTHER_KEY", "sk-other")
    with FakeOpenAI([reply("x"), reply("y")]) as server:
        make(server).complete(USER)
        make(server, api_key_env="OTHER_KEY").complete(USER)
        first, second = (r.headers["authorization"] for r in server.chat_requests)
    assert first == f"Bearer {PLACEHOLDER_KEY}"
    assert second == "Bearer sk-other"


def test_empty_model_name_takes_the_servers_first_model():
    with FakeOpenAI([reply("x")], models=["qwen3-8b", "other"]) as server:
        make(server, model="").complete(USER)
        assert server.chat_requests[0].body["model"] == "qwen3-8b"


def run_in_thread(fn):
    """Run fn in a thread; return the thread and a list that receives its outcome."""
    outcome = []

    def target():
        try:
            outcome.append(fn())
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize("streaming", [False, True])
def test_cancel_interrupts_a_call(streaming):
    slow = reply("x" * 1000, chunk_size=1, chunk_delay=0.05) if streaming else delay(30, reply("x"))
    with FakeOpenAI([slow], default=reply("after")) as server:
        client = make(server)
        seen = threading.Event()
        on_delta = (lambda kind, text: seen.set()) if streaming else None
        thread, outcome = run_in_thread(lambda: client.complete(USER, on_delta=on_delta))
        server.wait_for_requests(1)
        if streaming:
            assert seen.wait(10)
        client.cancel()
        thread.join(10)
        assert isinstance(outcome[0], ModelCancelled)
        assert client.complete(USER).text == "after"  # the client still works


def test_cancel_during_backoff():
    with FakeOpenAI(default=error(503)) as server:
        client = make(server, retry_base_delay=30, retry_max_delay=30)
        notices = threading.Event()
        client.on_retry = lambda notice: notices.set()
        thread, outcome = run_in_thread(lambda: client.complete(USER))
        assert notices.wait(10)
        client.cancel()
        thread.join(10)
        assert isinstance(outcome[0], ModelCancelled)
        assert len(server.chat_requests) == 1


def test_core_modules_do_not_load_textual():
    code = "import sys, lis_tui.model.client, lis_tui.config.settings; sys.exit('textual' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("stream", [True, False])
def test_a_server_that_sends_no_usage_gets_an_estimate_never_zero(stream):
    long_task = [{"role": "user", "content": "add 1 and 2, " * 50}]
    on_delta = (lambda *a: None) if stream else None
    with FakeOpenAI([reply("the answer is 3", [call("submit", {})])], send_usage=False) as server:
        out = make(server).complete(long_task, TOOLS, on_delta=on_delta)
        body = server.chat_requests[0].body
    if stream:
        assert body["stream_options"] == {"include_usage": True}  # asked for, and still none came
    assert out.usage.estimated
    assert out.usage.prompt_tokens > len(long_task[0]["content"]) // 8  # the messages and schemas
    assert out.usage.completion_tokens >= 4  # "the answer is 3" and the call


def test_reported_usage_is_not_an_estimate():
    with FakeOpenAI([reply("x", usage=(10, 2))]) as server:
        out = make(server).complete(USER, on_delta=lambda *a: None)
    assert out.usage == Usage(10, 2) and not out.usage.estimated


@pytest.mark.parametrize("call, status", [("complete", 501), ("stream", 501), ("models", 404), ("page", 200)])
def test_a_web_server_that_is_no_model_server_is_said_at_once_in_one_line(tmp_path, call, status):
    """`python3 -m http.server` at the base URL (a 404 page for GET, 501 for POST), or a server
    that answers every POST with a page: one try, one line, no page in it."""
    import functools
    import http.server

    seen = []

    class WebServer(http.server.SimpleHTTPRequestHandler):
        def parse_request(self):
            seen.append(self.raw_requestline)
            return super().parse_request()

        def log_message(self, *args):
            pass

        if call == "page":
            def do_POST(self):
                page = b"<!DOCTYPE html><html><head><title>My   blog</title></head><body>hi</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(WebServer, directory=str(tmp_path)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    notices = []
    try:
        client = make(f"http://127.0.0.1:{httpd.server_address[1]}", max_retries=2, stream=call == "stream")
        client.on_retry = notices.append
        with pytest.raises(ModelError) as info:
            client.list_models() if call == "models" else client.complete(USER, on_delta=lambda *a: None)
    finally:
        httpd.shutdown()
        httpd.server_close()
    message = str(info.value)
    assert "this does not look like an OpenAI-compatible endpoint (it usually ends in /v1)" in message
    assert f"answered {status}" in message if status != 200 else "answered with a web page" in message
    assert "<" not in message and "\n" not in message and len(message) < 300, message
    assert (len(seen), notices, info.value.status) == (1, [], status)
