"""The scripted OpenAI-compatible server, driven by the real openai client."""

import json
import urllib.error
import urllib.request

import openai
import pytest

from fakes.openai_server import FakeOpenAI, call, delay, error, hangup, reply, submit

USER = [{"role": "user", "content": "hi"}]


def client(server: FakeOpenAI, key: str = "k") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)


def test_reply_with_tool_calls_and_recorded_request():
    script = [reply("let me look", [call("execute_bash", {"command": "ls"}), call("x", "{bad")])]
    with FakeOpenAI(script) as server:
        out = client(server).chat.completions.create(
            model="m", messages=USER, tools=[{"type": "function", "function": {"name": "x"}}])
        (request,) = server.chat_requests
    message = out.choices[0].message
    assert message.content == "let me look"
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("execute_bash", '{"command": "ls"}'), ("x", "{bad")]
    assert out.choices[0].finish_reason == "tool_calls"
    assert request.tool_names == ["x"]
    assert request.headers["authorization"] == "Bearer k"
    assert request.messages == USER


def test_stream_sends_deltas_tool_calls_and_a_usage_chunk():
    script = [reply("hello world", [call("submit", {"a": 1})], reasoning="hmm", usage=(7, 3, 2),
                    chunk_size=2)]
    with FakeOpenAI(script) as server:
        chunks = list(client(server).chat.completions.create(
            model="m", messages=USER, stream=True, stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == "hello world"
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "hmm"
    args = "".join(t.function.arguments or "" for d in deltas for t in d.tool_calls or [])
    assert json.loads(args) == {"a": 1}
    assert chunks[-1].usage.prompt_tokens == 7
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 2


def test_stream_without_include_usage_has_no_usage_chunk():
    with FakeOpenAI([reply("x")]) as server:
        chunks = list(client(server).chat.completions.create(model="m", messages=USER,
                                                             stream=True))
    assert all(c.usage is None for c in chunks)


def test_models_are_listed():
    with FakeOpenAI(models=["a", "b"]) as server:
        assert [m.id for m in client(server).models.list()] == ["a", "b"]


def test_error_carries_status_and_retry_after():
    with FakeOpenAI([error(429, "slow down", retry_after=3)]) as server:
        request = urllib.request.Request(server.base_url + "/chat/completions",
                                         data=json.dumps({"messages": []}).encode())
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request)
    assert info.value.code == 429
    assert info.value.headers["Retry-After"] == "3"
    assert json.loads(info.value.read())["error"]["message"] == "slow down"


def test_callable_answers_from_the_tool_outputs():
    def answer(request):
        return reply(f"saw {request.tool_outputs[-1]}")

    messages = USER + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"}]
    with FakeOpenAI([answer]) as server:
        out = client(server).chat.completions.create(model="m", messages=messages)
    assert out.choices[0].message.content == "saw 42"


def test_exhausted_script_uses_the_default_then_500():
    with FakeOpenAI([reply("one")], default=submit()) as server:
        c = client(server)
        c.chat.completions.create(model="m", messages=USER)
        for _ in range(2):
            out = c.chat.completions.create(model="m", messages=USER)
            assert out.choices[0].message.tool_calls[0].function.name == "submit"
    with FakeOpenAI([]) as server:
        with pytest.raises(openai.InternalServerError, match="script exhausted"):
            client(server).chat.completions.create(model="m", messages=USER)


def test_delay_answers_with_its_entry():
    with FakeOpenAI([delay(0.01, reply("late")), reply("next")]) as server:
        c = client(server)
        answers = [c.chat.completions.create(model="m", messages=USER) for _ in range(2)]
    assert [a.choices[0].message.content for a in answers] == ["late", "next"]


def test_hangup_is_a_connection_error():
    with FakeOpenAI([hangup()]) as server:
        with pytest.raises(openai.APIConnectionError):
            client(server).chat.completions.create(model="m", messages=USER)


def test_cut_stream_fails_mid_way():
    with FakeOpenAI([reply("abcdefghijklmnop", chunk_size=2, cut_after=3)]) as server:
        stream = client(server).chat.completions.create(model="m", messages=USER, stream=True)
        with pytest.raises(Exception):
            list(stream)


def test_required_key_is_checked():
    with FakeOpenAI([reply("x")], api_key="right") as server:
        with pytest.raises(openai.AuthenticationError):
            client(server, key="wrong").chat.completions.create(model="m", messages=USER)
        assert client(server, key="right").chat.completions.create(model="m", messages=USER)


def test_push_and_wait_for_requests():
    with FakeOpenAI() as server:
        server.push(reply("a"), reply("b"))
        c = client(server)
        c.chat.completions.create(model="m", messages=USER)
        c.chat.completions.create(model="m", messages=USER)
        assert len(server.wait_for_requests(2)) == 2
        with pytest.raises(TimeoutError):
            server.wait_for_requests(3, timeout=0.01)


def test_a_failing_callable_answers_500_and_is_kept():
    def broken(request):
        raise KeyError("oops")

    with FakeOpenAI([broken]) as server:
        with pytest.raises(openai.InternalServerError, match="KeyError"):
            client(server).chat.completions.create(model="m", messages=USER)
        assert isinstance(server.errors[0], KeyError)


def test_lis_tui_fake_server_lets_a_person_try_run_and_bench_without_a_model(tmp_path):
    """`lis-tui fake-server` as a person starts it; `run` (in a sandbox) and `bench --mode llm`
    against it, with nothing but the URL it prints."""
    import os
    import re
    import signal
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    server = subprocess.Popen([sys.executable, "-m", "lis_tui.cli", "fake-server", "--port", "0"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+/v1", server.stdout.readline()).group(0)
        lis = [sys.executable, "-m", "lis_tui.cli"]
        done = subprocess.run([*lis, "run", "--base-url", url, "--model", "fake", "--output-dir",
                               "r", "what is here?"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "fake answer" in done.stdout and "submitted after 3 steps" in done.stderr
        assert "execute_bash uname" in done.stderr  # it ran a command in the sandbox
        done = subprocess.run([*lis, "bench", "demo", "--mode", "llm", "--base-url", url,
                               "--model", "fake", "--output", "b", "-q"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "4 episodes" in (tmp_path / "b" / "summary.md").read_text()
    finally:
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0  # Ctrl-C stops it cleanly


@pytest.mark.sandbox
def test_echo_runs_each_task_and_follow_up_as_one_command_and_answers_with_its_output(tmp_path, monkeypatch):
    """`fake-server --echo`, as the app's conversation meets it: what is typed runs as typed, in a
    workspace whose changes come back for review, and a follow-up likewise."""
    from isolation import SandboxSpec
    from lis_tui.commands.fake_server import echo_turn
    from lis_tui.config.settings import load_config
    from lis_tui.conversation import Conversation

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "project").mkdir()
    typed = ["echo hello > hello.txt && echo made it", "cat hello.txt; echo more >> hello.txt"]
    with FakeOpenAI(default=echo_turn, model="fake") as server:
        config = load_config(overrides={"model.model": "fake", "model.base_url": server.base_url}, env={}, paths=[])
        talk = Conversation(config, SandboxSpec(rootfs="host", workspace=str(tmp_path / "project")),
                            tmp_path / "out", stream=True)
        try:
            first, second = (talk.ask(task) for task in typed)
            changed = [(c.path, c.kind) for c in talk.sandbox.changes()]
        finally:
            talk.close()
    assert (first.reason, first.answer, second.reason, second.answer) == ("submitted", "made it", "submitted", "hello")
    ran = [json.loads(c["function"]["arguments"])["command"] for m in talk.messages if m["role"] == "assistant"
           for c in m.get("tool_calls") or [] if c["function"]["name"] == "execute_bash"]
    assert ran == typed
    assert changed == [("hello.txt", "added")]
