"""`lis-tui run --network on`: a refused host is a line in the run log, once, with why and the fix,
and a record in the trajectory; the model reads the same words in its 403."""

from __future__ import annotations

import functools
import http.server
import threading

import pytest

from fakes.openai_server import FakeOpenAI, reply, submit
from test_run_cli import bash, lis_run, trajectory

pytestmark = pytest.mark.sandbox


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_a_refused_host_is_said_once_in_the_run_log_with_why_and_the_fix(tmp_path):
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "hello.txt").write_text("hello\n")
    # 127.0.0.2 stands in for a package mirror on 10.x or 203.0.113.x: an internal address
    web = http.server.ThreadingHTTPServer(("127.0.0.2", 0), functools.partial(Quiet, directory=str(tmp_path / "www")))
    threading.Thread(target=web.serve_forever, daemon=True).start()
    hostport = f"127.0.0.2:{web.server_address[1]}"
    fetch = f"curl -sS -m 20 http://{hostport}/hello.txt"
    script = [reply(tool_calls=[bash(f"{fetch}; {fetch}; {fetch}")]), submit()]
    try:
        with FakeOpenAI(script) as server:
            done = lis_run(tmp_path, server.base_url, "--network", "on", "fetch hello.txt")
    finally:
        web.shutdown()
        web.server_close()
    why = (f"Network access to {hostport} was refused: it resolves to 127.0.0.2, a private or internal "
           f"address (this machine or its network); the user can allow exactly this service with "
           f"`--allow-host {hostport}`")
    assert done.returncode == 0, done.stderr
    assert [line.strip() for line in done.stderr.splitlines() if "network:" in line] == [f"network: {why}"]
    assert server.chat_requests[1].tool_outputs[0].count(f"lis-tui: {why}") == 3
    refusals = trajectory(tmp_path)["network_refusals"]
    assert [(r["host"], r["by"], r["text"]) for r in refusals] == [("127.0.0.2", "host-internal", why)]
