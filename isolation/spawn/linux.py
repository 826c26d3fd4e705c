"""The few Linux calls Python's os module lacks: setns, unshare, mount, capabilities, keyrings, seccomp.

Standard library only: the spawn helper (helper.py) imports this file by path. Every libc symbol
is looked up here, at import, so that nothing is resolved or loaded later, once a process has
joined a sandbox's mount namespace (where a lazy load would read the sandbox's files).
"""
from __future__ import annotations

import ctypes
import errno
import os

_libc = ctypes.CDLL(None, use_errno=True)
_setns = _libc.setns
_setns.argtypes = [ctypes.c_int, ctypes.c_int]
_unshare = _libc.unshare
_unshare.argtypes = [ctypes.c_int]
_mount = _libc.mount
_mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_malloc_trim = getattr(_libc, "malloc_trim", None)  # glibc's

CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
# What a joined process enters, in the order a per-namespace join must take (user first: it
# grants the capabilities the others ask for). No time namespace: the sandbox has none.
NAMESPACES = (("user", CLONE_NEWUSER), ("mnt", CLONE_NEWNS), ("pid", CLONE_NEWPID), ("net", CLONE_NEWNET),
              ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS), ("cgroup", CLONE_NEWCGROUP))
ALL_NAMESPACES = sum(flag for _, flag in NAMESPACES)

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
KEYCTL_JOIN_SESSION_KEYRING = 1
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
AT_FDCWD = -100
OPEN_TREE_CLONE = 1
FSPICK_CLOEXEC, FSPICK_SYMLINK_NOFOLLOW, FSPICK_NO_AUTOMOUNT, FSPICK_EMPTY_PATH = 1, 2, 4, 8
FSCONFIG_SET_STRING, FSCONFIG_CMD_RECONFIGURE = 1, 7
_NEW_MOUNT_API = {"open_tree": 428, "fsconfig": 431, "fspick": 433}  # one number on every arch
_SYS = {"x86_64": {"capset": 126, "keyctl": 250, **_NEW_MOUNT_API},
        "aarch64": {"capset": 91, "keyctl": 219, **_NEW_MOUNT_API}}.get(os.uname().machine, {})


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def setns(fd: int, nstype: int) -> None:
    """Join the namespace(s) named by `fd`: a /proc/PID/ns file, or a pidfd with several CLONE_NEW* bits."""
    _check(_setns(fd, nstype), "setns")


def unshare(flags: int) -> None:
    """Leave the namespaces named by `flags` (CLONE_NEW*); CLONE_NEWNS affects the calling thread only."""
    _check(_unshare(flags), "unshare")


def mount(source: str | None, target: str, flags: int, data: str | None = None, fstype: str | None = None) -> None:
    """mount(2): binds, remounts (`data`: the file system's options), propagation changes, or a
    new file system of `fstype`."""
    options = ctypes.c_char_p(data.encode()) if data is not None else None
    _check(_mount(source and source.encode(), target.encode(), fstype and fstype.encode(), flags, options),
           f"mount {target}")


def open_tree(path: str, clone: bool = True) -> int:
    """open_tree(2): a descriptor of a detached copy of the one mount at `path` (`clone`; the
    mounts over its folders do not come along), or of the mount itself."""
    flags = (OPEN_TREE_CLONE if clone else 0) | os.O_CLOEXEC
    if "open_tree" not in _SYS:
        raise OSError(errno.ENOSYS, "open_tree: not known on this architecture")
    return _check(_syscall(ctypes.c_long(_SYS["open_tree"]), ctypes.c_int(AT_FDCWD), path.encode(), ctypes.c_uint(flags)),
                  "open_tree")


def fspick(dirfd: int, path: str = "") -> int:
    """fspick(2): a context for reconfiguring the file system mounted at `path` (or at `dirfd`
    itself, with ""): its holder may resize a tmpfs later with `reconfigure`, from any namespace,
    as long as it holds CAP_SYS_ADMIN in the file system's user namespace (its owner does)."""
    flags = FSPICK_CLOEXEC | FSPICK_SYMLINK_NOFOLLOW | FSPICK_NO_AUTOMOUNT | (0 if path else FSPICK_EMPTY_PATH)
    if "fspick" not in _SYS:
        raise OSError(errno.ENOSYS, "fspick: not known on this architecture")
    return _check(_syscall(ctypes.c_long(_SYS["fspick"]), ctypes.c_int(dirfd), path.encode(), ctypes.c_uint(flags)),
                  "fspick")


def reconfigure(context: int, options: dict[str, str]) -> None:
    """Set `options` (a tmpfs's size, nr_inodes) on a file system through its fspick context. A
    failure (EINVAL: less than it holds now) spends the context: the kernel refuses it from then on."""
    for key, value in options.items():
        _check(_syscall(ctypes.c_long(_SYS["fsconfig"]), ctypes.c_int(context), ctypes.c_uint(FSCONFIG_SET_STRING),
                        key.encode(), str(value).encode(), ctypes.c_int(0)), f"fsconfig {key}")
    _check(_syscall(ctypes.c_long(_SYS["fsconfig"]), ctypes.c_int(context), ctypes.c_uint(FSCONFIG_CMD_RECONFIGURE),
                    None, None, ctypes.c_int(0)), "fsconfig reconfigure")


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return _check(_prctl(option, arg2, arg3, 0, 0), f"prctl({option})")


def last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


def drop_capabilities(last: int) -> None:
    """Empty the bounding, ambient, inheritable, permitted and effective sets: what exec can
    no longer give back, then what the process holds."""
    drop_bounding_set(last)
    drop_held_capabilities()


def drop_bounding_set(last: int) -> None:
    """Empty the bounding set: no exec can ever gain a capability again. The process keeps
    those it holds (chroot still works) until drop_held_capabilities."""
    for cap in range(last + 1):
        _check(_prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "prctl(PR_CAPBSET_DROP)")


# The ctypes types a zygote uses, made here, at import, in the helper: a type made in a fresh
# fork is a class built there (a few dozen pages written, each a copy-on-write fault), per sandbox.
_CapHeader = ctypes.c_uint32 * 2
_CapData = ctypes.c_uint32 * 6


def drop_held_capabilities() -> None:
    """Empty the ambient, inheritable, permitted and effective sets."""
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = _CapData()  # two of {effective, permitted, inheritable}, all zero
    _check(_syscall(ctypes.c_long(_SYS["capset"]), header, data), "capset")


def join_new_session_keyring() -> None:
    """A fresh, empty session keyring: none of the user's keys are reachable any more."""
    _check(_syscall(ctypes.c_long(_SYS["keyctl"]), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None), "keyctl")


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class SeccompProgram:
    """A filter laid out for the kernel once (at the helper's start), loaded by many forks."""

    def __init__(self, program: bytes) -> None:
        self.program = program
        self._buf = ctypes.create_string_buffer(program, len(program))
        self._prog = _Fprog(len(program) // 8, ctypes.addressof(self._buf))
        self.address = ctypes.addressof(self._prog)


def install_seccomp(program: SeccompProgram) -> None:
    """Load a filter (needs no_new_privs set first, or CAP_SYS_ADMIN)."""
    _check(_prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program.address, 0, 0), "seccomp")


def malloc_trim() -> None:
    """Give the C heap's free pages back to the kernel (glibc; elsewhere nothing): a process that
    forks many times copies, and each fork unmaps, only what it still holds."""
    if _malloc_trim is not None:
        _malloc_trim(0)
