"""The watchers' passes follow the sandboxes that run something (limits/activity.py): a sandbox
found quiet, its pid 1 alone, is not looked at again until a command starts there or a host-side
write ends, and one that runs something is looked at on every pass. Before, every pass read every
live sandbox: beside 2,000 idle ones each watcher took a tenth of a core."""
from __future__ import annotations

import subprocess

import pytest

from isolation import Sandbox
from isolation.limits import activity, budget, diskcap
from isolation.spec import SandboxSpec

pytestmark = pytest.mark.sandbox
MiB = 1 << 20


def looked_at(looks: activity.Looks, *sandboxes: Sandbox) -> list[Sandbox]:
    """One pass as the watchers make it: the sandboxes it measured."""
    return looks.pass_over(sandboxes, lambda sandbox, by_ns: True)


def test_a_quiet_sandbox_is_looked_at_again_once_something_starts_or_writes_there():
    looks = activity.Looks()
    with Sandbox() as sb, Sandbox() as other:
        seen = {"first": looked_at(looks, sb, other), "idle": looked_at(looks, sb, other)}
        sb.exec("true")
        seen["after a command"] = looked_at(looks, sb, other)
        seen["after it, idle"] = looked_at(looks, sb, other)
        other.write_file("/tmp/note", b"x")
        seen["after a host-side write"] = looked_at(looks, sb, other)
        with other._in_root():  # a host-side file operation under way: it may be writing
            seen["during one"] = looked_at(looks, sb, other)
        seen["after it"] = looked_at(looks, sb, other)
        proc = sb.popen(["sleep", "60"], stdout=subprocess.DEVNULL)
        seen["while a command runs"] = [looked_at(looks, sb, other) for _ in range(3)]
        proc.kill()
        proc.wait(timeout=30)
        seen["once it ended"] = looked_at(looks, sb, other)
        seen["then"] = looked_at(looks, sb, other)
    # "first": measured, but from no look at /proc (nothing was ever started there)
    assert seen == {"first": [sb, other], "idle": [], "after a command": [sb], "after it, idle": [],
                    "after a host-side write": [other], "during one": [other], "after it": [other],
                    "while a command runs": [[sb]] * 3, "once it ended": [sb], "then": []}, seen


def test_the_budget_counts_what_a_sandbox_wrote_after_it_was_found_quiet():
    # A pass finds the sandbox quiet; then a command writes 8 MiB and exits before the next pass.
    if not diskcap.on_tmpfs(SandboxSpec()):
        pytest.skip("the writable layers are not a tmpfs on this kernel (6.6+)")
    with Sandbox() as sb:
        tracker = budget._here()
        tracker.once()
        with tracker.lock:
            before = tracker.costs[sb]
        assert looked_at(tracker.looks, sb) == []  # quiet: skipped
        assert sb.exec("head -c 8M /dev/zero > /testbed/f").exit_code == 0
        tracker.once()
        with tracker.lock:
            after = tracker.costs[sb]
    assert after - before >= 8 * MiB, (before, after)
