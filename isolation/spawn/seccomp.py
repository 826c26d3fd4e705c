"""The syscall filter every sandboxed process runs under, emitted as classic BPF.

A deny list modelled on Docker's default profile: what lets one process reach into another
(ptrace, process_vm_*, kcmp), reach the kernel's more exposed corners (bpf, perf_event_open,
userfaultfd, io_uring), the user's keyrings, the terminal's input queue (TIOCSTI, TIOCLINUX), or
the machine (modules, kexec, swap, reboot, acct, quotas). Denied calls fail with EPERM; the process
lives on. New user namespaces (clone/unshare with CLONE_NEWUSER) are denied too unless asked for,
and clone3, whose flags sit in memory a filter cannot read, answers ENOSYS so that libc falls back
to clone. Syscalls of a foreign ABI (i386 or x32 on x86_64, arm32 on aarch64) answer ENOSYS: their
numbers differ, and a deny list checked against the wrong table would let them through.

Why our own BPF and not libseccomp: the filter is a flat list of about thirty numbers per
architecture and three argument checks, the numbers are kernel ABI and never change, and the Python
bindings of libseccomp are not on PyPI in a form that installs into a virtual environment without
the system's headers. `tests/isolation/test_containment.py` checks the list syscall by syscall.

Standard library only: the spawn helper (helper.py) imports this file by path.
"""
from __future__ import annotations

import errno
import platform
import struct

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian)
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24
# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K, _JGE_K, _JSET_K = 0x15, 0x35, 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

CLONE_NEWUSER = 0x10000000
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

# name: (x86_64, aarch64); None where the architecture has no such call
SYSCALLS: dict[str, tuple[int | None, int | None]] = {
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272), "perf_event_open": (298, 241), "bpf": (321, 280), "userfaultfd": (323, 282),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "create_module": (174, None), "query_module": (178, None), "get_kernel_syms": (177, None),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142), "acct": (163, 89),
    "quotactl": (179, 60), "quotactl_fd": (443, 443), "lookup_dcookie": (212, 18),
    "uselib": (134, None), "nfsservctl": (180, 42), "iopl": (172, None), "ioperm": (173, None),
    "fanotify_init": (300, 262),
}
DENIED = tuple(name for name in SYSCALLS)
_IOCTL = (16, 29)
_CLONE, _UNSHARE, _CLONE3 = (56, 220), (272, 97), (435, 435)
_ARCHES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}  # (column, AUDIT_ARCH_*)
_X32_BIT = 0x40000000


def program(machine: str | None = None, *, nested_userns: bool = False) -> bytes:
    """The filter as an array of `struct sock_filter` (what bwrap's --seccomp and prctl take)."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise OSError(errno.ENOTSUP, f"no syscall filter for {machine}; lis-tui supports x86_64 and aarch64")
    col, audit_arch = _ARCHES[machine]
    nr = lambda pair: pair[col]  # noqa: E731
    denied = sorted({n for name in DENIED if (n := nr(SYSCALLS[name])) is not None})
    # (opcode, k, label to jump to when true, label when false); None: the next instruction
    code: list[tuple] = [
        (_LD_W_ABS, _ARCH), (_JEQ_K, audit_arch, None, "nosys"), (_LD_W_ABS, _NR),
    ]
    if machine == "x86_64":
        code.append((_JGE_K, _X32_BIT, "nosys", None))
    code += [(_JEQ_K, n, "eperm", None) for n in denied]
    code += [(_JEQ_K, nr(_IOCTL), "ioctl", None)]
    if not nested_userns:
        code += [(_JEQ_K, nr(_CLONE3), "nosys", None), (_JEQ_K, nr(_CLONE), "flags", None),
                 (_JEQ_K, nr(_UNSHARE), "flags", None)]
    code += [(_RET_K, _RET_ALLOW),
             "ioctl", (_LD_W_ABS, _ARG1), (_JEQ_K, TIOCSTI, "eperm", None), (_JEQ_K, TIOCLINUX, "eperm", None),
             (_RET_K, _RET_ALLOW),
             "flags", (_LD_W_ABS, _ARG0), (_JSET_K, CLONE_NEWUSER, "eperm", None), (_RET_K, _RET_ALLOW),
             "eperm", (_RET_K, _RET_ERRNO | errno.EPERM),
             "nosys", (_RET_K, _RET_ERRNO | errno.ENOSYS)]
    return _assemble(code)


def _assemble(code: list) -> bytes:
    labels, insns = {}, []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(insns)
        else:
            insns.append(item)
    out = []
    for at, (op, k, *jumps) in enumerate(insns):
        # a conditional jump counts the instructions it skips after itself (at most 255)
        jt, jf = ((labels[j] - at - 1) if j else 0 for j in (jumps or (None, None)))
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise AssertionError("seccomp filter jump out of range")
        out.append(struct.pack("=HBBI", op, jt, jf, k))
    return b"".join(out)
