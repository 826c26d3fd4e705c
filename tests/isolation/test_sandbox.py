"""Sandbox.exec, files and lifecycle, against real bwrap."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from isolation import Limits, NotARegularFile, Sandbox, SandboxError, SandboxSpec
from isolation import records
from isolation.output import ready
from isolation.spawn.forks import IDLE

pytestmark = pytest.mark.sandbox


def test_exec_returns_exit_code_and_separate_streams(sandbox):
    r = sandbox.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (3, "out\n", "err\n", False)


def test_exec_argv_form_is_not_reparsed_by_a_shell(sandbox):
    r = sandbox.exec(["printf", "%s|", "a b", "$HOME", ";"])
    assert r.stdout == "a b|$HOME|;|"


def test_exec_cwd_and_stdin(sandbox):
    assert sandbox.exec("pwd").stdout == "/testbed\n"
    assert sandbox.exec("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sandbox.exec(["wc", "-c"], stdin=b"x" * 300_000).stdout.strip() == "300000"


def test_invalid_utf8_is_replaced(sandbox):
    r = sandbox.exec(r"printf 'ok\377\376end'")
    assert r.stdout == "ok\ufffd\ufffdend"


def test_timeout_kills_the_whole_process_group(sandbox):
    r = sandbox.exec("sleep 300 & sleep 300; echo never", timeout=0.5)
    assert r.timed_out and r.exit_code == 124 and "never" not in r.stdout
    left = sandbox.exec("ps -eo comm | grep -c '^sleep$' || true").stdout.strip()
    assert left == "0"


def test_huge_output_is_capped_and_counted(sandbox):
    r = sandbox.exec("head -c 5000000 /dev/zero | tr '\\0' x", max_output=100_000)
    assert len(r.stdout) == 100_000 and r.dropped == 4_900_000 and r.exit_code == 0


def test_files_round_trip_bytes_and_mode(sandbox):
    data = bytes(range(256)) * 100
    sandbox.write_file("/testbed/deep/dir/blob.bin", data, mode=0o755)
    assert sandbox.read_file("/testbed/deep/dir/blob.bin") == data
    assert sandbox.exec("stat -c %a /testbed/deep/dir/blob.bin").stdout.strip() == "755"


def test_file_errors_are_python_errors(sandbox):
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("/testbed/missing")
    with pytest.raises(IsADirectoryError):
        sandbox.read_file("/testbed")
    with pytest.raises(PermissionError):
        sandbox.write_file("/usr/lis-test", b"x")


def test_symlinks_resolve_inside_the_sandbox_never_on_the_host(sandbox, tmp_path):
    host_file = tmp_path / "host-secret"
    host_file.write_text("host data")
    sandbox.exec(f"ln -s {host_file} /testbed/out; ln -s /tmp/victim /testbed/w")
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("/testbed/out")  # the host path does not exist in the sandbox
    sandbox.write_file("/testbed/w", b"inside")
    assert sandbox.read_file("/tmp/victim") == b"inside"
    assert not os.path.exists("/tmp/victim") or open("/tmp/victim", "rb").read() != b"inside"
    assert host_file.read_text() == "host data"


def test_read_file_cannot_be_led_out_by_dotdot_magic_links_or_proc_self(sandbox, tmp_path):
    host_file = tmp_path / "host-secret"
    host_file.write_text("host data")
    sandbox.exec(f"echo inside > /tmp/mine; ln -s ../../../../../../../../tmp/mine /testbed/up; "
                 f"ln -s /proc/1/root{host_file} /testbed/magic; ln -s /proc/self/environ /testbed/env")
    assert sandbox.read_file("/testbed/up") == b"inside\n"  # `..` stops at the sandbox's /
    with pytest.raises(OSError):
        sandbox.read_file("/testbed/magic")
    with pytest.raises(OSError):
        sandbox.read_file("/testbed/env")  # our own environment is not the sandbox's /proc/self
    with pytest.raises(OSError):
        sandbox.read_file(f"/proc/{os.getpid()}/environ")


def test_read_file_refuses_what_the_sandbox_could_not_read_and_never_blocks(sandbox):
    sandbox.exec("echo locked > /testbed/locked; chmod 000 /testbed/locked; mkfifo /testbed/fifo")
    assert sandbox.exec("cat /testbed/locked").exit_code != 0  # no capabilities inside, even as uid 0
    with pytest.raises(PermissionError):
        sandbox.read_file("/testbed/locked")
    with pytest.raises(OSError):
        sandbox.read_file("/testbed/fifo")


@pytest.fixture(params=["openat2", "process"])
def file_io(request, sandbox, monkeypatch):
    """The sandbox, its files read and written through openat2, or through a joined shell as on
    kernels without openat2."""
    if request.param == "process":
        from isolation.sandbox import files as sandbox_module  # where the reads and writes look them up
        from isolation.host.inroot import InRootUnavailable

        def no_openat2(*args):
            raise InRootUnavailable("Function not implemented")

        monkeypatch.setattr(sandbox_module, "read_in_root", no_openat2)
        monkeypatch.setattr(sandbox_module, "write_in_root", no_openat2)
    sandbox.exec("rm -rf /testbed/io; mkdir /testbed/io")
    return sandbox


def test_file_io_rules_are_the_same_with_or_without_openat2(file_io):
    sb = file_io
    sb.write_file("/testbed/io/new/deeper/f", b"a\0b", mode=0o600)  # parents made
    assert sb.read_file("/testbed/io/new/deeper/f") == b"a\0b"
    assert sb.read_file("/testbed/io/new/deeper/f", limit=1) == b"a"
    assert sb.exec("stat -c %a /testbed/io/new/deeper/f").stdout.strip() == "600"
    # an existing file is rewritten in place: its mode and its hard links stay
    sb.exec("printf old > /testbed/io/e; chmod 751 /testbed/io/e; ln /testbed/io/e /testbed/io/hard")
    sb.write_file("/testbed/io/e", b"new")
    assert sb.exec("stat -c %a /testbed/io/e; cat /testbed/io/hard").stdout.split() == ["751", "new"]
    with pytest.raises(FileExistsError):
        sb.write_file("/testbed/io/e", b"x", exclusive=True)
    sb.exec("ln -s /nowhere /testbed/io/dangling")
    with pytest.raises(FileExistsError):
        sb.write_file("/testbed/io/dangling", b"x", exclusive=True)
    sb.write_file("/testbed/io/excl", b"x", exclusive=True)
    assert sb.read_file("/testbed/io/excl") == b"x"
    with pytest.raises(IsADirectoryError):
        sb.write_file("/testbed/io", b"x")
    with pytest.raises(FileNotFoundError):
        sb.read_file("/testbed/io/missing")


def test_file_io_refuses_fifos_at_once_and_what_the_capless_root_may_not_touch(file_io):
    sb = file_io
    sb.exec("mkfifo /testbed/io/fifo; echo ro > /testbed/io/ro; chmod 444 /testbed/io/ro; "
            "mkdir /testbed/io/locked; chmod 555 /testbed/io/locked")
    started = time.monotonic()
    with pytest.raises(NotARegularFile):
        sb.read_file("/testbed/io/fifo")
    with pytest.raises(NotARegularFile):
        sb.write_file("/testbed/io/fifo", b"x")
    assert time.monotonic() - started < 10
    assert sb.exec("echo x > /testbed/io/ro").exit_code != 0  # no capabilities inside, even as uid 0
    with pytest.raises(PermissionError):
        sb.write_file("/testbed/io/ro", b"x")
    assert sb.read_file("/testbed/io/ro") == b"ro\n"
    with pytest.raises(PermissionError):
        sb.write_file("/testbed/io/locked/f", b"x")
    with pytest.raises(PermissionError):
        sb.write_file("/testbed/io/locked/sub/f", b"x")


def test_layout_has_testbed_input_output_tmp_and_home(sandbox):
    r = sandbox.exec("ls -d /testbed/input /testbed/output /tmp /root && echo $HOME && touch /tmp/t /root/r")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split()[-1] == "/root"


def test_input_dir_is_read_only(tmp_path):
    (tmp_path / "data.txt").write_text("42")
    with Sandbox(SandboxSpec(input_dir=tmp_path)) as sb:
        assert sb.read_file("/testbed/input/data.txt") == b"42"
        r = sb.exec("echo x > /testbed/input/data.txt; mount -o remount,rw /testbed/input; touch /testbed/input/new")
        assert r.exit_code != 0
    assert (tmp_path / "data.txt").read_text() == "42" and not (tmp_path / "new").exists()


def test_documents_dir_is_read_only_and_not_a_change(tmp_path):
    (tmp_path / "part1.txt").write_text("the fact is 7")
    with Sandbox(SandboxSpec(documents_dir=tmp_path)) as sb:
        assert sb.read_file("/testbed/documents/part1.txt") == b"the fact is 7"
        assert sb.exec("touch /testbed/documents/x").exit_code != 0
        assert sb.changes() == []


def test_state_lives_between_commands(sandbox):
    sandbox.exec("echo kept > /tmp/state; (sleep 300 &)")
    assert sandbox.read_file("/tmp/state") == b"kept\n"
    assert "sleep 300" in sandbox.exec("ps -eo args").stdout


def _read_until(fd: int, needle: bytes, timeout: float = 10.0) -> bytes:
    data, deadline = b"", time.monotonic() + timeout
    while needle not in data and ready([fd], deadline - time.monotonic()):
        data += os.read(fd, 4096)
    return data


def test_spawn_pty_gives_a_controlling_terminal_that_delivers_ctrl_c(sandbox):
    child = sandbox.spawn_pty(["bash", "--norc", "--noprofile", "-i"], dimensions=(30, 120))
    try:
        os.write(child.fd, b"PS1=; [ -t 0 ] && echo is-a-tty; stty size; tty; echo ready\n")
        seen = _read_until(child.fd, b"ready\r\n")
        assert b"is-a-tty" in seen and b"30 120" in seen
        assert b"/dev/pts/0\r\n" in seen  # a pty of the sandbox's own devpts: its name resolves inside
        # Ctrl-C reaches only the foreground job: the sleep dies, the interactive bash lives on.
        os.write(child.fd, b"sleep 30\n")
        time.sleep(0.5)
        os.write(child.fd, b"\x03")
        os.write(child.fd, b"echo status=$?\n")
        assert b"status=130" in _read_until(child.fd, b"status=", timeout=5)
        assert child.isalive()
        os.write(child.fd, b"exit 7\n")
        child.proc.wait(10)
        assert child.exit_code == 7
    finally:
        child.close()
    assert not child.isalive()


IGNORING_PARENT = """
import json, os, signal, sys
from isolation import Sandbox
from isolation.output import ready
# as a shell's background job or nohup leaves them, and a blocked signal besides
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
probe = ["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]
with Sandbox() as sb:
    plain = sb.exec(probe).stdout
    child, pty = sb.spawn_pty(probe), b""
    while pty.count(b"\\n") < 2 and ready([child.fd], 10):  # both lines, however the pty splits them
        pty += os.read(child.fd, 4096)
    child.close()
print(json.dumps({"plain": plain, "pty": pty.decode()}))
"""


def test_commands_start_with_default_signals_whatever_lis_tui_inherited():
    """Started in the background or under nohup, lis-tui has SIGINT and SIGHUP ignored; a command
    inherited that, and a Ctrl-C on its pty did nothing. Every command starts with none ignored
    and none blocked."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-c", IGNORING_PARENT], capture_output=True, text=True, timeout=120, cwd=root)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    for way in ("plain", "pty"):
        fields = dict(zip(*[iter(got[way].split())] * 2))
        # signals 1-31; glibc's posix_spawn leaves its own two (32, 33) ignored, and the program's
        # glibc takes them back as it starts
        assert int(fields["SigIgn:"], 16) & 0x7FFFFFFF == 0 and int(fields["SigBlk:"], 16) == 0, (way, got[way])


def test_unknown_rootfs_is_a_clear_error():
    with pytest.raises(SandboxError, match="no-such-rootfs"):
        Sandbox(SandboxSpec(rootfs="no-such-rootfs")).start()


def test_a_rootfs_whose_pid_1_cannot_start_says_why_to_every_command(debian_rootfs):
    """pid 1 is the rootfs's own `sh`, exec'd once the first command started (or at once, when
    none waits): a session that removed it starts, and its commands (the first, killed with the
    namespace, and every later one) are told so, not that the sandbox closed: in bwrap's words,
    or by its exit status once no zygote that heard them is left; close leaves nothing running."""
    from isolation import sessions
    from proctree import keeper_runs, left_behind

    why = r"pid 1 did not start(: bwrap: execvp sh: No such file or directory| \(bwrap exited with status 1\))\. .*`sh`"
    spec = SandboxSpec(rootfs=str(debian_rootfs.rootfs.path), session=f"no-sh-{os.getpid()}")
    try:
        with Sandbox(spec) as sb:
            sb.exec("true")
            keeper_runs(sb)  # else this sandbox's own pid 1 could look for sh after the rm
            assert sb.exec(["rm", "/usr/bin/sh"]).exit_code == 0
        with Sandbox(spec) as sb:
            for _ in range(2):
                with pytest.raises(SandboxError, match=why):
                    sb.exec("true")
        with Sandbox(spec) as sb:  # no command until the zygote that heard it has exited idle
            time.sleep(IDLE + 0.5)
            with pytest.raises(SandboxError, match=r"pid 1 did not start \(bwrap exited with status 1\)"):
                sb.exec("true")
        with pytest.raises(SandboxError, match=why):  # with the network on, the proxy's port is asked for in start
            Sandbox(SandboxSpec(rootfs=spec.rootfs, session=spec.session, network="on")).start()
        assert not (left := left_behind(os.getpid())), left
    finally:
        sessions.remove(spec.session)


def test_bad_network_mode_is_refused():
    with pytest.raises(SandboxError, match="network must be one of"):
        SandboxSpec(network="maybe")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


def test_close_kills_everything_and_removes_scratch():
    sb = Sandbox().start()
    sb.exec("setsid sleep 300 > /dev/null 2>&1 < /dev/null &")
    keeper, record = sb.pid, sb._record.lock_path
    assert record.exists()
    sb.close()
    assert not _alive(keeper) and not record.exists()
    sb.close()  # twice is fine
    with pytest.raises(SandboxError):
        sb.exec("true")


def test_wall_time_closes_the_sandbox():
    with Sandbox(SandboxSpec(limits=Limits(wall_time=0.5))) as sb:
        deadline = time.monotonic() + 30
        while sb.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not sb.running
        with pytest.raises(SandboxError, match="not running"):
            sb.exec("true")


CHILD = textwrap.dedent("""
    import sys, time
    from isolation import Sandbox
    sb = Sandbox().start()
    sb.exec("setsid sleep 4242 >/dev/null 2>&1 </dev/null &")
    print(sb._record.lock_path, flush=True)
    time.sleep(300)
""")


def _sleepers(marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_kill_9_of_the_owner_leaves_nothing_running_and_the_next_start_sweeps(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})
    record = child.stdout.readline().strip()
    assert record and _sleepers("sleep 4242")
    child.send_signal(signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 10
    while _sleepers("sleep 4242") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _sleepers("sleep 4242")
    assert os.path.exists(record)  # nobody was left to clean up...
    assert records.sweep() == 1  # ...until the next start sweeps it
    assert not os.path.exists(record)


def test_commands_start_in_the_directory_asked_for(sandbox):
    assert sandbox.exec("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sandbox.exec(["pwd"], cwd="/testbed/output").stdout == "/testbed/output\n"
    r = sandbox.exec(["pwd"], cwd="/no/such/dir")
    assert r.exit_code == 1 and "cannot change directory to /no/such/dir" in r.stderr


def test_a_missing_command_fails_as_a_shell_says_it(sandbox):
    r = sandbox.exec(["no-such-command-here"])
    assert r.exit_code == 127 and "no-such-command-here: command not found" in r.stderr
    assert sandbox.exec(["/etc/hostname"]).exit_code == 126
