"""`lis-tui run` as a subprocess: the paper's four demo tasks, exit codes, errors and Ctrl-C."""

import json
import os
import pty
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakes.hostile import HOSTILE, SHOWN, TITLE, raw_in
from fakes.openai_server import FakeOpenAI, call, error, reply, submit
from lis_tui.config import trust
from proctree import marked, markers_in

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
QUICK_RETRIES = """[model]
model = "m"
max_retries = 2
retry_base_delay = 0.001
retry_max_delay = 0.01
"""


def bash(command: str):
    return call("execute_bash", {"command": command})


def write(path: str, text: str):
    return call("str_replace_editor", {"command": "create", "path": path, "file_text": text})


def env_for(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LIS_MODEL")}
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), XDG_STATE_HOME=str(tmp_path / "state"),
               PYTHONPATH=path)
    return env


def project_config(tmp_path: Path, text: str) -> None:
    """Write ./lis-tui.toml and trust it, as its author would (`lis-tui trust`)."""
    (tmp_path / "lis-tui.toml").write_text(text)
    trust.trust(tmp_path, env=env_for(tmp_path))


def argv(base_url: str, *args: str) -> list[str]:
    # the host rootfs has python3; a default rootfs set on this machine might not
    return [sys.executable, "-m", "lis_tui.cli", "run", "--base-url", base_url, "--rootfs", "host",
            *args]


def lis_run(tmp_path: Path, base_url: str, *args: str) -> subprocess.CompletedProcess:
    """`lis-tui run` in a project directory whose lis-tui.toml makes retries quick."""
    project_config(tmp_path, QUICK_RETRIES)
    return subprocess.run(argv(base_url, "--output-dir", "out", *args), cwd=tmp_path,
                          env=env_for(tmp_path), capture_output=True, text=True, timeout=120)


def trajectory(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "trajectory.json").read_text())


# -- the paper's four demo tasks ------------------------------------------------------------------

def test_demo_add_two_numbers(tmp_path):
    def save_sum(request):
        return reply(tool_calls=[write("/testbed/output/answer.txt", request.tool_outputs[-1])])

    script = [reply("I will compute it.", [bash("python3 -c 'print(12345 + 67890)'")]), save_sum,
              submit()]
    with FakeOpenAI(script) as server:
        done = lis_run(tmp_path, server.base_url, "What is 12345 + 67890?")
    assert (done.returncode, done.stdout) == (0, "80235\n"), done.stderr
    assert "step   1  execute_bash python3 -c 'print(12345 + 67890)' → 0" in done.stderr
    assert "submitted after 3 steps" in done.stderr
    assert (tmp_path / "out" / "answer.txt").read_text() == "80235\n"


def test_demo_capital_city(tmp_path):
    script = [reply(tool_calls=[bash("echo Paris > /testbed/output/answer.txt")]), submit()]
    with FakeOpenAI(script) as server:
        done = lis_run(tmp_path, server.base_url, "What is the capital of France?")
    assert (done.returncode, done.stdout) == (0, "Paris\n"), done.stderr
    assert "What is the capital of France?" in server.chat_requests[0].messages[-1]["content"]


def test_demo_write_a_script_to_the_output_dir(tmp_path):
    script = [reply(tool_calls=[write("/testbed/output/hello.py", "print('hello, world')\n")]),
              reply(tool_calls=[bash("cd /testbed/output && python3 hello.py"),
                                bash("echo done > /testbed/output/answer.txt")]),
              submit()]
    with FakeOpenAI(script) as server:
        done = lis_run(tmp_path, server.base_url,
                       "Write a Python script that prints 'hello, world' to /testbed/output "
                       "and write 'done' to answer.txt")
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr
    assert server.chat_requests[2].tool_outputs[-2] == "hello, world"
    files = tmp_path / "out" / "files"
    assert (files / "hello.py").read_text() == "print('hello, world')\n"
    assert sorted(trajectory(tmp_path)["files"]) == ["answer.txt", "hello.py"]


def test_demo_sum_numbers_from_an_input_file(tmp_path):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "numbers.txt").write_text("17\n25\n")

    def save_sum(request):
        total = sum(int(n) for n in request.tool_outputs[-1].split())
        return reply(tool_calls=[bash(f"echo {total} > /testbed/output/answer.txt")])

    script = [reply(tool_calls=[bash("cat /testbed/input/numbers.txt")]), save_sum, submit()]
    with FakeOpenAI(script) as server:
        done = lis_run(tmp_path, server.base_url, "--input-dir", str(inputs),
                       "Add up the two numbers in the input file.")
    assert (done.returncode, done.stdout) == (0, "42\n"), done.stderr
    assert "see `ls /testbed/input`" in server.chat_requests[0].messages[-1]["content"]


# -- exit codes and failures ----------------------------------------------------------------------

def test_task_file_and_llm_mode(tmp_path):
    (tmp_path / "task.txt").write_text("What is 6 * 7?")
    with FakeOpenAI([reply("6 * 7 = 42")]) as server:
        done = lis_run(tmp_path, server.base_url, "--task-file", "task.txt", "--mode", "llm")
    assert (done.returncode, done.stdout) == (0, "6 * 7 = 42\n"), done.stderr
    assert server.chat_requests[0].messages[-1]["content"] == "What is 6 * 7?"


def test_max_steps_exits_3(tmp_path):
    with FakeOpenAI(default=reply(tool_calls=[bash("true")])) as server:
        done = lis_run(tmp_path, server.base_url, "--max-steps", "2", "loop")
    assert done.returncode == 3, done.stderr
    assert done.stdout == "" and "max_steps after 2 steps" in done.stderr


def test_500_forever_exits_1_with_one_clear_line_and_keeps_the_trajectory(tmp_path):
    script = [reply(tool_calls=[bash("echo step one")])]
    with FakeOpenAI(script, default=error(500, "out of memory")) as server:
        done = lis_run(tmp_path, server.base_url, "anything")
    assert done.returncode == 1
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("lis-tui run:")]
    assert "answered 500" in line and "out of memory" in line and "after 3 attempts" in line
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].endswith("(no /testbed/output/answer.txt was written)")  # it began
    saved = trajectory(tmp_path)
    assert saved["finish_reason"] == "error" and len(saved["steps"]) == 2
    assert saved["steps"][0]["tool_calls"][0]["output"] == "step one"


def test_server_down_exits_1(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    (tmp_path / "project").mkdir()
    done = lis_run(tmp_path, url, "--workspace", "project", "anything")
    assert done.returncode == 1
    assert "could not reach model server" in done.stderr and "Traceback" not in done.stderr
    # the run never began: nothing said of an answer.txt or a workspace it never had the chance to touch
    assert done.stderr.splitlines()[-1].endswith(f"saved in {tmp_path / 'out'}"), done.stderr
    assert "answer.txt" not in done.stderr and "workspace" not in done.stderr


@pytest.mark.parametrize("args, says", [
    ((), "give the task"),
    (("task", "--task-file", "t.txt"), "not both"),
    (("--task-file", "missing.txt"), "cannot read the task file"),
    (("--max-steps", "many", "task"), "invalid int value"),
])
def test_usage_errors_exit_2(tmp_path, args, says):
    done = lis_run(tmp_path, "http://127.0.0.1:9/v1", *args)
    assert done.returncode == 2 and says in done.stderr


def test_a_config_error_exits_2_naming_the_file(tmp_path):
    (tmp_path / "xdg" / "lis-tui").mkdir(parents=True)
    (tmp_path / "xdg" / "lis-tui" / "config.toml").write_text("[agent]\nmax_step = 3\n")
    done = lis_run(tmp_path, "http://127.0.0.1:9/v1", "task")
    assert done.returncode == 2
    assert "config.toml:2" in done.stderr and 'did you mean "max_steps"' in done.stderr


def test_config_command_shows_sources(tmp_path):
    project_config(tmp_path, "[agent]\nmax_steps = 7\n")
    done = subprocess.run([sys.executable, "-m", "lis_tui.cli", "config"], cwd=tmp_path,
                          env={**env_for(tmp_path), "OPENAI_API_KEY": "sk-secret-0123456789abcd"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert any(line.startswith("agent.max_steps") and "7" in line and "lis-tui.toml" in line
               for line in done.stdout.splitlines())
    assert "sk-secret-0123456789abcd" not in done.stdout and "sk-...abcd" in done.stdout


# -- hostile text ---------------------------------------------------------------------------------

def hostile_script():
    """A command, an editor path and an answer full of terminal escapes."""
    return [reply(tool_calls=[bash(f"true '{HOSTILE}'")]),
            reply(tool_calls=[write(f"/testbed/output/n{TITLE}\u202e.txt", "x"),
                              write("/testbed/output/answer.txt", f"42 {HOSTILE}\n")]),
            submit()]


def test_hostile_text_is_made_safe_on_stderr_and_stdout_stays_byte_exact_in_a_pipe(tmp_path):
    project_config(tmp_path, QUICK_RETRIES)
    with FakeOpenAI(hostile_script()) as server:
        done = subprocess.run(argv(server.base_url, "--output-dir", "out", "task"), cwd=tmp_path,
                              env=env_for(tmp_path), capture_output=True, timeout=120)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert done.stdout == (tmp_path / "out" / "answer.txt").read_bytes()
    assert f"42 {HOSTILE}\n".encode() == done.stdout  # the file's bytes, escapes and all
    assert raw_in(err) == [], err
    assert f"execute_bash true '{SHOWN[0]}" in err  # the command, its escapes visible
    assert "create /testbed/output/n\\x1b]0;pwned-title\\x07\\u202e.txt" in err


def test_hostile_answer_on_a_terminal_is_shown_safely(tmp_path):
    project_config(tmp_path, QUICK_RETRIES)
    master, slave = pty.openpty()  # stdout is a real terminal, as when a person runs it
    with FakeOpenAI(hostile_script()) as server:
        proc = subprocess.Popen(argv(server.base_url, "--output-dir", "out", "task"),
                                cwd=tmp_path, env=env_for(tmp_path), stdin=subprocess.DEVNULL,
                                stdout=slave, stderr=subprocess.PIPE)
        os.close(slave)
        shown = b""
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            shown += data
        os.close(master)
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 0, err
    text = shown.decode()
    assert raw_in(text) == [] and raw_in(err) == []
    assert text.strip() == "42 " + "".join(SHOWN[:5]) + " " + SHOWN[5]
    assert (tmp_path / "out" / "answer.txt").read_text() == f"42 {HOSTILE}\n"  # kept as made


# -- Ctrl-C -------------------------------------------------------------------------------------

def _pids_matching(text: str) -> set[int]:
    """Live processes whose command line holds `text` (zombies hold nothing, so they are left out:
    where pid 1 does not reap, a bwrap whose parent died first lingers as one)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if text in cmdline and state != "Z":
                found.add(int(entry.name))
    return found


def _wait_for(predicate, what: str, limit: float = 30.0):
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def test_sigint_mid_run_keeps_a_valid_trajectory_and_leaves_no_process(tmp_path):
    marker = f"sleep {4000 + os.getpid() % 1000}.5"
    scratch = tmp_path / "scratch"  # each sandbox of this run has its record there, naming its marker
    script = [reply(tool_calls=[bash("echo started")]), reply(tool_calls=[bash(marker)])]
    project_config(tmp_path, QUICK_RETRIES)
    with FakeOpenAI(script, default=submit()) as server:
        proc = subprocess.Popen(argv(server.base_url, "--output-dir", "out", "sleep a while"),
                                cwd=tmp_path, env={**env_for(tmp_path), "LIS_SCRATCH": str(scratch)},
                                text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _wait_for(lambda: _pids_matching(marker), "the command to start")
            markers = markers_in(scratch)
            assert marked(markers), "the sandbox's processes should be visible"
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 130, err
    saved = trajectory(tmp_path)
    assert saved["finish_reason"] == "cancelled"
    assert [s["step"] for s in saved["steps"]] == [1, 2]
    assert "Interrupted" in saved["steps"][1]["tool_calls"][0]["output"]
    assert not _pids_matching(marker) and not marked(markers)


# -- the live line ------------------------------------------------------------------------------

def test_on_a_terminal_the_running_step_is_shown_while_it_runs(tmp_path):
    import threading

    project_config(tmp_path, QUICK_RETRIES)
    seen, changed = [b""], threading.Condition()
    command = f"true '{HOSTILE}'; echo done"

    def held(request):  # the first reply waits until the test saw the model call on screen
        with changed:
            assert changed.wait_for(lambda: b"waiting for the model" in seen[0], 30)
        return reply(tool_calls=[bash(command)])

    master, slave = pty.openpty()  # stderr, where the log goes, is a terminal
    with FakeOpenAI([held, submit()]) as server:
        proc = subprocess.Popen(argv(server.base_url, "--output-dir", "out", "a task"), cwd=tmp_path,
                                env=env_for(tmp_path), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            with changed:
                seen[0] += data
                changed.notify_all()
        os.close(master)
        assert proc.wait(timeout=60) == 0
    text = seen[0].decode()
    assert "step   1  waiting for the model  0s" in text
    assert f"step   1  execute_bash true '{SHOWN[0]}" in text  # the command, made safe
    assert raw_in(text.replace("\r\x1b[K", "")) == []  # our erase, and nothing of the model's raw


def test_into_a_pipe_there_is_no_live_line(tmp_path):
    with FakeOpenAI([reply(tool_calls=[bash("echo hi")]), submit()]) as server:
        done = lis_run(tmp_path, server.base_url, "a task")
    assert done.returncode == 0, done.stderr
    assert "waiting for the model" not in done.stderr and "\r" not in done.stderr


def test_the_papers_observation_format_from_config(tmp_path):
    script = [reply(tool_calls=[bash("echo hi; echo oops >&2; false")]),
              reply(tool_calls=[write("/testbed/output/answer.txt", "done")]), submit()]
    project_config(tmp_path, QUICK_RETRIES + '\n[agent]\nobservation = "paper"\n')
    with FakeOpenAI(script) as server:
        done = subprocess.run(argv(server.base_url, "--output-dir", "out", "Try the shell."),
                              cwd=tmp_path, env=env_for(tmp_path), capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 0, done.stderr
    first, second = (r.messages[-1]["content"] for r in server.chat_requests[:2])
    assert first.endswith("\nSteps Remaining: 100")
    assert second == ("Exit code: Error: Exit code 1\nExecution output of \\[execute_bash]:\n"
                      "\\[STDOUT]\nhi\n\\[STDERR]\noops\nSteps Remaining: 99")


@pytest.mark.parametrize("config, flag, paper", [("", "paper", True),
                                                 ('\n[agent]\nobservation = "paper"\n', "lis-tui",
                                                  False)])
def test_the_observation_flag_sets_the_format_over_the_config(tmp_path, config, flag, paper):
    script = [reply(tool_calls=[bash("echo hi; echo oops >&2; false")]),
              reply(tool_calls=[write("/testbed/output/answer.txt", "done")]), submit()]
    project_config(tmp_path, QUICK_RETRIES + config)
    with FakeOpenAI(script) as server:
        done = subprocess.run(argv(server.base_url, "--output-dir", "out", "--observation", flag,
                                   "Try the shell."),
                              cwd=tmp_path, env=env_for(tmp_path), capture_output=True, text=True,
                              timeout=120)
    assert done.returncode == 0, done.stderr
    second = server.chat_requests[1].messages[-1]["content"]
    assert ("\\[STDERR]\noops\n" in second) is paper, second
    assert ("Steps Remaining: 99" in second) is paper, second
    assert "oops" in second and "hi" in second


def test_a_nesting_bomb_in_tool_arguments_is_answered_to_the_model_not_the_end_of_the_run(tmp_path):
    """A hostile model's arguments nested 100,000 deep raised RecursionError out of the agent
    loop: the run ended in an error. Now the model is told, and the run goes on."""
    script = [reply(tool_calls=[call("execute_bash", "[" * 100_000)]),
              reply(tool_calls=[bash("echo 42 > /testbed/output/answer.txt")]), submit()]
    with FakeOpenAI(script) as server:
        done = lis_run(tmp_path, server.base_url, "go")
        told = server.chat_requests[1].tool_outputs[-1]
    assert (done.returncode, done.stdout) == (0, "42\n"), done.stderr[-2000:]
    assert "nested too deeply" in told and "RecursionError" not in done.stderr
