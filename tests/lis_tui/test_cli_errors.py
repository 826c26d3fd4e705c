"""No traceback reaches a user: every command, given a missing path, a file for a folder, a URL
without its scheme, a full scratch disk or a mistyped flag, answers with one line that names the
fix and exits 2 (usage) or 1. `lis-tui` runs as a subprocess, as a person would run it."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, delay, reply, submit

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """`lis-tui ARGS` in this process (fast): its exit code and what it printed on stderr."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    from lis_tui.cli import main

    def call(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)
    return call


def one_line(done: subprocess.CompletedProcess) -> str:
    """The error a person sees: one line on stderr, no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith((" ", "usage:"))]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def afile(tmp_path: Path) -> Path:
    path = tmp_path / "afile"
    path.write_text("not a folder\n")
    return path


# -- item 7: paths that are missing, or files where folders belong ----------------------------

@pytest.mark.parametrize("given, why", [("/nonexistent", "No such file or directory"),
                                        ("afile", "Not a directory")])
def test_a_bad_workspace_is_one_line_not_a_traceback(cli, tmp_path, afile, given, why):
    done = cli("exec", "--workspace", given, "--", "true")
    line = one_line(done)
    assert done.returncode == 1 and why in line and "--workspace DIR" in line


def test_a_run_directory_that_cannot_be_made_is_one_line(cli, tmp_path, afile):
    done = cli("run", "--mode", "llm", "--base-url", "http://127.0.0.1:9/v1",
               "--model", "m", "--output-dir", str(afile / "run"), "hi")
    assert done.returncode == 2 and "choose another --output-dir" in one_line(done)


@pytest.mark.parametrize("argv, fix", [
    (["exec", "--input-dir", "afile", "--", "true"], "is not a directory"),
    (["exec", "--documents-dir", "/nonexistent", "--", "true"], "is not a directory"),
    (["run", "--task-file", "/nonexistent"], "cannot read the task file"),
    (["bench", "/nonexistent"], "give a .json/.jsonl file"),
    (["bench", "paper:math", "/nonexistent"], "no data file or folder"),
    (["rollout", "/nonexistent", "--policy-url", "http://127.0.0.1:9/v1", "--output", "o"],
     "no task file or directory"),
    (["tasks", "build", "/nonexistent", "-o", "x"], "cannot read /nonexistent"),
    (["trust", "/nonexistent"], "no lis-tui.toml"),
    (["replay", "/nonexistent"], "does not exist"),
    (["replay", "afile"], "cannot read afile"),
    (["rootfs", "import", "x", "/nonexistent"], "give the path of a tarball"),
    (["rootfs", "import", "x", "afile"], "not a readable tarball"),
    (["env", "serve", "--tasks", "/nonexistent", "--port", "0"], "no task file or directory"),
    (["env", "serve", "--allow-dir", "afile", "--port", "0"], "is not a folder"),
    (["sessions", "rm", "nope"], "no session 'nope'"),
    (["runs", "--dir", "/nonexistent"], "no such folder"),
    (["runs", "--dir", "afile"], "not a folder"),
])
def test_every_command_given_a_bad_path_answers_one_line(cli, tmp_path, afile, argv, fix):
    done = cli(*argv)
    assert done.returncode in (1, 2) and fix in one_line(done)


def test_a_full_scratch_disk_is_one_line_and_leaves_nothing(tmp_path):
    """ENOSPC where the sandbox writes its record (Record.make) and again where it clears it
    (release): a tmpfs of our own, filled, in a user and mount namespace of the test's."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "-Urm", "true"]).returncode:
        pytest.skip("no unprivileged user and mount namespaces for a small tmpfs")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = (f"mount -t tmpfs -o size=256k none {scratch} && "
              f"head -c 1M /dev/zero > {scratch}/fill 2>/dev/null; "
              f"{sys.executable} -m lis_tui.cli exec -- true; echo rc=$?; ls -A {scratch}")
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO), "LIS_SCRATCH": str(scratch),
                               "XDG_STATE_HOME": str(tmp_path / "state"),
                               "XDG_CONFIG_HOME": str(tmp_path / "xdg")},
                          capture_output=True, text=True, timeout=120)
    assert "No space left on device" in one_line(done)  # it ran out of space: the attack ran
    assert "LIS_SCRATCH" in done.stderr
    assert done.stdout.split() == ["rc=1", "fill"]  # no record, no scratch left behind


@pytest.mark.parametrize("where", ["afile", "/proc/nope/scratch"])
def test_a_scratch_that_cannot_be_made_is_one_line(cli, afile, where):
    done = cli("exec", "--", "true", env={"LIS_SCRATCH": where})
    line = one_line(done)
    assert done.returncode == 1 and "cannot write the sandbox scratch" in line and "LIS_SCRATCH" in line


# -- item 8: a URL without its scheme is refused at once ---------------------------------------

@pytest.mark.parametrize("argv", [
    ["run", "--base-url", "127.0.0.1:8791/v1", "--model", "m", "hi"],
    ["bench", "demo", "--mode", "llm", "--base-url", "127.0.0.1:8791/v1", "--model", "m"],
    ["rollout", "demo", "--policy-url", "127.0.0.1:8791/v1", "--output", "o"],
    ["bench", "demo", "--mode", "llm", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
     "--judge-model", "j", "--judge-base-url", "127.0.0.1:8791/v1", "--reward", "judge"],
])
def test_a_base_url_without_its_scheme_is_refused_with_the_fix(cli, tmp_path, argv):
    done = cli(*argv)
    line = one_line(done)
    assert done.returncode == 2 and "http://127.0.0.1:8791/v1" in line, line
    assert not (tmp_path / "lis-output").exists()  # refused before a run began


def test_a_base_url_from_the_environment_is_checked_too(cli, tmp_path):
    done = cli("run", "--model", "m", "hi", env={"OPENAI_BASE_URL": "localhost:8791/v1"})
    assert done.returncode == 2 and "env OPENAI_BASE_URL" in one_line(done)


def test_an_interrupted_bench_names_the_episodes_not_run(tmp_path):
    """SIGTERM while the second episode waits for the model: summary.md says which did not run."""
    with FakeOpenAI([reply("4"), delay(60, reply("x"))], default=submit()) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lis_tui.cli", "bench", "demo", "--mode", "llm", "-j", "1",
             "--base-url", server.base_url, "--model", "m", "--output", "out", "-q"],
            cwd=tmp_path, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env={**os.environ, "PYTHONPATH": str(REPO),
                            "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
        server.wait_for_requests(2, timeout=60)  # episode 1 answered, episode 2 waiting
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    summary = (tmp_path / "out" / "summary.md").read_text()
    results = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 1
    assert "## Not run" in summary and "3 episodes did not run" in summary
    assert results[0]["id"] not in summary.split("## Not run")[1]
    assert "--resume" in summary and "Traceback" not in err


# -- item 11: mistyped and shortened flags --------------------------------------------------------

@pytest.mark.parametrize("argv, hint", [
    (["exec", "--netwrok", "on", "--", "true"], "--network"),
    (["--netwrok", "on"], "--network"),  # the app's flags, not the task "on"
    (["run", "--max-step", "3", "hi"], "--max-steps"),  # an abbreviation is not taken
    (["bench", "demo", "--max-step=3"], "--max-steps"),
    (["rootfs", "build", "--mirrr", "m", "x"], "--mirror"),
    (["env", "serve", "--tokn", "t"], "--token"),
    (["runs", "--jsn"], "--json"),
])
def test_a_mistyped_flag_is_refused_with_did_you_mean(cli, tmp_path, argv, hint):
    done = cli(*argv)
    assert done.returncode == 2 and f"(did you mean {hint}?)" in one_line(done)


@pytest.mark.parametrize("command", [
    ["exec"], ["shell"], ["doctor"], ["rootfs", "list"], ["run"], ["runs"], ["config"], ["trust"],
    ["sessions", "list"], ["bench", "demo"], ["tasks", "build", "x", "-o", "y"], ["tui"],
    ["rollout", "demo", "--policy-url", "http://127.0.0.1:9/v1", "--output", "o"],
    ["env", "serve"], ["mcp"], ["replay", "x"],
])
def test_every_command_refuses_an_unknown_flag_in_one_line(cli, tmp_path, command):
    done = cli(*command, "--no-such-flag")
    assert done.returncode == 2 and "--no-such-flag" in one_line(done)


def test_an_install_hint_names_a_pip_that_works_and_the_extras_packages(tmp_path):
    """`pip install 'lis-tui[paper]'` finds nothing (no index has lis-tui) and a system pip refuses
    (PEP 668): the hint names this Python's pip and where lis-tui came from, and running it is a
    dry run that resolves."""
    from isolation.extras import install_hint

    hint = install_hint("paper")
    assert hint.startswith(f"{sys.executable} -m pip install ") and "[paper]" in hint
    assert "'lis-tui[paper]'" not in hint
    words = hint.split()
    if "-e" in words:  # installed from a checkout: the path is that checkout, with its pyproject
        where = words[words.index("-e") + 1].strip("'").rsplit("[", 1)[0]
        assert (Path(where) / "pyproject.toml").is_file()


def test_run_sends_max_tokens_and_temperature(cli):
    with FakeOpenAI([reply("ANSWER: 4")]) as server:
        done = cli("run", "--mode", "llm", "--base-url", server.base_url, "--model", "m",
                   "--max-tokens", "64", "--temperature", "0.2", "--output-dir", "r", "2+2?")
        (request,) = server.chat_requests
    assert done.returncode == 0, done.stderr
    assert (request.body["max_tokens"], request.body["temperature"]) == (64, 0.2)


# -- item 12: smaller things a person sees ---------------------------------------------------------

def test_runs_names_the_server_default_model_not_a_dash(cli):
    with FakeOpenAI([reply("ANSWER: 4")]) as server:  # no --model: the server's default answers
        assert cli("run", "--mode", "llm", "--base-url", server.base_url, "2+2?").returncode == 0
    done = cli("runs")
    (row,) = done.stdout.splitlines()[1:]
    assert "(server default)" in row and " - " not in row


def test_bench_progress_into_a_file_is_a_line_per_tenth_not_per_episode():
    import io

    from lis_tui.bench.report.progress import Progress

    out = io.StringIO()  # not a terminal: a log file, CI
    progress = Progress(out, total=200, every=1e9)  # the time trigger out of the way
    for _ in range(200):
        progress.begin()
        progress.end()
        progress.add({"correct": True})
    progress.show(final=True)
    lines = out.getvalue().splitlines()
    assert 11 <= len(lines) <= 12 and "[200/200]" in lines[-1]  # start, ten tenths, the end
    assert Progress(io.StringIO(), total=1).every >= 30  # the clock's line: twice a minute at most


def test_shell_says_what_it_is_in_and_how_to_leave(tmp_path):
    """`lis-tui shell` on a terminal of ours: the banner comes before the first prompt."""
    import pexpect

    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "TERM": "xterm"}
    child = pexpect.spawn(sys.executable, ["-m", "lis_tui.cli", "shell", "--network", "off"],
                          env=env, cwd=str(tmp_path), encoding="utf-8", timeout=60)
    try:
        child.expect("lis-tui shell: a fresh sandbox")
        child.expect(r"\(lis-sandbox\)")
        banner = child.before
        assert "rootfs host, network off" in banner and "`exit` or Ctrl-D leaves" in banner
        child.sendline("exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_what_another_user_owns_at_a_workspaces_top_is_found_without_walking_it(tmp_path):
    from isolation.host.owners import others_own

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.txt").write_text("x")
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "link").symlink_to("a.txt")
    me = os.geteuid()
    assert others_own(tmp_path) is None  # all mine
    found = others_own(tmp_path, me=me + 1)  # as another user would find it
    assert (found.uid, found.folder, found.names) == (me, True, ("a.txt", "sub"))  # no link, nothing deeper
    assert others_own(tmp_path, me=me + 1, skip=("a.txt", "sub")).names == ()
    assert others_own(tmp_path / "missing") is None


@pytest.mark.sandbox
def test_a_workspace_another_user_owns_is_said_with_the_fix_where_exec_meets_it(tmp_path):
    """Inside, another user's file is `nobody`'s and "Permission denied"; the line before says why."""
    if os.geteuid() == 0:  # root's project, with a file of another user's in it
        project = tmp_path / "project"
        project.mkdir()
        (project / "os.py").write_text("x = 1\n")
        os.chown(project / "os.py", 4242, 4242)
        says = (f"lis-tui exec: in {project}, os.py is uid 4242's: run as root, the sandbox works as a stand-in for "
                "root, never as the host's root, so it cannot change what other users own there")
    else:  # a folder of root's, as an ordinary user
        project = Path(os.__file__).parent
        if project.stat().st_uid == os.geteuid():
            pytest.skip(f"{project} is this user's own")
        says = f"lis-tui exec: {project} is root's, not yours ("
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "lis_tui.cli", "exec", "--rootfs", "host", "--workspace", str(project),
                           "--", "echo x >> os.py"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    note, denied = done.stderr.splitlines()
    assert done.returncode == 1 and note.startswith(says) and "Fix: " in note, done.stderr
    assert "Permission denied" in denied
