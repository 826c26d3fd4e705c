"""The persistent shell (issue 4), against a real sandbox: one test per requirement, or close to it."""
from __future__ import annotations

import re
import threading
import time

import pytest

from isolation import Sandbox
from tools import ToolResult
from tools.shell import Shell, ShellError

pytestmark = pytest.mark.sandbox


@pytest.fixture
def sandbox():
    with Sandbox() as sb:
        yield sb


@pytest.fixture
def shell(sandbox):
    # A short kill grace keeps the escalation tests quick; the default is 2 s.
    with Shell(sandbox, kill_grace=0.5) as sh:
        yield sh


def run(shell: Shell, command: str, **kwargs) -> ToolResult:
    result = shell.run(command, **kwargs)
    assert isinstance(result, ToolResult)
    return result


# ---- state persists between calls -------------------------------------------------------------


def test_cd_exports_functions_and_aliases_persist(shell):
    run(shell, "mkdir -p /tmp/w && cd /tmp/w && export FOO=bar && f() { echo fn-$1; }; alias hi='echo alias'")
    r = run(shell, "pwd; echo $FOO; f x; hi")
    assert (r.output, r.exit_code) == ("/tmp/w\nbar\nfn-x\nalias", 0)


def test_files_and_background_processes_persist(shell):
    run(shell, "echo kept > /testbed/f.txt; sleep 300 & echo $! > /tmp/pid")
    r = run(shell, "cat /testbed/f.txt; kill -0 $(cat /tmp/pid) && echo alive; jobs")
    assert r.output.splitlines()[:2] == ["kept", "alive"]
    assert "Running" in r.output and "sleep 300" in r.output


def test_background_server_returns_at_once_and_keeps_serving(shell):
    # If run() waited for the server, it would time out: the server never ends on its own.
    r = run(shell, "python3 -m http.server 8731 --bind 127.0.0.1 >/dev/null 2>&1 &", timeout=30)
    assert not r.timed_out and r.exit_code == 0
    fetch = ("for i in $(seq 100); do python3 -c \"import urllib.request as u; "
             "print(u.urlopen('http://127.0.0.1:8731/').status)\" 2>/dev/null && break; sleep 0.1; done")
    assert run(shell, fetch, timeout=60).output == "200"


def test_background_output_between_calls_does_not_stop_the_job(shell, sandbox):
    # 20,000 lines are far more than a pty holds: unread, the job would block on write.
    run(shell, "(seq 1 20000 | while read i; do echo \"line $i\"; done; echo done > /tmp/done) &")
    for _ in range(600):  # no call runs meanwhile; 60 s bounds a hang, it takes well under 1 s
        if sandbox.exec("test -e /tmp/done").exit_code == 0:
            break
        time.sleep(0.1)
    assert sandbox.exec("cat /tmp/done").stdout == "done\n"
    r = run(shell, "echo mine")
    assert r.output.startswith("line 1\n") and r.output.endswith("mine") and r.truncated


# ---- exit codes and `exit` ----------------------------------------------------------------------


@pytest.mark.parametrize("command, code", [
    ("true", 0), ("false", 1), ("(exit 3)", 3), ("bash -c 'exit 5'", 5), ("no-such-command", 127),
    ("return 4", 4), ("false | true", 0), ("set -o pipefail; false | true; r=$?; set +o pipefail; exit_=$r; (exit $r)", 1),
])
def test_exact_exit_codes(shell, command, code):
    assert run(shell, command).exit_code == code


def test_plain_exit_starts_a_fresh_shell_in_the_last_cwd(shell):
    run(shell, "export GONE=1; sleep 300 & echo $! > /tmp/pid")
    r = run(shell, "mkdir -p /tmp/here; cd /tmp/here; echo bye; exit 7")
    assert r.exit_code == 7
    assert r.output.startswith("bye\n")
    assert "The shell exited (exit code 7)" in r.output and "fresh shell was started in /tmp/here" in r.output
    r = run(shell, "pwd; echo \"[$GONE]\"; kill -0 $(cat /tmp/pid) && echo bg-alive")
    assert r.output == "/tmp/here\n[]\nbg-alive"


def test_the_tools_folder_comes_with_the_sandbox_and_again_when_removed(sandbox):
    assert sandbox.exec("test -d /tmp/lis").exit_code == 0  # a shell's start runs no mkdir
    with Shell(sandbox) as sh:
        run(sh, "rm -rf /tmp/lis")
        assert run(sh, "echo back").output == "back"


def test_set_e_failure_ends_the_shell_and_says_so(shell):
    r = run(shell, "set -e; false")
    assert r.exit_code == 1 and "The shell exited" in r.output
    assert run(shell, "false; echo still-here").output == "still-here"


# ---- output ----------------------------------------------------------------------------------------


def test_stdout_and_stderr_in_order_without_echo(shell):
    r = run(shell, "echo one; echo two >&2; echo three")
    assert r.output == "one\ntwo\nthree"


def test_ansi_escapes_and_carriage_return_redraws_are_cleaned(shell):
    r = run(shell, r"printf '\033[1;31mred\033[0m \033]0;title\007plain\n'; "
                   r"printf 'step 10%%\rstep 100%%\n'; printf 'ab\bc\n'")
    assert r.output == "red plain\nstep 100%\nac"


def test_invalid_utf8_and_binary_output_are_replaced(shell):
    assert run(shell, r"printf 'ok\377\376end'").output == "ok\ufffd\ufffdend"
    r = run(shell, "head -c 200000 /dev/urandom")
    assert r.exit_code == 0
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", r.output)


def test_unicode_passes_through(shell):
    assert run(shell, "echo 'héllo ✓ 🎉'").output == "héllo ✓ 🎉"


def test_flood_is_cut_to_head_and_tail_and_saved_whole(sandbox):
    with Shell(sandbox, max_output=1000) as sh:
        r = sh.run("seq 1 200000")
        assert r.truncated and r.exit_code == 0
        assert r.output.startswith("1\n2\n3\n") and r.output.endswith("\n199999\n200000")
        assert len(r.output) < 1400
        path = re.search(r"saved in (/tmp/lis/out-\d+\.log)", r.output).group(1)
        assert re.search(r"\[\.\.\. [\d,]+ characters \([\d,]+ lines\) cut", r.output)
        assert sh.run(f"wc -l < {path}; tail -n 1 {path}").output == "200000\n200000"


def test_endless_output_stays_bounded_until_the_timeout(sandbox):
    with Shell(sandbox, max_output=2000, kill_grace=0.5) as sh:
        r = sh.run("yes", timeout=1)
        assert r.timed_out and r.truncated
        assert len(r.output) < 3000 and r.output.startswith("y\ny\n")


def test_small_output_is_not_truncated(shell):
    r = run(shell, "seq 1 100")
    assert not r.truncated and r.output.splitlines() == [str(i) for i in range(1, 101)]


# ---- what commands look like ---------------------------------------------------------------------


def test_multi_line_commands_heredocs_and_chains(shell):
    r = run(shell, "x=1\nif [ $x = 1 ]; then\n  echo yes\nfi\ncat <<'EOF'\n$HOME \"q\" 'p' \\n\nEOF\n"
                   "cat <<EOF\nhome=$HOME\nEOF\ntrue && echo and; false || echo or; echo semi")
    assert r.output == "yes\n$HOME \"q\" 'p' \\n\nhome=/root\nand\nor\nsemi"


def test_quotes_of_every_kind(shell):
    r = run(shell, r"""printf '%s|' "a'b" 'c"d' $'e\tf' "\$HOME" `echo g` $(echo h) \! 'x!y' "back\\slash" """)
    assert r.output == "a'b|c\"d|e\tf|$HOME|g|h|!|x!y|back\\slash|"


def test_long_commands_pass_the_tty_line_limit(shell):
    word = "x" * 10000
    assert run(shell, f"echo {word}").output == word
    script = "python3 - <<'EOF'\n" + "".join(f"print({i}, 'é\\t', \"q'\")\n" for i in range(3000)) + "EOF"
    r = run(shell, script)
    assert r.exit_code == 0 and r.output.endswith("2999 é\t q'")


@pytest.mark.parametrize("command, message", [
    ("echo 'unclosed", "unexpected EOF while looking for matching"),
    ("if true; then", "syntax error"),
    ("fi", "syntax error near unexpected token `fi'"),
    ("echo $((1 +))", "syntax error: operand expected"),
])
def test_syntax_errors_are_reported_not_left_waiting(shell, command, message):
    r = run(shell, command, timeout=30)
    assert not r.timed_out and r.exit_code != 0
    assert message in r.output and r.output.startswith("bash: ") and "/tmp/lis" not in r.output
    assert run(shell, "echo fine").output == "fine"


def test_empty_and_comment_only_commands(shell):
    assert run(shell, "").output == "" and run(shell, "# nothing").exit_code == 0


# ---- input and environment --------------------------------------------------------------------


def test_stdin_is_dev_null(shell):
    r = run(shell, "read x; echo \"[$x] $?\"; cat; python3 -c 'input()' 2>&1 | tail -n 1", timeout=30)
    assert not r.timed_out
    assert r.output == "[] 1\nEOFError: EOF when reading a line"


def test_stdin_text_when_asked_for(shell):
    assert run(shell, "read a; read b; echo \"$b$a\"", stdin="x\ny\n").output == "yx"
    assert run(shell, "cat", stdin="").output == ""


def test_pagers_and_prompts_are_off(shell):
    r = run(shell, "echo $PAGER $GIT_PAGER $DEBIAN_FRONTEND $TERM")
    assert r.output == "cat cat noninteractive dumb"
    r = run(shell, "command -v git >/dev/null || exit_=skip; cd /tmp && git init -q g && cd g && "
                   "git -c user.email=a@b -c user.name=n commit -q --allow-empty -m first && git log --oneline | wc -l",
            timeout=60)
    assert not r.timed_out


def test_a_program_that_turns_echo_back_on_does_not_echo_our_input(shell):
    run(shell, "python3 -c \"import termios; fd = open('/dev/tty'); a = termios.tcgetattr(fd); "
               "a[3] |= termios.ECHO; termios.tcsetattr(fd, termios.TCSANOW, a)\"")
    assert run(shell, "echo after").output == "after"


def test_set_x_shows_the_commands_traces_only(shell):
    r = run(shell, "set -x; echo traced")
    assert "traced" in r.output and "builtin" not in r.output and "/tmp/lis" not in r.output
    run(shell, "set +x")


# ---- timeouts and interrupts ----------------------------------------------------------------------


def test_default_timeout_is_two_minutes(sandbox):
    with Shell(sandbox) as sh:
        assert sh.timeout == 120


def test_timeout_interrupts_and_the_shell_survives(shell):
    run(shell, "export KEEP=me; cd /tmp")
    r = run(shell, "echo started; sleep 100; echo never", timeout=1)
    assert r.timed_out and r.exit_code == 130
    assert r.output.startswith("started\n") and "never" not in r.output
    assert "timed out after 1 s" in r.output and "SIGINT" in r.output
    assert run(shell, "echo $KEEP; pwd").output == "me\n/tmp"


def test_command_ignoring_sigint_is_killed(shell):
    ignore = "python3 -c 'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(100)'"
    r = run(shell, f"export KEEP=1; {ignore}", timeout=1)
    assert r.timed_out and "SIGKILL" in r.output
    assert run(shell, "echo $KEEP").output == "1"


def test_command_that_cannot_be_stopped_gets_a_fresh_shell(shell):
    r = run(shell, "cd /tmp; trap '' INT; while :; do :; done", timeout=1)
    assert r.timed_out and "fresh shell was started in /tmp" in r.output
    assert run(shell, "pwd; trap -p INT").output == "/tmp"  # the INT trap went with the old shell


def test_interrupt_from_another_thread(shell):
    timer = threading.Timer(0.5, shell.interrupt)
    timer.start()
    r = run(shell, "while :; do :; done", timeout=60)
    timer.join()
    assert not r.timed_out and r.exit_code == 130 and "Interrupted" in r.output
    assert run(shell, "echo ok").output == "ok"


def test_interrupt_when_idle_does_nothing(shell):
    shell.interrupt()
    assert run(shell, "echo ok").output == "ok"


def test_a_program_reading_the_terminal_is_stopped(shell):
    r = run(shell, "python3 -c \"open('/dev/tty').readline()\"", timeout=1)
    assert r.timed_out
    assert run(shell, "echo ok").output == "ok"


# ---- serialization, restart, close -----------------------------------------------------------------


def test_calls_are_serialized(shell, sandbox):
    results: dict[str, ToolResult] = {}
    order: list[str] = []

    def call(name: str, command: str) -> None:
        results[name] = shell.run(command, timeout=60)
        order.append(name)

    first = threading.Thread(target=call, args=("a", "until [ -e /tmp/go ]; do sleep 0.05; done; echo a"))
    first.start()
    while sandbox.exec("ls /tmp/lis/cmd-*.sh").exit_code != 0:  # the first call has started
        pass
    second = threading.Thread(target=call, args=("b", "echo b"))
    second.start()
    second.join(0.3)
    assert second.is_alive()  # waiting for the first call, not running beside it
    sandbox.exec("touch /tmp/go")
    first.join(60)
    second.join(60)
    assert order == ["a", "b"] and results["a"].output == "a" and results["b"].output == "b"


def test_restart_resets_variables_and_keeps_cwd_and_files(shell):
    run(shell, "cd /tmp; export V=1; echo f > /tmp/file")
    shell.restart()
    assert run(shell, "pwd; echo \"[$V]\"; cat /tmp/file").output == "/tmp\n[]\nf"


def test_close_is_idempotent_and_final(sandbox):
    sh = Shell(sandbox)
    sh.close()
    sh.close()
    with pytest.raises(ShellError):
        sh.run("true")


def test_close_ends_the_drain_thread(sandbox):
    def drainers() -> int:
        return sum(t.name == "lis-shell-drain" for t in threading.enumerate())

    before = drainers()
    sh = Shell(sandbox)
    assert drainers() == before + 1
    sh.close()
    for _ in range(100):  # bounds a hang; the thread ends at once
        if drainers() == before:
            break
        time.sleep(0.05)
    assert drainers() == before


# ---- edges a differential test found (issue 17) -------------------------------------------------


def test_job_notices_stay_out_of_the_output(shell):
    assert run(shell, "sleep 0.2 & wait; echo done").output == "done"
    assert run(shell, "sleep 0.1 & sleep 0.5; echo x").output == "x"
    r = run(shell, "sleep 30 & jobs; kill %1")  # what `jobs` shows of running jobs stays
    assert "Running" in r.output and "sleep 30" in r.output


def test_interrupt_still_works_with_background_jobs(shell):
    run(shell, "sleep 300 & echo $! > /tmp/bg")
    timer = threading.Timer(0.5, shell.interrupt)
    timer.start()
    r = run(shell, "sleep 100", timeout=60)
    timer.join()
    assert r.exit_code == 130 and "Interrupted" in r.output
    assert run(shell, "kill -0 $(cat /tmp/bg) && echo bg-alive").output == "bg-alive"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("program", ["less /etc/services", "vi /tmp/vi.txt"])
def test_full_screen_program_ends_within_a_second_of_its_timeout(sandbox, program):
    command = program.split()[0]
    with Shell(sandbox) as sh:  # the default kill grace
        if sh.run(f"command -v {command}").exit_code != 0:
            pytest.skip(f"no {command} in this rootfs")
        start = time.monotonic()
        r = sh.run(program, timeout=2)
        assert r.timed_out and time.monotonic() - start < 3
        assert sh.run("echo ok; ls /tmp/vi.txt 2>/dev/null").output == "ok"  # our sentinel typed nothing


def test_a_commit_in_a_read_only_git_says_why_and_how_the_user_allows_it(tmp_path):
    import subprocess

    from isolation import SandboxSpec

    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    with Sandbox(SandboxSpec(workspace=ws)) as sb, Shell(sb) as sh:
        refused = run(sh, "git -c user.name=m -c user.email=m@x commit -q --allow-empty -m x")
        fine = run(sh, "git status --short; false")
    assert refused.exit_code != 0 and "Read-only file system" in refused.output
    assert refused.output.endswith("[workspace] git_writable = true in lis-tui's config.]")
    assert "git_writable" not in fine.output  # only where git met the read-only .git
