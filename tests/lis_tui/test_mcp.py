"""`lis-tui mcp` spoken to by the MCP SDK's own client over stdio: a real server process, real sandboxes."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

mcp = pytest.importorskip("mcp", reason="the [mcp] extra is not installed")

import anyio  # noqa: E402
from proctree import other_sandboxes  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

pytestmark = pytest.mark.sandbox
ROOT = str(Path(__file__).resolve().parents[2])


def server(tmp_path, *flags: str) -> StdioServerParameters:
    env = {"LIS_SCRATCH": str(tmp_path / "scratch"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "PYTHONPATH": ROOT, "PATH": os.environ["PATH"]}
    return StdioServerParameters(command=sys.executable, args=["-m", "lis_tui.cli", "mcp", *flags], env=env,
                                 cwd=ROOT)


async def session_calls(params: StdioServerParameters, calls: list[tuple[str, dict]]) -> tuple[list[str], list]:
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = [tool.name for tool in (await session.list_tools()).tools]
        results = [await session.call_tool(name, args) for name, args in calls]
    return names, [(r.is_error, "".join(c.text for c in r.content)) for r in results]


def _ours() -> list[int]:
    """The live processes of the server's sandboxes: every sandbox's but this test process's own
    (no host path is in a sandbox's argv; its marker is)."""
    return other_sandboxes(os.getpid())


def test_a_client_runs_edits_and_reviews_in_a_sandbox_and_leaves_nothing(tmp_path):
    calls = [("execute_bash", {"command": "uname -n; echo 42 > /testbed/output/answer.txt; cd /tmp"}),
             ("execute_bash", {"command": "pwd; grep -c CapEff:.0000000000000000 /proc/self/status"}),
             ("str_replace_editor", {"command": "create", "path": "/testbed/notes.md", "file_text": "one\n"}),
             ("str_replace_editor", {"command": "str_replace", "path": "/testbed/notes.md", "old_str": "one",
                                     "new_str": "two"}),
             ("read_output", {"path": "answer.txt"}),
             ("list_changes", {}),
             ("apply_changes", {}),
             ("execute_bash", {"command": "sleep 5", "timeout": 1})]
    names, results = anyio.run(session_calls, server(tmp_path), calls)
    assert {"execute_bash", "str_replace_editor", "list_changes", "read_output", "apply_changes",
            "export_output"} <= set(names) and "submit" not in names
    (_, uname), (_, pwd), (created_error, _), (_, replaced), (_, answer), (_, changes), (apply_error, apply), \
        (_, slept) = results
    assert uname.strip() == "lis-sandbox"
    assert pwd.split() == ["/tmp", "1"]  # the shell persists between calls; the command holds no capability
    assert not created_error and "two" in replaced
    assert answer.strip() == "42"
    assert "added: notes.md" in changes and "added: output/answer.txt" in changes
    assert apply_error and "--allow-apply" in apply  # off unless the person who started it said so
    assert "timed out" in slept
    deadline = time.monotonic() + 10
    while _ours() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _ours()  # the client went: so did the sandbox


def test_apply_and_export_only_where_the_server_was_told(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("old\n")
    out = tmp_path / "exports"
    out.mkdir()
    calls = [("execute_bash", {"command": "echo new > /testbed/a.txt; echo b > /testbed/b.txt; "
                                          "echo 7 > /agent/output/answer.txt"}),
             ("list_changes", {}),
             ("execute_bash", {"command": "echo rewritten > /testbed/b.txt; echo late > /testbed/late.txt"}),
             ("apply_changes", {}),  # what list_changes showed, byte for byte
             ("export_output", {"name": "../escape"}),
             ("export_output", {"name": "run1"})]
    _, results = anyio.run(session_calls, server(tmp_path, "--workspace", str(ws), "--allow-apply",
                                                 "--export-dir", str(out)), calls)
    assert results[3][0] and (ws / "a.txt").read_text() == "new\n"
    assert "b.txt (it changed in the sandbox since you reviewed it" in results[3][1], results[3][1]
    assert "late.txt (it appeared in the sandbox after you reviewed it" in results[3][1]
    assert not (ws / "b.txt").exists() and not (ws / "late.txt").exists()
    assert results[4][0] and not (tmp_path / "escape").exists()
    assert not results[5][0] and (out / "run1" / "answer.txt").read_text() == "7\n"


def test_network_approval_is_asked_through_the_client(tmp_path):
    import mcp_types as types

    asked = []

    async def elicit(context, params):  # the person, answering in their MCP client
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": "deny"})

    async def scenario():
        params = server(tmp_path, "--network", "ask")
        async with stdio_client(params) as (read, write), \
                ClientSession(read, write, elicitation_callback=elicit) as session:
            await session.initialize()
            # Refused when asked, so nothing leaves this machine: no name is even resolved.
            return await session.call_tool("execute_bash", {"command": "curl -sS -m 20 http://example.com/"})

    result = anyio.run(scenario)
    text = "".join(c.text for c in result.content)
    assert asked and "example.com:80" in asked[0]
    assert "refused by the user" in text, text


def test_http_needs_the_token_and_gives_each_client_its_own_sandbox(tmp_path):
    import subprocess

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    params = server(tmp_path, "--http")
    env = {**params.env, "LIS_MCP_TOKEN": "t0ken-for-the-test"}
    proc = subprocess.Popen([params.command, *params.args], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stderr.readline().split("serving ", 1)[1].split()[0]
        denied = httpx2.post(url, json={}, timeout=10)

        async def client(command: str) -> str:
            headers = {"Authorization": "Bearer t0ken-for-the-test"}
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
                    streamable_http_client(url, http_client=http) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                first = await session.call_tool("execute_bash", {"command": command})
                again = await session.call_tool("execute_bash", {"command": "cat /testbed/mine"})
            return "".join(c.text for c in first.content) + "|" + "".join(c.text for c in again.content)

        async def both():
            results = {}
            async with anyio.create_task_group() as group:
                for name in ("a", "b"):
                    async def one(name=name):
                        results[name] = await client(f"ls /testbed; echo {name} > /testbed/mine")
                    group.start_soon(one)
            return results

        results = anyio.run(both)
        deadline = time.monotonic() + 10
        while _ours() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _ours()
    finally:
        proc.terminate()
        proc.wait(20)
    assert denied.status_code == 401
    # Each client found an empty /testbed and read back only what it wrote itself.
    assert results["a"].endswith("|a") and results["b"].endswith("|b"), results
    assert "mine" not in results["a"].split("|")[0] and "mine" not in results["b"].split("|")[0]
    assert not left  # both ended their sessions: both sandboxes are gone, the server still runs


def test_http_sessions_that_vanish_lose_their_sandbox_once_idle(tmp_path):
    import subprocess

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    params = server(tmp_path, "--http", "--idle-timeout", "1")
    env = {**params.env, "LIS_MCP_TOKEN": "t0ken-for-the-test"}
    proc = subprocess.Popen([params.command, *params.args], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    headers = {"Authorization": "Bearer t0ken-for-the-test"}
    try:
        url = proc.stderr.readline().split("serving ", 1)[1].split()[0]

        async def vanishing_client() -> tuple[str, str]:
            # terminate_on_close=False: the client goes without DELETE, as a crashed one would.
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
                    streamable_http_client(url, http_client=http, terminate_on_close=False) as (read, write), \
                    ClientSession(read, write) as session:
                result = await session.initialize()
                slow = await session.call_tool("execute_bash", {"command": "sleep 2.5; echo still here"})
                session_id = getattr(result, "session_id", None)
            return "".join(c.text for c in slow.content), session_id

        said, _ = anyio.run(vanishing_client)
        running = _ours()
        deadline = time.monotonic() + 15
        while _ours() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _ours()
        alive = proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(20)
    assert "still here" in said  # a call longer than the idle timeout is not idleness
    assert running  # the client left, its sandbox was still there...
    assert not left and alive  # ...until the reaper removed it, the server still serving


def test_a_reaped_session_id_makes_no_new_sandbox_and_a_begun_request_is_never_reaped():
    """The reaper decides and takes a session out under one lock: a request of that id that
    arrives a moment later is refused (404), where it used to get a fresh sandbox that nobody
    would end before the next reap; a request begun first keeps its sandbox."""
    from types import SimpleNamespace

    from isolation import SandboxSpec
    from lis_tui.servers.mcp import SandboxTools, Sessions

    made: list[SandboxTools] = []

    def make() -> SandboxTools:
        made.append(SandboxTools(SandboxSpec()))
        return made[-1]

    def ctx(session_id: str):  # what the SDK hands a tool call: its HTTP request's headers
        return SimpleNamespace(request=SimpleNamespace(headers={"mcp-session-id": session_id}))

    sessions = Sessions(make, idle_timeout=0.01)
    try:
        for sid in ("idle", "busy"):
            assert sessions.begin(sid)
            sessions.tools_for(ctx(sid)).call("execute_bash", {"command": "true"})
            sessions.done(sid)
        time.sleep(0.05)
        assert sessions.begin("busy")  # a request of "busy" is in flight while the reaper runs
        assert sessions.reap() == ["idle"]
        assert sessions.begin("idle") is False
        with pytest.raises(RuntimeError, match="ended after being idle"):
            sessions.tools_for(ctx("idle"))
        assert len(made) == 2 and made[0]._sandbox is None  # noqa: SLF001 (closed, none made)
        assert made[1].call("execute_bash", {"command": "echo on"}).output.strip() == "on"
    finally:
        sessions.close()


def test_export_output_keeps_holes_and_refuses_a_file_over_the_export_cap(tmp_path):
    # issue 24: three 1 GiB sparse files cost the sandbox nothing; the copy used to write 3 GiB here
    out = tmp_path / "exports"
    out.mkdir()
    make = ("cd /testbed/output && truncate -s 1G s1 s2 s3 && printf data > mixed && truncate -s 100M mixed "
            "&& head -c 30M /dev/zero > dense && du -k s1 s2 s3")
    calls = [("execute_bash", {"command": make}), ("export_output", {"name": "run1"})]
    _, results = anyio.run(session_calls, server(tmp_path, "--export-dir", str(out), "--export-cap", "20M"), calls)
    (_, made), (export_error, exported) = results
    assert [line.split()[0] for line in made.strip().splitlines()[-3:]] == ["0", "0", "0"]  # sparse inside
    assert export_error and "dense (30.0 MiB of data: over the export cap of 20.0 MiB" in exported
    assert "--export-cap" in exported
    assert not (out / "run1" / "dense").exists()
    for name in ("s1", "s2", "s3"):
        st = os.stat(out / "run1" / name)
        assert st.st_size == 1 << 30 and st.st_blocks * 512 < 1 << 20
    with open(out / "run1" / "mixed", "rb") as f:
        assert f.read(8) == b"data\0\0\0\0" and os.fstat(f.fileno()).st_size == 100 << 20


PLANT = ("mkdir -p .git/hooks && printf '#!/bin/sh\\ntouch planted-marker\\n' > .git/hooks/post-checkout"
         " && printf '[network]\\nmode = \"on\"\\n' > lis-tui.toml && echo new > a.txt")


def test_held_back_paths_are_applied_only_when_named_and_approved_by_the_person(tmp_path):
    import mcp_types as types

    ws = tmp_path / "ws"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / "a.txt").write_text("old\n")
    asked, answers = [], ["leave", "apply"]

    async def elicit(context, params):  # the person, answering in their MCP client
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": answers.pop(0)})

    async def scenario(ask: bool, calls):
        params = server(tmp_path, "--workspace", str(ws), "--allow-apply", "--git-writable")
        async with stdio_client(params) as (read, write), \
                ClientSession(read, write, elicitation_callback=elicit if ask else None) as session:
            await session.initialize()
            results = [await session.call_tool(name, args) for name, args in calls]
        return [(r.is_error, "".join(c.text for c in r.content)) for r in results]

    hook, toml = ".git/hooks/post-checkout", "lis-tui.toml"
    listed, everything, left, taken = anyio.run(scenario, True, [
        ("execute_bash", {"command": PLANT}), ("list_changes", {}), ("apply_changes", {}),
        ("apply_changes", {"paths": [toml]}), ("apply_changes", {"paths": [hook]})])[1:]
    assert f"added: {hook} [held back: nested repository: git takes the folder holding a .git" in listed[1]
    assert everything[0] and (ws / "a.txt").read_text() == "new\n"  # the rest went...
    assert f"{hook} (held back:" in everything[1] and "name it in `paths`" in everything[1]  # ...named, not these
    assert left[0] and "did not approve" in left[1] and not (ws / toml).exists()
    assert not taken[0] and (ws / ".git/hooks/post-checkout").read_text().startswith("#!/bin/sh")
    assert len(asked) == 2 and toml in asked[0] and hook in asked[1] and not answers
    # A client that cannot ask the person gets them refused, by name.
    (_, _), (refused_error, refused) = anyio.run(scenario, False, [
        ("execute_bash", {"command": PLANT}), ("apply_changes", {"paths": [toml]})])
    assert refused_error and "cannot ask the person" in refused and not (ws / toml).exists()


def test_a_review_tool_without_its_argument_answers_a_sentence_and_the_server_has_a_version(tmp_path):
    from lis_tui import __version__

    async def talk(params):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            info = await session.initialize()
            missing = await session.call_tool("export_output", {})
            extra = await session.call_tool("list_changes", {"path": "x"})
        return info, [(r.is_error, "".join(c.text for c in r.content)) for r in (missing, extra)]

    info, ((missing_error, missing), (extra_error, extra)) = anyio.run(
        talk, server(tmp_path, "--export-dir", str(tmp_path)))
    assert info.server_info.version == __version__ and __version__
    assert missing_error and missing.startswith("export_output needs `name`: A directory name")
    assert "positional argument" not in missing and "()" not in missing
    assert extra_error and extra == "list_changes takes no arguments, not `path`"
