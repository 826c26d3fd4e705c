"""Many live sandboxes in one process: few descriptors each, and a clear refusal at a limit that leaves nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from isolation import Limits, Sandbox, SandboxSpec, records
from isolation.spawn.helper import IDLE

ROOT = str(Path(__file__).resolve().parents[2])
pytestmark = pytest.mark.sandbox


def _open_fds() -> dict[str, str]:
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass  # listdir's own
    return found


@pytest.mark.parametrize("disk, most", [("default", 1), (None, 0)])
def test_an_idle_sandbox_holds_one_descriptor_in_this_process_or_none(disk, most):
    """The root of its layers' tmpfs, where a disk limit puts them there; with them on disk, none.
    Its pid 1's pidfd and its root are opened on demand, and our end of its zygote's channel goes
    once that zygote has exited idle."""
    spec = SandboxSpec() if disk == "default" else SandboxSpec(limits=Limits(disk=None))
    with Sandbox(spec) as warm:  # the spawn helper's socket and lazy imports: once per process, not per sandbox
        warm.exec("true")
    count = 20
    records.wait_released()  # the reaper's descriptor of the scratch it removes
    before = _open_fds()
    sandboxes = [Sandbox(spec).start() for _ in range(count)]
    try:
        for sb in sandboxes[::2]:  # used once, then idle: its zygote exits (the others' first one, unused)
            assert sb.exec("echo ok").stdout == "ok\n"
            sb.read_file("/etc/hostname")
        time.sleep(IDLE)
        deadline = time.monotonic() + 30
        while True:
            now = _open_fds()
            per_sandbox = (len(now) - len(before)) / count
            if per_sandbox <= most or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert per_sandbox <= most, f"{per_sandbox:.2f} descriptors per idle sandbox: {now}"
        assert all(sb.exec("echo again").stdout == "again\n" for sb in sandboxes)  # a new zygote each
    finally:
        for sb in sandboxes:
            sb.close()
    records.wait_released()
    after = _open_fds()
    assert set(after.items()) <= set(before.items()), (before, after)  # closed: nothing of theirs stays open


# Starts sandboxes at a lowered descriptor limit until one is refused, then counts what is left of
# it: records, scratch directories and marked processes are only the live sandboxes' own.
AT_A_LOW_LIMIT = textwrap.dedent("""
    import json, os, resource, sys
    from isolation import Sandbox, records
    from isolation.limits import capacity
    from isolation.spec import SandboxError
    if sys.argv[1] == "kernel":  # no preflight margin: the start runs into EMFILE itself
        capacity.START_FDS = 0
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    live, error = [], None
    while error is None and len(live) < 100:
        try:
            live.append(Sandbox().start())
        except SandboxError as exc:
            error = str(exc)
    records.wait_released()
    scratch = records.scratch_root()
    parent, words = {}, {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                parent[pid] = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words[pid] = f.read().split(b"\\0")
        except OSError:
            continue
    ours = {os.getpid()}
    while (more := {p for p, pp in parent.items() if pp in ours} - ours):  # our descendants
        ours |= more
    marked = [w.decode() for p in ours for w in set(words.get(p, [])) if w.startswith(b"lis-sandbox-")]  # once a process
    print(json.dumps({"error": error, "live": [sb._record.id for sb in live],
                      "scratch": sorted(p.name for p in scratch.iterdir()), "marked": sorted(marked),
                      "works": [sb.exec("echo ok").stdout for sb in live[-1:]]}))
    for sb in live:
        sb.close()
""")


@pytest.mark.parametrize("where", ["preflight", "kernel"])
def test_a_start_at_a_lowered_descriptor_limit_is_refused_clearly_and_leaves_nothing(tmp_path, where):
    scratch = tmp_path / "scratch"
    env = {**os.environ, "LIS_SCRATCH": str(scratch), "PYTHONPATH": ROOT}
    run = subprocess.run([sys.executable, "-c", AT_A_LOW_LIMIT, where], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.splitlines()[-1])
    live = seen["live"]
    assert live and seen["works"] == ["ok\n"]  # it got somewhere, and the sandboxes before the refusal work
    error = seen["error"]
    assert error is not None and "\n" not in error
    assert "RLIMIT_NOFILE" in error and "ulimit -n" in error, error  # the limit, and the fix
    assert ("of this process's 64 descriptors" in error) if where == "preflight" else ("64" in error), error
    # Nothing of the refused start: every record and marked process is a live sandbox's (their
    # layers are in tmpfs, mounted on the one folder "layers" each in its own mount namespace).
    owner = [name for name in seen["scratch"] if name.endswith(".owner")]
    assert sorted(set(seen["scratch"]) - set(owner) - {"layers"}) == sorted(f"{i}.lock" for i in live)
    assert sorted(seen["marked"]) == sorted(f"lis-sandbox-{i}" for i in live for _ in range(2))  # bwrap, pid 1
    assert not scratch.exists() or sorted(p.name for p in scratch.iterdir() if p.suffix != ".owner") in ([], ["layers"])


def test_doctor_says_how_many_live_sandboxes_fit_and_which_limit_binds_first():
    from isolation import doctor

    check = doctor.check_capacity()
    assert check.detail.startswith("about ") and "live sandboxes in one process" in check.detail, check.detail
    assert "binds first" in check.detail and check.fix.startswith("for more: "), check
