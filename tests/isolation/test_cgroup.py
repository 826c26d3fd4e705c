"""cgroup v2 per sandbox: the planning over a cgroup tree (a directory of plain files, as the
kernel shows one), and the real thing where this machine delegates a subtree (else skipped,
naming what is missing)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from isolation import Sandbox, cgroup
from isolation.spec import Limits, SandboxSpec

SCOPE = "user.slice/user-1000.slice/user@1000.service/app.slice/run-lis.scope"
ME = 4242


def _tree(root: Path, own: str = SCOPE, controllers: str = "cpu memory pids", subtree: str = "",
          procs: tuple[int, ...] = (ME,), hybrid: bool = False) -> Path:
    """A cgroup2 hierarchy at `root` with this process in `own`."""
    if hybrid:
        root = root / "unified"
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    for name, text in (("cgroup.procs", "1\n"), ("cgroup.subtree_control", "cpu memory pids\n")):
        (root / name).write_text(text)
    directory = root / own
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cgroup.controllers").write_text(controllers + "\n")
    (directory / "cgroup.subtree_control").write_text(subtree + "\n")
    (directory / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs))
    return directory


def _plan(root: Path, own: str = SCOPE, uid: int | None = None, ours=lambda pid: pid in (ME, ME + 1)):
    return cgroup.plan(root, f"0::/{own}\n", os.getuid() if uid is None else uid, ME, ours)


def test_a_delegated_scope_of_our_own_is_used_with_us_moved_to_a_leaf(tmp_path):
    own = _tree(tmp_path, procs=(ME, ME + 1))  # lis-tui and its spawn helper
    plan = _plan(tmp_path)
    assert plan.usable and plan.own == own and plan.base == own / f"lis-tui-{ME}"
    assert plan.move == (ME, ME + 1)  # out of `own`, so it may enable memory and pids for its children
    assert plan.enable == (own, own / f"lis-tui-{ME}")
    assert plan.describe() == f"cgroup v2 delegated at {own}: memory.max and pids.max per sandbox"


def test_the_root_cgroup_moves_nothing(tmp_path):
    _tree(tmp_path, own="", procs=(1, ME, 77))  # processes of others there are no obstacle
    plan = _plan(tmp_path, own="")
    assert plan.usable and plan.move == () and plan.base == tmp_path / f"lis-tui-{ME}"


def test_a_cgroup_shared_with_the_terminal_is_left_alone_and_the_fix_named(tmp_path):
    _tree(tmp_path, procs=(1234, ME))  # the user's shell, then lis-tui
    plan = _plan(tmp_path)
    assert not plan.usable and plan.reason == "not delegated"
    assert "pid 1234" in plan.detail and "systemd-run --user --scope -p Delegate=yes" in plan.fix


def test_no_mount_a_hybrid_hierarchy_and_no_v2_line_are_not_mounted(tmp_path):
    plan = _plan(tmp_path)
    assert (plan.reason, plan.detail) == ("not mounted", f"no cgroup2 mount at {tmp_path}")
    assert "systemd.unified_cgroup_hierarchy=1" in plan.fix
    _tree(tmp_path, hybrid=True)
    assert "hybrid" in _plan(tmp_path).detail
    _tree(tmp_path)
    assert cgroup.plan(tmp_path, "4:memory:/x\n", os.getuid(), ME, lambda p: True).reason == "not mounted"
    assert plan.describe().startswith("no cgroup v2 (not mounted: ") and plan.describe().endswith("rlimits only")


def test_a_subtree_of_another_user_is_not_delegated(tmp_path):
    _tree(tmp_path)
    plan = _plan(tmp_path, uid=os.getuid() + 1)
    assert plan.reason == "not delegated"
    assert plan.detail.startswith(f"subtree not delegated to uid {os.getuid() + 1}")


def test_missing_controllers_are_named(tmp_path):
    own = _tree(tmp_path, controllers="cpu pids")
    plan = _plan(tmp_path)
    assert (plan.reason, plan.detail) == ("controllers missing", f"memory not available in {own} (its cgroup.controllers)")
    assert "Delegate=pids memory" in plan.fix


def test_a_cgroup_outside_the_mount_is_not_ours(tmp_path):
    _tree(tmp_path)
    assert _plan(tmp_path, own="../elsewhere").reason == "not delegated"
    assert _plan(tmp_path, own="user.slice/gone").reason == "not delegated"


def test_controllers_already_enabled_need_no_move(tmp_path):
    own = _tree(tmp_path, subtree="memory pids", procs=())
    plan = _plan(tmp_path)
    assert plan.move == () and plan.enable == (own / f"lis-tui-{ME}",)


def test_each_sandbox_gets_its_memory_without_swap_and_its_task_count():
    limits = Limits(memory=512 << 20, processes=64)
    assert cgroup.limit_files(limits) == {"memory.max": str(512 << 20), "memory.swap.max": "0", "pids.max": "64"}
    assert cgroup.limit_files(Limits(memory=None, processes=None)) == {}


def test_leftovers_are_the_subtrees_of_owners_gone(tmp_path):
    for pid in (ME, 7, 8):
        (tmp_path / f"lis-tui-{pid}").mkdir()
    (tmp_path / "lis-tui-x").mkdir()
    (tmp_path / "other").mkdir()
    found = cgroup.leftovers(tmp_path, f"lis-tui-{ME}", lambda pid, path: pid == 8)
    assert found == [tmp_path / "lis-tui-7"]


def test_with_no_cgroup_v2_a_sandbox_has_none_and_rlimits_still_hold():
    if cgroup.delegation().usable:
        pytest.skip(f"this machine delegates cgroup v2 ({cgroup.delegation().own})")
    with Sandbox(SandboxSpec(limits=Limits(memory=256 << 20))) as sb:
        assert sb._cgroup is None
        assert sb.exec("ulimit -d").stdout.strip() == str(256 << 10)


# ---- the real thing -------------------------------------------------------------------------

def _why_not_live() -> str:
    plan = cgroup.detect()
    return "" if plan.usable else f"{plan.detail} ({plan.reason})"


def _cgroup_of(pid: int) -> str:
    return next(line[3:] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if line.startswith("0::"))


@pytest.mark.skipif(bool(_why_not_live()), reason=_why_not_live() or "")
def test_a_sandbox_is_held_by_its_cgroup_tmpfs_pages_included():
    """The issue's attack: 1.5 GiB into /dev/shm counted against no limit. Under a cgroup the
    sandbox's tmpfs pages are charged to it, so the writer stops at memory.max."""
    limits = Limits(memory=128 << 20, processes=100)
    with Sandbox(SandboxSpec(limits=limits)) as sb:
        path = sb._cgroup.path
        rel = "/" + str(path.relative_to(cgroup.ROOT))
        proc = sb.popen(["sleep", "30"])
        for pid in (sb.pid, sb._zygote.pid, proc.pid):  # pid 1, the zygote and a command
            assert _cgroup_of(pid).endswith(rel.rsplit("/", 1)[1]), pid
        assert (path / "memory.max").read_text().strip() == str(128 << 20)
        assert (path / "pids.max").read_text().strip() == "100"
        result = sb.exec("head -c 400M /dev/zero > /dev/shm/fill; echo rc=$?; du -m /dev/shm/fill", timeout=60)
        used = int(result.stdout.split()[-2]) if "fill" in result.stdout else 0
        assert "rc=0" not in result.stdout and used < 128, result
        assert int(dict(line.split() for line in (path / "memory.events").read_text().splitlines())["max"]) > 0
        proc.kill()
    assert not path.exists()
