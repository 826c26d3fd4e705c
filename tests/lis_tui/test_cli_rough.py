"""The first day's command-line rough edges (issue 36): the app takes `run`'s model flags, no
traceback on any port, and the smaller things a person met. `lis-tui` runs in this process (the
`cli` fixture) or as a subprocess, as a person would run it."""

import argparse
import html
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, reply, submit
from test_cli_errors import afile, cli, one_line  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[2]


def _flags(parser: argparse.ArgumentParser, group: str) -> set[str]:
    (found,) = [g for g in parser._action_groups if g.title == group]  # noqa: SLF001
    return {o for a in found._group_actions for o in a.option_strings}  # noqa: SLF001


# -- item 4: the app takes run's model flags --------------------------------------------------------

def test_the_app_takes_every_model_flag_of_run():
    from lis_tui.cli import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    run_flags, app_flags = _flags(subs.choices["run"], "model and agent"), _flags(subs.choices["tui"], "model and agent")
    assert {"--tool-format", "--max-tokens", "--temperature"} <= run_flags
    assert run_flags <= app_flags


def test_lis_tui_with_runs_model_flags_is_not_refused(cli):
    """Without a terminal the app refuses, after its flags were read: none is unknown."""
    done = cli("--tool-format", "bash", "--max-tokens", "64", "--temperature", "0.2",
               "--max-context-tokens", "9000", "--observation", "paper", "-t", "hi")
    assert done.returncode == 2 and "needs a terminal" in one_line(done)


# -- item 8: no traceback on any port ----------------------------------------------------------------

LISTENERS = [["env", "serve", "--rootfs", "host"], ["mcp", "--http", "--rootfs", "host"], ["fake-server"]]


def lis(tmp_path: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`lis-tui ARGS` as a subprocess (after `prefix`): one that listens must end by itself."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    env.pop("LIS_ENV_TOKEN", None)
    return subprocess.run([*prefix, sys.executable, "-m", "lis_tui.cli", *args], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def said(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line and not line.startswith("usage:")]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("command", LISTENERS, ids=lambda c: c[0])
def test_a_busy_port_is_one_line_naming_it_and_port_0(tmp_path, command):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = lis(tmp_path, *command, "--port", str(port))
    line = said(done)  # env serve: no token printed for a server that never ran
    assert done.returncode == 1 and f"127.0.0.1:{port}" in line and "in use" in line
    assert "--port 0" in line


@pytest.mark.parametrize("command", LISTENERS, ids=lambda c: c[0])
@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_port_out_of_range_is_a_usage_error_naming_port_0(cli, command, port):
    done = cli(*command, "--port", port)
    line = one_line(done)
    assert done.returncode == 2 and port in line and "--port 0" in line


@pytest.mark.parametrize("command", LISTENERS, ids=lambda c: c[0])
def test_a_privileged_port_is_one_line_naming_it_and_port_0(tmp_path, command):
    """In a user namespace of its own even root holds no right to the host's ports below
    ip_unprivileged_port_start, as any user does not."""
    if int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text()) <= 80:
        pytest.skip("this machine lets every user listen on port 80")
    done = lis(tmp_path, *command, "--port", "80", prefix=("unshare", "--user", "--"))
    line = said(done)
    assert done.returncode == 1 and "127.0.0.1:80" in line and "need privileges" in line
    assert "--port 0" in line


# -- item 10: the smaller things a person met ---------------------------------------------------------

def test_a_base_url_of_another_scheme_is_shown_with_http_not_the_same_scheme(cli):
    done = cli("run", "--mode", "llm", "--base-url", "ftp://127.0.0.1:8791/v1", "--model", "m", "hi")
    line = one_line(done)
    assert done.returncode == 2 and "e.g. --base-url http://127.0.0.1:8791/v1" in line, line


def test_a_broken_ipv6_base_url_names_the_url_and_the_fix(cli):
    done = cli("run", "--mode", "llm", "--base-url", "http://[::1", "--model", "m", "hi")
    line = one_line(done)
    assert done.returncode == 2 and "'http://[::1'" in line and "http://[::1]:8000/v1" in line, line


@pytest.mark.parametrize("steps", ["0", "-1"])
@pytest.mark.parametrize("command", [["run", "hi"], ["-t", "hi"], ["bench", "demo"]], ids=lambda c: c[0])
def test_max_steps_below_one_is_a_usage_error(cli, tmp_path, command, steps):
    with FakeOpenAI(default=reply("4")) as server:
        done = cli(*command, "--mode", "llm", "--base-url", server.base_url, "--model", "m",
                   "--max-steps", steps)
        assert server.requests == []
    assert done.returncode == 2 and "--max-steps: must be at least 1" in one_line(done)
    assert not list(tmp_path.rglob("trajectory.json"))


def test_max_steps_0_in_a_config_file_is_refused_naming_it(cli, tmp_path):
    (tmp_path / "xdg" / "lis-tui").mkdir(parents=True)
    (tmp_path / "xdg" / "lis-tui" / "config.toml").write_text("[agent]\nmax_steps = 0\n")
    done = cli("run", "--mode", "llm", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "hi")
    line = one_line(done)
    assert done.returncode == 2 and "config.toml" in line and "at least 1" in line, line


@pytest.mark.parametrize("flag", ["--input-dir", "--documents-dir"])
@pytest.mark.parametrize("given", ["/nonexistent", "afile"])
def test_a_bad_input_dir_makes_no_run_folder(cli, tmp_path, afile, flag, given):
    with FakeOpenAI(default=submit()) as server:
        done = cli("run", flag, given, "--rootfs", "host", "--base-url", server.base_url, "--model", "m", "hi")
        assert server.requests == []
    line = one_line(done)
    assert done.returncode == 1 and f"{flag} DIR" in line and given in line, line
    assert not list(tmp_path.rglob("trajectory.json")) and not (tmp_path / "lis-output").exists()


def test_replay_of_a_file_that_is_not_json_says_so(cli, afile):
    done = cli("replay", str(afile))
    line = one_line(done)
    assert done.returncode == 2 and "it is not JSON" in line and "Expecting value" not in line, line


def rootfs_build(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`lis-tui rootfs build` without mmdebstrap on PATH: nothing is built, whatever the code does."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": str(tmp_path / "no-such-bin")}
    return subprocess.run([sys.executable, "-m", "lis_tui.cli", "rootfs", "--store", str(tmp_path / "store"),
                           "build", *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)


def test_rootfs_build_says_what_it_builds_under_a_name_that_is_no_distribution(tmp_path):
    done = rootfs_build(tmp_path, "nosuchdistro")
    first = done.stderr.splitlines()[0]
    assert "'nosuchdistro': Ubuntu noble" in first and "the name is only a name" in first, done.stderr


@pytest.mark.parametrize("name, fix", [("debian", "--suite bookworm --mirror http://deb.debian.org/debian"),
                                       ("jammy", "--suite jammy"), ("alpine", "lis-tui rootfs import alpine")])
def test_rootfs_build_of_another_distribution_s_name_is_refused_with_the_fix(tmp_path, name, fix):
    done = rootfs_build(tmp_path, name)
    assert done.returncode == 2 and fix in said(done), done.stderr
    assert not (tmp_path / "store" / name).exists()


def test_bench_quiet_says_where_the_results_are_and_the_report_links_each_episode_s_steps(cli, tmp_path):
    with FakeOpenAI(default=reply("The answer is 4.")) as server:
        done = cli("bench", "demo", "--mode", "llm", "-q", "--base-url", server.base_url, "--model", "m",
                   "--output", "out")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and "results in out" in done.stderr
    report = (tmp_path / "out" / "report.html").read_text()
    pages = re.findall(r'<a href="(episodes/[^"]+/trajectory\.html)">steps</a>', report)
    assert len(pages) == 4, report  # the four demo tasks
    page = (tmp_path / "out" / pages[0]).read_text()
    assert "The answer is 4." in page and "<h2>Task</h2>" in page
    assert 'href="trajectory.json">raw JSON</a>' in page and 'href="../../report.html"' in page


def test_a_note_s_install_command_stays_copyable_in_summary_md_and_report_html(tmp_path):
    from isolation.extras import install_hint
    from lis_tui.bench.paper.instructions import FALLBACK_NOTE
    from lis_tui.bench.report.pages import write_reports

    hint = install_hint("ifbench")
    record = {"id": "a", "mode": "llm", "repeat": 0, "domain": "if", "reward": 1.0, "correct": True,
              "answer": "x", "finish_reason": "submitted", "steps": 1, "wall_time": 1.0,
              "tokens": {"prompt": 1, "completion": 1, "environment": 0, "trajectory": 2},
              "capability": {}, "notes": [FALLBACK_NOTE.format(hint=hint)]}
    write_reports([record], tmp_path)
    summary = (tmp_path / "summary.md").read_text()
    assert f"`{hint}`" in summary and "\\[" not in summary.split("Note:")[1]
    assert f"<code>{html.escape(hint)}</code>" in (tmp_path / "report.html").read_text()


def test_one_mode_s_table_is_not_titled_sandbox_against_llm(tmp_path):
    from lis_tui.bench.report.pages import markdown, write_reports

    record = {"id": "a", "mode": "sandbox", "repeat": 0, "domain": "math", "reward": 1.0,
              "correct": True, "answer": "4", "finish_reason": "submitted", "steps": 2,
              "wall_time": 1.0, "tokens": {"prompt": 10, "completion": 2, "environment": 1, "trajectory": 12},
              "capability": {}}
    summary = write_reports([record], tmp_path)
    text = markdown(summary)
    assert "sandbox against LLM" not in text and "## Per domain: sandbox mode only" in text
    assert "ratio" not in text.split("## Per domain")[1].split("##")[0]


def test_an_episode_s_page_shows_what_the_model_and_sandbox_wrote_escaped(tmp_path):
    """The trajectory is the model's and the sandbox's text: no markup, no raw control character."""
    from fakes.hostile import HOSTILE, raw_in
    from lis_tui.bench.report.pages import write_reports

    folder = tmp_path / "episodes" / "a.sandbox.0"
    folder.mkdir(parents=True)
    evil = f"<script>alert(1)</script>{HOSTILE}"
    (folder / "trajectory.json").write_text(json.dumps({
        "id": evil, "mode": "sandbox", "task": evil, "finish_reason": "submitted", "answer": evil,
        "steps": [{"step": 1, "text": evil, "reasoning": evil, "tool_calls": [
            {"name": "execute_bash", "arguments": json.dumps({"command": evil}), "output": evil,
             "exit_code": 0}, {"name": evil, "arguments": "{", "output": 7, "error": True}]},
            "not a step"]}))
    record = {"id": "a", "mode": "sandbox", "repeat": 0, "domain": "d", "reward": 0.0, "correct": False,
              "answer": "x", "finish_reason": "submitted", "steps": 1, "wall_time": 1.0,
              "tokens": {"prompt": 1, "completion": 1, "environment": 0, "trajectory": 2},
              "capability": {}, "trajectory": "episodes/a.sandbox.0/trajectory.json"}
    write_reports([record], tmp_path)
    page = (folder / "trajectory.html").read_text()
    assert "<script" not in page and raw_in(page) == [] and "&lt;script&gt;" in page
    assert page.count("\\x1b]52;c;SGFja2Vk\\x07") >= 6  # each field shown, made visible
    assert 'href="episodes/a.sandbox.0/trajectory.html">steps</a>' in (tmp_path / "report.html").read_text()
