"""`lis-tui mcp --network ask`: the person is asked through the client's elicitation about a host,
then about its private address; a question whose request ended is withdrawn and its late answer
counts for nothing. The SDK's own client over stdio, a real server process, real sandboxes."""

from __future__ import annotations

import functools
import http.server
import threading

import pytest

mcp = pytest.importorskip("mcp", reason="the [mcp] extra is not installed")

import anyio  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from test_mcp import server  # noqa: E402

pytestmark = pytest.mark.sandbox


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def web(tmp_path):
    """A web server on 127.0.0.2: loopback, an internal address like a mirror on 10.x."""
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "hello.txt").write_text("hello from the host\n")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.2", 0), functools.partial(Quiet, directory=str(tmp_path / "www")))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"127.0.0.2:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _ask(tmp_path, commands: list[str], answer, ended=None) -> tuple[list[str], list[str]]:
    """Each command through `execute_bash`; `answer(message)` plays the person in the client;
    `ended` (an event) is set once the first command's result is back."""
    import mcp_types as types

    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": await answer(params.message)})

    async def scenario():
        async with stdio_client(server(tmp_path, "--network", "ask")) as (read, write), \
                ClientSession(read, write, elicitation_callback=elicit) as session:
            await session.initialize()
            results = []
            for command in commands:
                results.append(await session.call_tool("execute_bash", {"command": command}))
                if ended is not None:
                    ended.set()
            return results

    results = anyio.run(scenario)
    return asked, ["".join(c.text for c in r.content) for r in results]


def test_an_allowed_host_at_a_private_address_is_a_second_elicitation(tmp_path, web):
    async def allow_once(message):
        return "allow_once"

    asked, (output,) = _ask(tmp_path, [f"curl -sS -m 30 http://{web}/hello.txt"], allow_once)
    assert len(asked) == 2 and f"{web}" in asked[0], asked
    assert f"{web} resolves to 127.0.0.2, a private or internal address" in asked[1]
    assert "allow this address for this host?" in asked[1]
    assert "hello from the host" in output, output


def test_an_answer_after_the_request_ended_allows_nothing(tmp_path, web):
    """The person answers "this session" only after curl gave up: the question was withdrawn, so
    the next request is asked about again (and refused here)."""
    count, first_ended = [], anyio.Event()

    async def late(message):
        count.append(message)
        if len(count) == 1:
            await first_ended.wait()  # the person answers once curl gave up
            return "allow_session"
        return "deny"

    asked, (first, second) = _ask(tmp_path, [f"curl -sS -m 5 http://{web}/hello.txt; echo rc=$?",
                                             f"curl -sS -m 20 http://{web}/hello.txt"], late, first_ended)
    assert "rc=28" in first and "hello" not in first + second
    assert len(asked) == 2 and "refused by the user" in second, (asked, second)
