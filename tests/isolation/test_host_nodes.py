"""Host inodes that reach a sandbox through a bind: its devices, its masks, its sysctls.

Run by root, the sandbox's uid 0 is the host's root, the owner of /dev/null and of every sysctl
file: without read-only mounts a sandbox could chmod the host's /dev/null or write the host's
core_pattern. These tests run those attacks; the devices must still work for everyone."""
from __future__ import annotations

import os
import select
import socket
import stat
import time

import pytest

from isolation import Sandbox, SandboxSpec
from isolation.host.nodes import NODES

from test_containment import inside_python

pytestmark = pytest.mark.sandbox

as_root = pytest.mark.skipif(os.getuid() != 0, reason="only a root caller owns the host's device nodes; "
                                                       "for anyone else chmod is refused however they are mounted")
STAMP = 12345  # the mtime the attack tries to set


def host_state(paths: list[str]) -> dict[str, tuple[int, int, int]]:
    return {path: (os.stat(path).st_mode, os.stat(path).st_uid, os.stat(path).st_gid) for path in paths}


def restore(before: dict[str, tuple[int, int, int]], times: dict[str, tuple[int, int]]) -> None:
    """Put back whatever the attack changed on the host, so a failing run leaves CI's /dev intact."""
    for path, (mode, uid, gid) in before.items():
        now = os.stat(path)
        if stat.S_IMODE(now.st_mode) != stat.S_IMODE(mode):
            os.chmod(path, stat.S_IMODE(mode))
        if (now.st_uid, now.st_gid) != (uid, gid):
            os.chown(path, uid, gid)
        if now.st_mtime_ns == STAMP * 10**9:
            os.utime(path, ns=times[path])


@as_root
def test_a_root_run_sandbox_cannot_change_the_hosts_devices_or_masks(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(inputs / "agent.sock"))  # masked with /dev/null inside
    host = [p for p in NODES if os.path.exists(p)] + [str(inputs / "agent.sock")]
    before = host_state(host)
    times = {p: (os.stat(p).st_atime_ns, os.stat(p).st_mtime_ns) for p in host}
    inside = [p for p in NODES if os.path.exists(p)] + ["/proc/keys", "/proc/key-users", "/testbed/input/agent.sock"]
    try:
        with Sandbox(SandboxSpec(input_dir=inputs)) as sb:
            got = inside_python(sb, f"""
            out = {{}}  # only uid 0 is mapped: chown can but give the node to root, as a test of the mount
            for path in {inside!r}:
                for name, attack in (("chmod", lambda: os.chmod(path, 0o600)), ("chown", lambda: os.chown(path, 0, 0)),
                                     ("utime", lambda: os.utime(path, ({STAMP}, {STAMP}), follow_symlinks=False))):
                    try:
                        attack(); out[f"{{name}} {{path}}"] = "done"
                    except OSError as e:
                        out[f"{{name}} {{path}}"] = errno.errorcode[e.errno]
            print(json.dumps(out))
            """)
        after = host_state(host)
        mtimes = {p: os.stat(p).st_mtime_ns for p in host}
    finally:
        server.close()
        restore(before, times)
    assert len(got) == 3 * len(inside)  # every attack ran...
    assert set(got.values()) == {"EROFS"}, got  # ...and met a read-only mount
    assert after == before
    assert STAMP * 10**9 not in mtimes.values()


def test_no_sysctl_of_the_host_can_be_written():
    with Sandbox() as sb:
        got = inside_python(sb, """
        out = {}
        for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/swappiness"):
            with open(path) as f:
                same = f.read()  # written back unchanged: were the write to pass, nothing would change
            try:
                with open(path, "w") as f:
                    f.write(same)
                out[path] = "written"
            except OSError as e:
                out[path] = errno.errorcode[e.errno]
        with open("/proc/sys/kernel/hostname") as f:
            out["hostname"] = f.read().strip()
        print(json.dumps(out))
        """)
    # EROFS whoever runs it; an unprivileged caller would also meet EACCES without the mount.
    assert got["/proc/sys/kernel/core_pattern"] == got["/proc/sys/vm/swappiness"] == "EROFS", got
    assert got["hostname"] == sb.spec.hostname  # the sandbox's own namespaces, through the host's /proc/sys


@as_root
def test_a_root_run_sandbox_reads_no_kernel_timers_and_writes_no_proc_setting():
    from isolation.layout import _root_proc

    covered = _root_proc()
    assert "/proc/fs" in covered and "/proc/timer_list" in covered  # what every Linux here has
    with Sandbox() as sb:
        got = inside_python(sb, """
        out = {}
        for line in open("/proc/self/mounts"):
            dest, options = line.split()[1], line.split()[3]
            out[dest] = "ro" if "ro" in options.split(",") else "rw"
        try:
            out["timer_list"] = open("/proc/timer_list").read()[:40]
        except OSError as e:
            out["timer_list"] = errno.errorcode[e.errno]
        print(json.dumps(out))
        """)
    for path in covered:
        assert got.get(path) == "ro", (path, got)  # its own read-only mount: no write goes through
    assert "Timer List" not in got["timer_list"]  # the host kernel's timers and addresses stay out


def test_devices_still_work(sandbox):
    script = ("echo x > /dev/null && : > /dev/null && head -c1 /dev/zero | od -An -c && head -c 8 /dev/urandom | wc -c"
              " && python3 -c \"open('/dev/null', 'w').write('x'); open('/dev/full', 'rb').read(4)\""
              " && echo shm > /dev/shm/f && cat /dev/shm/f && mkdir /dev/made && echo devices-ok")
    r = sandbox.exec(script)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split() == ["\\0", "8", "shm", "devices-ok"]
    r = sandbox.exec("echo x > /dev/full")
    assert r.exit_code != 0 and "No space left" in r.stderr  # /dev/full is the device, not a file


def test_a_pty_and_its_dev_tty_still_work(sandbox):
    child = sandbox.spawn_pty(["sh", "-c", "tty; echo via-dev-tty > /dev/tty; stty size"], dimensions=(33, 77))
    out, deadline = b"", time.monotonic() + 30
    try:
        while b"33 77" not in out and time.monotonic() < deadline:
            if select.select([child.fd], [], [], 1)[0]:
                try:
                    out += os.read(child.fd, 4096)
                except OSError:  # EIO: the child closed the pty
                    break
    finally:
        child.close()
    assert b"/dev/pts/" in out and b"via-dev-tty" in out and b"33 77" in out, out


def test_apt_still_works_with_its_dev_null(debian_rootfs):
    with Sandbox(SandboxSpec(rootfs=str(debian_rootfs.rootfs.path))) as sb:
        r = sb.exec("apt-get -q check && apt-config dump > /dev/null && dpkg --audit && echo apt-ok", timeout=120)
    assert r.exit_code == 0 and "apt-ok" in r.stdout, r.stdout + r.stderr
