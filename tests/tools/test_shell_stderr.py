"""`Shell(separate_stderr=True)`: a command's stderr apart from its stdout, for the paper's
observation format; the default shell keeps them interleaved, as a terminal shows them."""
from __future__ import annotations

import pytest

from tools.shell import Shell

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def apart(sb):
    with Shell(sb, separate_stderr=True, timeout=2, max_output=2000) as shell:
        yield shell


def test_stdout_and_stderr_come_apart_with_the_exit_code(apart):
    r = apart.run("echo out; echo err >&2; ls /nope; echo more")
    assert (r.output, r.exit_code) == ("out\nmore", 0)
    assert r.stderr == "err\nls: cannot access '/nope': No such file or directory"
    r = apart.run("python3 -c 'print(1); raise SystemExit(\"boom\")'")
    assert (r.output, r.stderr, r.exit_code) == ("1", "boom", 1)


def test_a_command_without_stderr_has_none_left_from_the_one_before(apart):
    apart.run("echo old >&2")
    assert apart.run("echo fresh").stderr == ""


def test_a_syntax_error_is_stderr_and_the_shell_goes_on(apart):
    r = apart.run("echo 'unterminated")
    assert r.exit_code == 2 and "unexpected EOF" in r.stderr and r.stderr.startswith("bash: line 1:")
    assert apart.run("echo ok").output == "ok"


def test_a_flood_of_stderr_is_cut_to_its_head_and_tail(apart):
    r = apart.run("for i in $(seq 20000); do echo e$i >&2; done; echo done")
    assert r.output == "done" and r.truncated
    head, tail = r.stderr.split("bytes of stderr cut from the middle ...]")
    assert head.startswith("e1\ne2\n") and tail.rstrip().endswith("e20000")
    assert len(r.stderr) < 2200


def test_a_timeout_keeps_what_the_command_said_and_state_carries_over(apart):
    r = apart.run("cd /tmp; X=1; echo before >&2; sleep 5")
    assert r.timed_out and r.stderr == "before" and "timed out" in r.output
    assert apart.run("echo $X $PWD").output == "1 /tmp"


@pytest.mark.parametrize("plant", ["mkfifo {err}", "ln -s /tmp/target {err}", "mkdir {err}"])
def test_a_fifo_link_or_folder_planted_as_the_file_neither_hangs_nor_is_followed(apart, plant):
    err = apart._err_file  # noqa: SLF001 (the attack needs the name)
    r = apart.run(f"echo keep > /tmp/target; rm -rf {err}; {plant.format(err=err)}")
    assert r.exit_code == 0
    r = apart.run("echo still; echo mine >&2")  # the planted thing is replaced, not written through
    assert (r.output, r.stderr) == ("still", "mine")
    assert apart.run("cat /tmp/target").output == "keep"


@pytest.mark.parametrize("target", ["/proc/self/environ", "/proc/thread-self/environ", "/dev/zero",
                                    "/tmp/fifo", "/tmp/sparse"])
def test_a_link_the_command_leaves_at_its_stderr_file_reads_nothing_of_ours(apart, target, monkeypatch):
    """The command itself swaps its stderr file for a link, read after it ends from our process:
    /proc/self there would be lis-tui's own (its environment holds API keys) if the walk left the
    sandbox's pid namespace; a device or fifo would block or never end; a sparse file is huge."""
    monkeypatch.setenv("LIS_AUDIT_MARK", "host-env-7c1e")
    err = apart._err_file  # noqa: SLF001 (the attack needs the name)
    r = apart.run(f"mkfifo /tmp/fifo 2>/dev/null; truncate -s 6G /tmp/sparse; echo x >&2; "
                  f"rm -f {err} && ln -s {target} {err} && readlink {err}", timeout=10)
    assert (r.output, r.exit_code, r.timed_out) == (target, 0, False)  # the link was in place
    assert "host-env-7c1e" not in (r.stderr or "") and "PATH=" not in (r.stderr or "")
    assert len(r.stderr or "") < 2200


def test_the_default_shell_interleaves_as_a_terminal_does(sb):
    with Shell(sb) as shell:
        r = shell.run("echo out; echo err >&2")
    assert (r.output, r.stderr) == ("out\nerr", None)


def test_read_file_ends_gives_head_tail_and_the_count_between(sb):
    sb.write_file("/tmp/ends.txt", b"0123456789")
    assert sb.read_file_ends("/tmp/ends.txt", 3, 2) == (b"012", 5, b"89")
    assert sb.read_file_ends("/tmp/ends.txt", 8, 2) == (b"0123456789", 0, b"")
    with pytest.raises(FileNotFoundError):
        sb.read_file_ends("/tmp/none.txt", 3, 2)
