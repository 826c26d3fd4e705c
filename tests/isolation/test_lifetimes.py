"""Whatever the sandbox does to the processes we start in it, close() and timeouts hold, and a
crash of ours at any moment leaves nothing running after the next start (issue 13, item 3)."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from isolation import Limits, Sandbox, SandboxError, SandboxSpec, records
from tools.shell import Shell

pytestmark = pytest.mark.sandbox
ROOT = str(Path(__file__).resolve().parents[2])


def _ours_marked(word: str) -> list[int]:
    """Our processes with `word` in their argv (bwrap and pid 1 carry their record's marker)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if word.encode() in f.read():
                        found.append(int(entry.name))
            except OSError:
                pass
    return [pid for pid in found if pid != os.getpid()]


def _within(seconds: float, action) -> float:
    """Run `action` in a thread; fail unless it ends in time. Returns how long it took."""
    done = threading.Event()
    errors = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        done.set()

    start = time.monotonic()
    threading.Thread(target=run, daemon=True).start()
    assert done.wait(seconds), f"still running after {seconds} s"
    if errors:
        raise errors[0]
    return time.monotonic() - start


def test_close_is_quick_when_the_sandbox_stopped_what_we_started():
    sb = Sandbox().start()
    marker = sb._record.marker
    proc = sb.popen(["sleep", "300"])
    # The sandbox SIGSTOPs the process we started (and everything else it can see but pid 1).
    r = sb.exec("kill -STOP $(pgrep -x sleep); sleep 0.2; ps -o stat= -p $(pgrep -x sleep)")
    assert r.stdout.strip().startswith("T"), r  # the attack ran: it is stopped
    took = _within(10, sb.close)
    assert took < 2.0, f"close took {took:.1f} s"
    assert proc.wait(5) == -signal.SIGKILL
    time.sleep(0.2)
    assert not _ours_marked(marker)


def test_close_leaves_no_zombie_pid_1_for_the_host_s_init():
    """bwrap reaps the sandbox's pid 1 when close() kills it; bwrap killed first left it a zombie
    of the host's init, dozens at once under load, for as long as that init took to reap them."""
    pids = []
    for _ in range(8):
        with Sandbox() as sb:
            sb.exec("true")
            pids.append(sb.pid)
    assert [pid for pid in pids if os.path.exists(f"/proc/{pid}")] == []


def test_pid_1_reaps_the_orphans_it_inherits_and_outlives_their_signals():
    """The keeper (sh, its trap on SIGCHLD) waits for the orphans the kernel hands it, and the
    signal that ends its `read` does not end it: it stops at the lifeline's EOF only."""
    with Sandbox() as sb:
        assert sb.exec("for i in 1 2 3 4 5 6 7 8; do sleep 0.05 & done; exit 0").exit_code == 0
        deadline = time.monotonic() + 10
        left = "?"
        while time.monotonic() < deadline and left:  # bounded: the orphans' sleeps end, then reaped
            left = sb.exec("cat /proc/1/task/1/children").stdout.strip()
        assert left == "", f"pid 1's children left: {left}"  # no zombie left to it
        assert os.path.exists(f"/proc/{sb.pid}") and sb.exec("echo alive").stdout == "alive\n"


def test_a_stopped_log_writer_cannot_hold_a_command_past_its_timeout():
    with Sandbox() as sb, Shell(sb, max_output=2000) as shell:
        # Enough output to need the log file; the log writer is a `cat` we started, which the
        # command finds and stops before printing the rest.
        # More than the shell's reader holds (1 MiB) before the writer is looked for, so it runs.
        command = ("seq 1 400000; sleep 0.5; for p in $(pgrep -x cat); do kill -STOP $p; done; sleep 0.2; "
                   "seq 1 2000000; echo finished")
        start = time.monotonic()
        result = shell.run(command, timeout=5)
        took = time.monotonic() - start
        assert took < 5 + 1 + 3, f"the command took {took:.1f} s"  # timeout + kill grace + the writer's wait
        assert "could not be saved" in result.output, result.output[-500:]  # the attack ran; the writer was left
        assert shell.run("echo alive").output == "alive"


KILLED_DURING_START = textwrap.dedent("""
    import sys
    from isolation import Sandbox
    print("imported", flush=True)
    while True:
        with Sandbox() as sb:
            sb.exec("true")
""")


def test_kill_9_during_start_leaves_nothing_after_the_next_start(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    env = {**os.environ, "LIS_SCRATCH": str(scratch), "PYTHONPATH": ROOT}
    rng = random.Random(12)
    for _ in range(20):
        child = subprocess.Popen([sys.executable, "-c", KILLED_DURING_START], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        child.stdout.readline()  # imported (however long a loaded machine takes): the starts begin
        time.sleep(0.05 + rng.random() * 0.3)  # somewhere in a start, an exec or a close
        child.kill()
        child.wait()
        child.stdout.close()
    ids = {p.name.strip(".").split(".")[0] for p in scratch.iterdir() if p.suffix in (".lock", ".new")}
    left = [p for p in _ours_marked("lis-sandbox-") if any(f"lis-sandbox-{i}" in _cmdline(p) for i in ids)]
    monkeypatch.setenv("LIS_SCRATCH", str(scratch))
    monkeypatch.setattr(records, "NEW_RECORD_GRACE", 0.0)  # every maker here is dead already
    records.sweep()
    with Sandbox() as sb:  # a start sweeps too; this one must work
        assert sb.exec("echo ok").stdout == "ok\n"
    deadline = time.monotonic() + 10  # killed ones may take a moment to go on a loaded machine
    while (survivors := [p for p in left if os.path.exists(f"/proc/{p}") and _state(p) != "Z"]) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not survivors, [(_cmdline(p)) for p in survivors]
    records.wait_released()  # our own sandbox's scratch is removed in the background after close
    ours = records.owner_file(scratch)  # this process's lock: it lives
    # "layers": the folder every sandbox mounts its layers' tmpfs on, in its own mount namespace
    assert not [p.name for p in scratch.iterdir() if p.name not in ("empty", "layers") and p != ours], \
        list(scratch.iterdir())


OWNER = textwrap.dedent("""
    import os, sys
    from isolation import Sandbox
    sb = Sandbox().start()
    assert sb.exec("true").exit_code == 0
    print(sb._record.marker, sb._proc.pid, sb.pid, flush=True)
    sys.stdin.read()
""")


def test_a_sandbox_dies_with_its_owner_at_once_without_a_sweep():
    # bwrap's parent-death signal is the only tie that a sandbox cannot cut: its owner's SIGKILL
    # must take bwrap and pid 1 down by itself, before any later start sweeps.
    owner = subprocess.Popen([sys.executable, "-c", OWNER], env={**os.environ, "PYTHONPATH": ROOT},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        marker, bwrap_pid, pid_1 = owner.stdout.readline().split()
        assert _cmdline(int(bwrap_pid)) and _cmdline(int(pid_1)), "the sandbox runs"
        assert len(_ours_marked(marker)) >= 2  # bwrap and pid 1
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 10
    while _ours_marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _ours_marked(marker), [_cmdline(p) for p in _ours_marked(marker)]


KILLED_WHILE_BWRAP_WAITS = textwrap.dedent("""
    import os, signal, time
    from isolation import Sandbox
    from isolation.sandbox import Sandbox as S
    def die(self, *_):  # bwrap's parent has armed its parent-death signal and waits to let its child go:
        print(self._record.marker, flush=True)  # its first zygote waits for our word that bwrap runs
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    S._admit = die
    Sandbox().start()
""")


def test_an_owner_killed_while_bwrap_waits_to_let_its_child_go_leaves_nothing():
    # bwrap's parent dies with its owner (parent-death signal) and its child, which still waited
    # for it, would wait forever, pid 1 of its own namespaces: the spawn helper kills bwrap's group.
    _killed_owner_leaves_nothing(KILLED_WHILE_BWRAP_WAITS)


def _killed_owner_leaves_nothing(script: str) -> None:
    """Run `script`, an owner that prints its sandbox's marker and is killed while that starts;
    then no process carrying the marker may be left (10 s for the helper to end them)."""
    owner = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": ROOT},
                           capture_output=True, text=True, timeout=60)
    assert owner.returncode == -signal.SIGKILL, owner.stderr
    marker = owner.stdout.split()[0]
    deadline = time.monotonic() + 10
    while _ours_marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _ours_marked(marker), [_cmdline(p) for p in _ours_marked(marker)]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_memory_hog_and_a_tmp_filler_stop_at_their_limits():
    from isolation import Limits, SandboxSpec

    limits = Limits(memory=256 << 20, tmp_size=64 << 20)
    with Sandbox(SandboxSpec(limits=limits)) as sb:
        hog = sb.exec(["python3", "-c", "x = bytearray(512 << 20); print('allocated')"])
        fill = sb.exec("dd if=/dev/zero of=/tmp/fill bs=1M count=200; ls -l /tmp/fill")
        assert sb.exec("echo alive").stdout == "alive\n"
    assert hog.exit_code != 0 and "MemoryError" in hog.stderr and "allocated" not in hog.stdout
    assert "No space left on device" in fill.stderr and f" {64 << 20} " in fill.stdout


def test_default_limits_are_set_for_every_command(sandbox):
    from isolation.spec import Limits

    limits = Limits()
    got = sandbox.exec("ulimit -d; ulimit -n; ulimit -u; df -B1 --output=size /tmp | tail -1").stdout.split()
    assert got == [str(limits.memory // 1024), str(limits.open_files), str(limits.processes), str(limits.tmp_size)]


def test_a_sandbox_outlives_the_thread_that_started_it():
    # --die-with-parent is the parent-death signal, which follows the thread that forked bwrap:
    # a sandbox started on a short-lived worker thread must not die when that thread ends.
    started: list = []
    worker = threading.Thread(target=lambda: started.append(Sandbox().start()))
    worker.start()
    worker.join()
    sb = started[0]
    try:
        time.sleep(0.3)  # the signal, were it armed on the worker, has been delivered by now
        assert sb.running
        assert sb.exec("echo alive").stdout.strip() == "alive"
    finally:
        sb.close()


def test_sandboxes_started_at_once_hold_no_descriptor_of_ours_and_close_ends_them_all(tmp_path):
    """Eight sandboxes started together from short-lived threads, while other threads fork
    processes with descriptors of their own to pass: bwrap is forked on the launcher thread with
    pass_fds, so an inheritable canary of ours, or a sibling's pipe, would show in a pid 1's
    /proc/1/fd. Each holds only its own pipes; close() then leaves no process of any of them."""
    canary = tmp_path / "canary-host-file"
    canary.write_text("host")
    held = os.open(canary, os.O_RDONLY)
    os.set_inheritable(held, True)  # what a careless library in our process might leave
    started, stop = [], threading.Event()

    def busy() -> None:  # concurrent Popen with pass_fds of their own, as other sandboxes' helpers do
        while not stop.is_set():
            r, w = os.pipe()
            subprocess.run(["true"], pass_fds=(w,), check=True)
            os.close(r), os.close(w)

    churn = [threading.Thread(target=busy) for _ in range(2)]
    workers = [threading.Thread(target=lambda: started.append(Sandbox().start())) for _ in range(8)]
    try:
        for t in churn + workers:
            t.start()
        for t in workers:
            t.join(120)
        assert len(started) == 8
        time.sleep(0.3)  # a parent-death signal armed on the finished threads has fired by now
        # read from here: pid 1's links are out of a command's reach (bwrap.KEEPER_CAP)
        fds = [[os.readlink(f"/proc/{sb.pid}/fd/{n}") for n in os.listdir(f"/proc/{sb.pid}/fd")] for sb in started]
        assert all(sb.running for sb in started) and len({sb.pid for sb in started}) == 8
    finally:
        stop.set()
        for t in churn:
            t.join(30)
        os.close(held)
        markers = [sb._record.marker for sb in started]  # noqa: SLF001
        for sb in started:
            sb.close()
    for seen in fds:
        assert seen and all(link.startswith(("pipe:", "/dev/null")) for link in seen), seen
        # stdin, stdout, stderr, the read end of its own info pipe (bwrap holds it, so that
        # naming its child cannot fail: Sandbox._launch), and the shell's own script fd
        assert len(seen) <= 5, seen
    assert all(str(canary) not in " ".join(seen) for seen in fds)
    deadline = time.monotonic() + 10
    while any(_ours_marked(m) for m in markers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_ours_marked(m) for m in markers)


CUT_SHORT = """
import os, sys
from pathlib import Path
from isolation import records
root = Path(sys.argv[1])
record = records.Record(root)
(record.dir / "testbed" / "deep").mkdir(parents=True)
(record.dir / "testbed" / "deep" / "file").write_text("x")
os.rename(record.dir, root / f".{record.id}.gone")  # what release() does before the reaper runs
os._exit(0)  # the owner dies here: its lock goes with it
"""


def test_a_scratch_whose_background_removal_was_cut_short_is_swept(tmp_path):
    subprocess.run([sys.executable, "-c", CUT_SHORT, str(tmp_path)], env={**os.environ, "PYTHONPATH": ROOT},
                   check=True)
    assert {p.suffix for p in tmp_path.iterdir()} == {".lock", ".gone", ".owner"}
    assert records.sweep(tmp_path) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_live_owners_records_are_left_to_it_and_a_dead_ones_are_swept(tmp_path):
    ours = records.Record(tmp_path)  # this process lives: its record stays
    subprocess.run([sys.executable, "-c", CUT_SHORT, str(tmp_path)], env={**os.environ, "PYTHONPATH": ROOT},
                   check=True)
    assert records.sweep(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [ours.id, f"{ours.id}.lock", records.owner_file(tmp_path).name])


@pytest.mark.sandbox
@pytest.mark.parametrize("disk_on", ["memory", "disk"])
def test_closed_sandboxes_leave_nothing_in_the_scratch_once_released(tmp_path, monkeypatch, disk_on):
    monkeypatch.setenv("LIS_SCRATCH", str(tmp_path / "scratch"))
    for _ in range(3):
        with Sandbox(SandboxSpec(limits=Limits(disk_on=disk_on))) as sb:
            sb.exec("mkdir -p /testbed/a/b && echo x > /testbed/a/b/c && echo y > /root/z")
            record, scratch = sb._record.lock_path, sb._record.dir  # noqa: SLF001
            assert record.exists() and scratch.exists() == (disk_on == "disk")  # a tmpfs holds no folder of its own
        assert not scratch.exists()  # renamed at once (and removed in the background)
    records.wait_released()
    left = {p.name for p in (tmp_path / "scratch").iterdir()}
    # the owner's lock, and the folder every sandbox mounts its layers' tmpfs on, in its own namespace
    assert left == {records.owner_file(tmp_path / "scratch").name} | ({"layers"} if disk_on == "memory" else set())


def test_a_sweep_leaves_a_record_being_made_to_its_maker(tmp_path):
    # Another process's start, between creating its `.ID.new` and locking it, looks dead to a
    # sweep for that instant: taking it then failed the start ("No such file ... ID.lock").
    making = tmp_path / ".0123456789ab.new"
    making.write_text("")
    records.sweep(tmp_path)
    assert making.exists()
    old = time.time() - records.NEW_RECORD_GRACE - 1
    os.utime(making, (old, old))  # a maker that died long ago: nothing ran, it is swept
    records.sweep(tmp_path)
    assert not making.exists()


def test_a_file_write_under_way_when_close_begins_ends_before_the_teardown():
    """An editor write racing close (a step a DELETE ends): close waits for it, so it lands in the
    live sandbox, never in a scratch being removed, nor through the root descriptor's number once
    freed and taken by the next sandbox. A trace hook holds the write between its descriptor and
    its first openat2, the window the race needs."""
    from isolation.host import inroot

    a = Sandbox().start()
    at_write, go = threading.Event(), threading.Event()
    outcome: list = []

    def hold(frame, event, arg):
        if event == "call" and frame.f_code is inroot.write_in_root.__code__:
            at_write.set()
            go.wait(30)

    def write():
        sys.settrace(hold)
        try:
            a.write_file("/testbed/output/late.txt", b"late")
            outcome.append("written")
        except Exception as exc:  # noqa: BLE001 (what went wrong is the assertion's message)
            outcome.append(exc)
        finally:
            sys.settrace(None)

    writer = threading.Thread(target=write)
    writer.start()
    assert at_write.wait(30)
    closer = threading.Thread(target=a.close)
    closer.start()
    closer.join(2)  # with the write held, close waits; unheld, it is done by now
    b = Sandbox().start()  # takes the descriptor numbers a close freed
    try:
        go.set()
        writer.join(30)
        closer.join(30)
        assert not closer.is_alive() and not a.running
        assert outcome == ["written"], outcome
        assert b.exec("ls /testbed/output").stdout == ""  # nothing of a's in b
        with pytest.raises(SandboxError, match="not running"):
            a.write_file("/testbed/output/later.txt", b"later")
    finally:
        go.set()
        b.close()


def test_pid_1_is_reached_by_pid_only_while_it_is_bwraps_child():
    # No pidfd is kept per idle sandbox: each use opens one from the pid, which must name bwrap's
    # child and nothing else (a pid reused by another process, another bwrap's child, a dead one).
    from isolation.sandbox import _checked_pidfd

    with Sandbox() as sb, Sandbox() as other:
        fd = _checked_pidfd(sb.pid, sb._proc)
        assert fd is not None
        os.close(fd)
        assert _checked_pidfd(other.pid, sb._proc) is None  # a child, but another bwrap's
        stranger = subprocess.Popen(["sleep", "30"])
        try:
            assert _checked_pidfd(stranger.pid, sb._proc) is None
        finally:
            stranger.kill()
            stranger.wait()
        pid = sb.pid
        os.kill(pid, signal.SIGKILL)  # from outside its namespace: pid 1 dies, and bwrap after it
        sb._proc.wait(10)
        assert _checked_pidfd(pid, sb._proc) is None
        with pytest.raises(SandboxError, match="not running"):
            sb.exec("true")


# As Ray ends a worker: its direct children are killed first (RAY_kill_child_processes_on_worker_exit),
# then the worker, while a start waits for bwrap to let its child go.
KILLED_WITH_ITS_CHILDREN = KILLED_WHILE_BWRAP_WAITS.replace("    os.kill(os.getpid(), signal.SIGKILL)", """\
    children = set()
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{task}/children") as f:
            children |= {int(p) for p in f.read().split()}
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)""")


def test_an_owner_killed_after_its_children_while_bwrap_waits_leaves_nothing():
    # The spawn helper is no child of the owner's, so a supervisor that kills the owner's children
    # does not take it: it still ends the sandbox whose bwrap child waits to be let go.
    _killed_owner_leaves_nothing(KILLED_WITH_ITS_CHILDREN)


@pytest.mark.parametrize("where", ["limits", "layers", "ready"])
def test_a_start_that_fails_part_way_leaves_no_process(monkeypatch, where):
    """bwrap's child waits on its block fds while the sandbox's first zygote sets pid 1's limits,
    mounts the layers and we wait for bwrap to build the sandbox: killing bwrap then left the
    child waiting, reparented, forever."""
    from isolation import spawn
    from isolation.sandbox import launch, pid1

    if where == "limits":  # a limit that cannot be set: the zygote fails once bwrap's child is named
        monkeypatch.setattr(launch, "_rlimits", lambda limits: [*pid1._rlimits(limits), (4242, 1)])
    elif where == "layers":  # a tmpfs the kernel refuses, mounted while bwrap's child waits for it
        monkeypatch.setattr(Sandbox, "_layers_tmpfs", lambda sb, ids: (str(sb._scratch), "lis-no-such-option", []))
    else:  # bwrap never builds the sandbox in time (a start past its timeout): its group is stopped
        # once it runs, its child with it if cloned already (a timeout alone, however short, was
        # met on a fast machine: each step's answer came within the poll's first millisecond)
        admit = Sandbox._admit

        def stopped(sb):
            os.killpg(sb._proc.pid, signal.SIGSTOP)
            admit(sb)
        monkeypatch.setattr(Sandbox, "_admit", stopped)
        monkeypatch.setattr(launch, "START_TIMEOUT", 0.5)
    before = set(_ours_marked("lis-sandbox-"))
    with pytest.raises(SandboxError) as failed:
        Sandbox().start()
    assert {"limits": "limits on its pid 1", "layers": "mount the sandbox's disk", "ready": "in time"}[where] \
        in str(failed.value), failed.value
    deadline = time.monotonic() + 10  # a killed process may take a moment to go on a loaded machine
    while (left := [p for p in set(_ours_marked("lis-sandbox-")) - before if _state(p) != "Z"]) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, [_cmdline(p) for p in left]
