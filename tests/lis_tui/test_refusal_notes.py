"""Issue 36 item 7: an MCP client's model learns why the network refused and what the person can
do, in the shell tool's result and in the server's flags, once per host. curl alone says only
"Could not resolve host" (network off) or "CONNECT tunnel failed, response 403" (ask mode and a
client that cannot ask). The SDK's client over stdio, a real server process, real sandboxes; the
only server is the test's own on loopback (127.0.0.2), and it is never reached."""

from __future__ import annotations

import functools
import http.server
import threading

import pytest

mcp = pytest.importorskip("mcp", reason="the [mcp] extra is not installed")

import anyio  # noqa: E402
from test_mcp import server, session_calls  # noqa: E402

pytestmark = pytest.mark.sandbox


class Counting(http.server.BaseHTTPRequestHandler):
    hits: list = []

    def do_GET(self) -> None:  # noqa: N802
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def web():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Counting)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.2:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def shell(tmp_path, flags, *commands):
    _, results = anyio.run(session_calls, server(tmp_path, *flags),
                           [("execute_bash", {"command": c}) for c in commands])
    return [text for _, text in results]


def test_ask_mode_without_a_person_says_why_and_the_server_s_flags_once_per_host(tmp_path, web):
    fetch = f"curl -sS -m 20 https://{web}/x"
    first, again = shell(tmp_path, ["--network", "ask"], fetch, fetch)
    assert "CONNECT tunnel failed, response 403" in first, first
    assert (f"[lis-tui] Network access to {web} was refused because no one is there to approve it "
            "(network mode `ask` without a person); the user can restart this MCP server (`lis-tui mcp`) "
            "with `--allow-host 127.0.0.2` or `--network on`.") in first, first
    assert "network key in the app" not in first + again
    assert "CONNECT tunnel failed" in again and "[lis-tui]" not in again  # said once for this host
    assert Counting.hits == []


def test_network_off_says_so_for_each_host_a_command_could_not_resolve(tmp_path):
    first, again, other = shell(tmp_path, ["--network", "off"], "curl -sS -m 5 http://lis-a.invalid/",
                                "curl -sS -m 5 http://lis-a.invalid/", "curl -sS -m 5 https://lis-b.invalid/")
    assert "Could not resolve host: lis-a.invalid" in first, first
    assert ("[lis-tui] The sandbox's network is off: lis-a.invalid cannot be reached (no name resolves, "
            "nothing leaves this computer); the user can restart this MCP server (`lis-tui mcp`) with "
            "`--network on`, or with `--allow-host lis-a.invalid` and `--network ask`.") in first, first
    assert "Could not resolve host" in again and "[lis-tui]" not in again
    assert "lis-b.invalid cannot be reached" in other, other


# -- the same for `run` (its flags) and the app (its key); paper mode's results stay the harness's --

OFF_RUN = ("[lis-tui] The sandbox's network is off: lis-a.invalid cannot be reached (no name resolves, nothing "
           "leaves this computer); the user can turn it on with `--network on`, or with `--network ask "
           "--allow-host lis-a.invalid`.")


@pytest.mark.parametrize("flags", [[], ["--observation", "paper"]])
def test_run_tells_its_model_in_its_own_flags_and_paper_mode_stays_as_it_was(tmp_path, flags):
    from fakes.openai_server import FakeOpenAI, reply, submit
    from test_run_cli import bash, lis_run

    script = [reply(tool_calls=[bash("curl -sS -m 5 http://lis-a.invalid/")]), submit()]
    with FakeOpenAI(script) as server:
        done = lis_run(tmp_path, server.base_url, "--network", "off", *flags, "fetch it")
    output = server.chat_requests[1].tool_outputs[0]
    assert done.returncode == 0, done.stderr
    assert "Could not resolve host: lis-a.invalid" in output
    assert (OFF_RUN in output) is (not flags), output


def test_the_app_tells_its_model_the_key(tmp_path, monkeypatch):
    from fakes.openai_server import FakeOpenAI, call, reply, submit
    from isolation import SandboxSpec
    from lis_tui.config.settings import load_config
    from lis_tui.conversation import Conversation

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    script = [reply(tool_calls=[call("execute_bash", {"command": "curl -sS -m 5 https://lis-a.invalid/"})]),
              submit()]
    with FakeOpenAI(script) as server:
        config = load_config(overrides={"model.model": "m", "model.base_url": server.base_url}, env={}, paths=[])
        talk = Conversation(config, SandboxSpec(rootfs="host", network="off"), tmp_path / "out", stream=False)
        try:
            talk.ask("fetch it")
        finally:
            talk.close()
    output = server.chat_requests[1].tool_outputs[0]
    assert "lis-a.invalid cannot be reached" in output and "with F2 in the app (network ASK or ON)" in output, output
