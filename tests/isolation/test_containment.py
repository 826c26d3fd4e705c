"""A hostile model's ways out, each run for real and shown to fail (issue 12's audit, as root and
as an unprivileged user). Each test proves the attack ran (its code executed inside) and that it
got nothing: no capability, no host process, no host secret, no host terminal."""
from __future__ import annotations

import errno
import json
import os
import platform
import socket
import stat
import textwrap

import pytest

from isolation import Sandbox, SandboxSpec
from isolation.spawn import seccomp
from proctree import keeper_runs

pytestmark = pytest.mark.sandbox


def inside_python(sb: Sandbox, code: str, **kwargs) -> dict:
    """Run SYSCALL's helpers, then `code`, in the sandbox; it prints one JSON object, returned here."""
    r = sb.exec(["python3", "-c", SYSCALL + textwrap.dedent(code)], timeout=60, **kwargs)
    assert r.exit_code == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


SYSCALL = """
import ctypes, errno, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return 0 if r >= 0 else errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())
"""


def test_pid_1_and_the_keeper_cannot_be_traced_or_read(sandbox):
    got = inside_python(sandbox, """
    out = {"attach": call(101 if os.uname().machine == "x86_64" else 117, 16, 1, 0, 0),
           "seize": call(101 if os.uname().machine == "x86_64" else 117, 0x4206, 1, 0, 0)}
    buf = ctypes.create_string_buffer(16)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
    remote = (ctypes.c_void_p * 2)(0x400000, 16)
    nr = 310 if os.uname().machine == "x86_64" else 270
    out["vm_readv"] = call(nr, 1, ctypes.addressof(local), 1, ctypes.addressof(remote), 1, 0)
    def attempt(what):
        try:
            return what()
        except OSError as e:
            return errno.errorcode[e.errno]
    out["exe"] = attempt(lambda: os.readlink("/proc/1/exe"))
    out["exe_write"] = attempt(lambda: open("/proc/1/exe", "r+b").close() or "opened")
    out["fds"] = attempt(lambda: sorted(os.readlink(f"/proc/1/fd/{n}") for n in os.listdir("/proc/1/fd")))
    print(json.dumps(out))
    """)
    assert got["attach"] == got["seize"] == got["vm_readv"] == "EPERM"
    # pid 1 holds a capability no command holds (bwrap.KEEPER_CAP): its links are out of reach
    assert got["exe"] == got["exe_write"] == got["fds"] == "EACCES", got
    # and, seen from the host, it is the rootfs's own shell, holding nothing of ours
    keeper_runs(sandbox)
    fds = [os.readlink(f"/proc/{sandbox.pid}/fd/{n}") for n in os.listdir(f"/proc/{sandbox.pid}/fd")]
    assert all(fd.startswith("pipe:") or fd == "/dev/null" for fd in fds), fds
    exe = os.readlink(f"/proc/{sandbox.pid}/exe")
    assert not exe.startswith(("/home", "/root", "/work", "/tmp")) and "bwrap" not in exe


def test_no_process_inside_holds_our_environment_or_host_paths(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-lis-canary-4711")
    with Sandbox() as sb:
        scratch = str(sb.layers)
        r = sb.exec("sleep 30 & for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; echo; done 2>/dev/null")
        pids = sb.exec("ls /proc | grep -c '^[0-9]'").stdout
    assert r.exit_code == 0 and int(pids) >= 3  # pid 1, the sleep, this shell at least
    assert "sk-lis-canary" not in r.stdout and "OPENAI" not in r.stdout
    assert scratch not in r.stdout and "bwrap" not in r.stdout


def test_every_joined_process_is_capless_filtered_and_keyring_fresh(sandbox):
    r = sandbox.exec("grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")
    fields = dict(line.split(":\t") for line in r.stdout.splitlines())
    assert {k: v for k, v in fields.items() if k.startswith("Cap")} == dict.fromkeys(
        ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), "0000000000000000")
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2"
    # pid 1 (bwrap's child) is as bare, but for CAP_WAKE_ALARM (35), which means nothing outside the
    # initial user namespace and keeps commands out of its /proc/1/mem (bwrap.KEEPER_CAP)
    keeper_runs(sandbox)
    r = sandbox.exec("grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/1/status")
    assert r.stdout.split() == ["CapPrm:", f"{1 << 35:016x}", "CapEff:", f"{1 << 35:016x}",
                                "CapBnd:", f"{1 << 35:016x}", "NoNewPrivs:", "1", "Seccomp:", "2"]


# Bash builtins only, to be quick: the first command often runs before pid 1 execs the keeper
PID_1_CMDLINE = "read -r -d '' a < /proc/1/cmdline; echo \"cmdline $a\"; "
BEFORE_THE_KEEPER = (PID_1_CMDLINE +
                     "read -r -d '' s < /proc/1/status; "  # in one read: pid 1's exec between two would shift them
                     "while read -r k v; do case $k in CapEff:|NoNewPrivs:) echo $k $v;; esac; done <<< \"$s\"; "
                     "for link in exe cwd root fd/0 fd/2; do [ -e /proc/1/$link ] && echo reached $link; done; "
                     "{ read -r x < /proc/1/environ; } 2>/dev/null && echo reached environ; "
                     "{ read -r x < /proc/1/mem; } 2>/dev/null && echo reached mem; true")


def first_commands_before_the_keeper(command: str, then: str | None = None):
    """The output lines of `command` run first in new sandboxes (or of `then`, run next, if
    given), whose first line is PID_1_CMDLINE's, until that met pid 1 still bwrap's child three
    times; fails if it never did."""
    window = 0
    for _ in range(200):
        with Sandbox() as sb:
            marker, r = sb._record.marker, sb.exec(command)
            lines = (r if then is None else sb.exec(then)).stdout.splitlines()
        yield lines
        window += lines[0] == f"cmdline {marker}"
        if window == 3:
            return
    assert window, "no first command ran before pid 1 execed the keeper: this test no longer tests that window"


def test_a_first_command_that_runs_before_pid_1_is_the_keeper_cannot_reach_it():
    """The first command may start while pid 1 is still bwrap's child, which waits for its filter
    (written once that command started, forks._Start.let_go) to exec the keeper: already as bare
    as the keeper, but for CAP_WAKE_ALARM, so its links, environment and memory are out of reach
    the same way. New sandboxes until their first command met that window a few times."""
    for lines in first_commands_before_the_keeper(BEFORE_THE_KEEPER):
        assert lines[1:] == ["CapEff: " + f"{1 << 35:016x}", "NoNewPrivs: 1"], lines


def test_an_orphan_that_ended_before_the_keeper_ran_is_reaped():
    """An orphan of the first command that ends while pid 1 is still bwrap's child, which reaps
    nothing, is reparented to it and left a zombie; the keeper reaps it as it starts (launch.KEEPER
    sends itself SIGCHLD). New sandboxes until the orphan met that window a few times: the first
    command leaves it at once, and it writes pid 1's command line to a file once reparented (its
    parent's pid is 1), just before it ends (a command's output is kept only until it exits).
    Checked next, once the keeper runs and has had a moment for its first line."""
    orphaned = "until read -r _ _ _ parent _ < /proc/self/stat; [ \"$parent\" = 1 ]; do :; done; "
    then = ("until [ -s /tmp/orphan ]; do :; done; cat /tmp/orphan; "
            "until read -r -d '' a < /proc/1/cmdline; [ \"$a\" = sh ]; do :; done; sleep 0.02; "
            "grep -l '^State:.*zombie' /proc/[0-9]*/status || echo 'no zombie'")
    for lines in first_commands_before_the_keeper(f"{{ {orphaned}{PID_1_CMDLINE}}} > /tmp/orphan & exit", then):
        assert lines[1:] == ["no zombie"], lines


def test_the_filter_refuses_its_eperm_list_syscall_by_syscall(sandbox):
    """Called for real (every number, harmlessly: tests/isolation/test_filter.py)."""
    numbers = {name: nr for name, nr in seccomp.numbers(platform.machine()).items()
               if name in seccomp.EPERM | seccomp.NESTED_ONLY}
    got = inside_python(sandbox, f"""
    numbers = {numbers!r}
    out = {{name: call(nr, 0, 0, 0, 0, 0, 0) for name, nr in numbers.items()}}
    import fcntl, termios
    m, s = os.openpty()
    for name, req in (("TIOCSTI", termios.TIOCSTI), ("TIOCLINUX", 0x541C)):
        try:
            fcntl.ioctl(s, req, b"x"); out[name] = 0
        except OSError as e:
            out[name] = errno.errorcode[e.errno]
    fcntl.ioctl(s, termios.TIOCGWINSZ, b"\\0" * 8)  # other ioctls still work
    nr = {{"x86_64": (272, 435, 56), "aarch64": (97, 435, 220)}}[os.uname().machine]
    out["unshare_user"] = call(nr[0], 0x10000000)
    out["clone3"] = call(nr[1], 0, 0)
    out["unshare_uts"] = call(nr[0], 0x04000000)  # not a user namespace: the kernel decides (no caps)
    print(json.dumps(out))
    """)
    refused = {name: got.pop(name) for name in numbers}
    assert set(refused.values()) == {"EPERM"}, refused
    assert got == {"TIOCSTI": "EPERM", "TIOCLINUX": "EPERM", "unshare_user": "EPERM", "clone3": "ENOSYS",
                   "unshare_uts": "EPERM"}


def test_calls_that_would_work_unfiltered_are_refused_by_the_filter(sandbox):
    """EPERM could also come from a missing capability; these calls succeed for anyone without the filter."""
    got = inside_python(sandbox, """
    x86 = os.uname().machine == "x86_64"
    out = {"ptrace_traceme": call(101 if x86 else 117, 0, 0, 0, 0),
           "keyctl_get_session": call(250 if x86 else 219, 0, -3, 0),
           "kcmp_self": call(312 if x86 else 272, os.getpid(), os.getpid(), 0, 0, 0),
           "process_vm_readv_self_empty": call(310 if x86 else 270, os.getpid(), 0, 0, 0, 0, 0)}
    print(json.dumps(out))
    """)
    assert set(got.values()) == {"EPERM"}, got


def test_nested_user_namespaces_only_when_asked():
    # Without --map-root-user: mapping uid 0 in a child namespace takes CAP_SETFCAP, which no
    # process of the sandbox holds.
    script = "unshare --user readlink /proc/self/ns/user"
    with Sandbox(SandboxSpec(nested_userns=True)) as sb:
        outer = sb.exec("readlink /proc/self/ns/user").stdout
        allowed = sb.exec(script)
    with Sandbox() as sb:
        denied = sb.exec(script)
    assert allowed.exit_code == 0 and allowed.stdout != outer, allowed
    assert denied.exit_code != 0 and "Operation not permitted" in denied.stderr


def test_the_masks_are_in_place_before_any_host_side_file_operation():
    """The first zygote makes them (RootPlan.masks: /proc's, the host secrets'), not bwrap, as
    the sandbox starts, and every host-side file operation waits for it (pid1._open_root): one
    right after start (an editor's) meets /proc/keys masked and /proc/sys read-only, never a
    root caller's host sysctls writable or the user's keys (without the wait, reading /proc/keys
    here returned them)."""
    for _ in range(20):
        with Sandbox() as sb:
            with pytest.raises(PermissionError):  # the mask: a device on a nodev mount
                sb.read_file("/proc/keys")
            root, masks = f"/proc/{sb.pid}/root", sb._root.masks
            # a file under /dev/null; a folder (/proc/sys, a host secret's empty tmpfs) read-only
            found = {dest: stat.S_ISCHR(os.stat(root + dest).st_mode) if source == "/dev/null"
                     else bool(os.statvfs(root + dest).f_flag & os.ST_RDONLY) for source, dest in masks}
        assert {"/proc/sys", "/proc/keys", "/proc/key-users"} <= set(found) and all(found.values()), found


KEYRING_PROBE = """
import ctypes, json, os, platform, sys
from isolation import Sandbox
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
keyctl, add_key = {"x86_64": (250, 248), "aarch64": (219, 217)}[platform.machine()]
# A session keyring of our own holding a secret, as a login session's would.
if libc.syscall(ctypes.c_long(keyctl), ctypes.c_long(1), None) < 0:
    sys.exit(3)
if libc.syscall(ctypes.c_long(add_key), b"user", b"lis-canary", b"hunter2", ctypes.c_size_t(7), ctypes.c_long(-3)) < 0:
    sys.exit(3)
with Sandbox() as sb:
    keys = sb.exec("cat /proc/keys").stdout
    probe = sb.exec(["python3", "-c", "import ctypes, sys; l = ctypes.CDLL(None, use_errno=True); "
                     f"r = l.syscall({keyctl}, 0, -3, 0); print(r, ctypes.get_errno())"]).stdout.split()
print(json.dumps({"host": open("/proc/keys").read(), "inside": keys, "keyctl": probe}))
"""


def test_the_host_session_keyring_is_not_shared():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", KEYRING_PROBE], capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    if r.returncode == 3:
        pytest.skip("this kernel refuses a keyring to this process")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert "lis-canary" in got["host"]  # the secret was there to be found...
    assert "lis-canary" not in got["inside"]  # ...and is not visible inside
    assert got["keyctl"] == ["-1", str(errno.EPERM)]


# One write a line: pid 1 (a planted keeper) runs beside the first commands, which start once bwrap
# has built the sandbox, not once pid 1 says it runs (spawn/forks.py, _Start.keeper_said).
SPY = ("line=\"pid:$$ $(grep -E '^(CapEff|NoNewPrivs):' /proc/self/status | tr '\\n' ' ')\"\n"
       "echo \"$line\" >> /var/log/lis-spy\n")
KEEPER_ONLY = f"{1 << 35:016x}"  # CAP_WAKE_ALARM (bwrap.KEEPER_CAP): allows nothing inside (containment.md)


@pytest.fixture
def planted(debian_rootfs):
    """A session on a directory rootfs where the model has replaced setpriv, env and sh with spies
    that log their capabilities, as the audit did, for the commands of a later sandbox."""
    from isolation import sessions

    spec = SandboxSpec(rootfs=str(debian_rootfs.rootfs.path), session=f"planted-{os.getpid()}")
    with Sandbox(spec) as sb:
        assert sb.exec(["cp", "-p", "/usr/bin/dash", "/usr/bin/dash.real"]).exit_code == 0
        for spy, real in (("/usr/local/sbin/setpriv", "/usr/bin/setpriv"), ("/usr/local/bin/env", "/usr/bin/env"),
                          ("/usr/local/bin/nsenter", "/usr/bin/nsenter"), ("/usr/bin/sh.spy", "/usr/bin/dash.real")):
            sb.write_file(spy, f"#!/usr/bin/dash.real\n{SPY}exec {real} \"$@\"\n".encode(), mode=0o755)
        assert sb.exec(["ln", "-sf", "/usr/bin/sh.spy", "/usr/bin/sh"]).exit_code == 0
        sb.write_file("/var/log/lis-spy", b"")
    yield spec
    sessions.remove(spec.session)


def test_planted_tools_in_a_directory_rootfs_never_run_with_capabilities(planted):
    with Sandbox(planted) as sb:  # the same session: its upper layer holds the spies
        for command in ("sh -c true", "env true", "setpriv --dump", "true"):
            sb.exec(command)
        sb.exec(["sh", "-c", "true"])
        log = sb.exec(["cat", "/var/log/lis-spy"]).stdout
    lines = [line.split() for line in log.splitlines() if line.strip()]
    # pid 1, the keeper, is the rootfs's `sh`: a planted one runs as it with the keeper's one
    # capability, which the kernel checks only in the initial user namespace (as a planted bash did
    # when the keeper was bash); what runs under it holds that one and no other
    commands = [line[1:] for line in lines if line[0] != "pid:1"]
    keeper = [line[1:] for line in lines if line[0] == "pid:1"]
    assert len(commands) >= 3, f"the spies never ran: {log!r}"  # the attack ran...
    assert all(line == ["CapEff:", "0000000000000000", "NoNewPrivs:", "1"] for line in commands), log  # ...bare
    assert all(line == ["CapEff:", KEEPER_ONLY, "NoNewPrivs:", "1"] for line in keeper), log


CONNECT = """
import socket, stat
got = {}
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        seen = stat.S_ISSOCK(os.lstat(path).st_mode)
        s.connect(path)
        got[path] = [seen, "connected"]
    except OSError as e:
        got[path] = [seen, errno.errorcode[e.errno]]
print(json.dumps(got))
"""


def _listen(path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)
    socket.socket(socket.AF_UNIX).connect(str(path))  # the host reaches it: a live service
    return server


def test_a_socket_in_a_host_folder_cannot_be_reached_whenever_it_appears(tmp_path):
    """Sockets a host program binds in the input, documents or workspace folder, before the start
    and while the sandbox runs (a mask taken at the start missed the late ones), are seen inside
    as sockets and refuse the connection."""
    folders = {name: tmp_path / name for name in ("in", "docs", "ws")}
    for folder in folders.values():
        folder.mkdir()
        (folder / "data.txt").write_text("ok\n")
    servers = [_listen(folder / "early.sock") for folder in folders.values()]
    spec = SandboxSpec(input_dir=folders["in"], documents_dir=folders["docs"], workspace=folders["ws"])
    # beside a workspace, the input and documents folders are the model's own, under /agent
    paths = [f"{where}/{name}" for where in ("/agent/input", "/agent/documents", "/testbed")
             for name in ("early.sock", "late.sock")] + ["/agent/input/sub/late.sock"]
    try:
        with Sandbox(spec) as sb:
            data = sb.exec("cat /agent/input/data.txt /agent/documents/data.txt /testbed/data.txt").stdout
            servers += [_listen(folder / "late.sock") for folder in folders.values()]
            (folders["in"] / "sub").mkdir()
            servers.append(_listen(folders["in"] / "sub" / "late.sock"))
            r = sb.exec(["python3", "-c", SYSCALL + CONNECT, *paths], timeout=60)
    finally:
        for server in servers:
            server.close()
    assert data == "ok\n" * 3, data  # the folders are there and readable
    got = json.loads(r.stdout)
    assert got == dict.fromkeys(paths, [True, "ECONNREFUSED"]), got  # each seen as a socket, none reached


def test_a_host_abstract_socket_cannot_be_reached(sandbox):
    """Abstract unix sockets have no file: the sandbox's network namespace scopes them, so one the
    host listens on is not there inside (the namespace is new in every network mode)."""
    name = f"\0lis-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX)
    server.bind(name)
    server.listen(1)
    try:
        socket.socket(socket.AF_UNIX).connect(name)  # the host reaches it
        got = inside_python(sandbox, f"""
            import socket
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect({name!r})
                print(json.dumps("connected"))
            except OSError as e:
                print(json.dumps(errno.errorcode[e.errno]))
            """)
    finally:
        server.close()
    assert got == "ECONNREFUSED"
