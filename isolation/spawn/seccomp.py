"""The syscall filter every sandboxed process runs under: an allow list, emitted as classic BPF.

Docker's default profile is the anchor: what it allows a container without capabilities is
allowed here, less what lets one process reach into another (ptrace, process_vm_*, kcmp,
pidfd_getfd, process_madvise), the kernel's more exposed corners (bpf, perf_event_open,
userfaultfd, io_uring, name_to_handle_at) and the user's keyrings, which this filter refused before
it was an allow list. Everything else is refused: a syscall the kernel adds tomorrow too.

How a refusal answers: a number this file does not name answers ENOSYS, as a kernel without the
call would, so that libc and runtimes fall back (clone3 to clone, statmount to mountinfo); a call
it names and refuses answers EPERM, as Docker's does; the process lives on. Syscalls of a foreign
ABI (i386 on x86_64, arm32 on aarch64, by the arch field; x32, whose numbers all lie above any
named here) answer ENOSYS.

Argument rules, each on the low 32 bits of the argument, which is all the kernel reads of it:
ioctl refuses TIOCSTI and TIOCLINUX (the terminal's input queue); clone and unshare refuse
CLONE_NEWUSER unless the sandbox asked for nested user namespaces, and clone3, whose flags sit in
memory a filter cannot read, answers ENOSYS then (libc falls back to clone); socket refuses
AF_VSOCK, the one family Docker refuses (it is in no network namespace: a network-off sandbox
could listen on the VM's vsock ports); personality takes only Docker's five values.

Docker allows more to a container that holds a capability; ours hold none, so of those only
chroot is allowed (the zygote chroots under the filter, holding CAP_SYS_CHROOT; nothing later can)
and, with nested user namespaces, where a process may hold capabilities in a namespace of its own,
what a nested sandbox builds with: mount and the new mount API, pivot_root, setns, sethostname.
Calls newer than the profile are decided one by one (docs/containment.md has the table):
allowed as variants of calls Docker allows (cachestat, fchmodat2, futex_waitv and futex2,
mseal, the *xattrat calls, file_getattr/file_setattr, map_shadow_stack; uretprobe and uprobe,
which the kernel runs before any filter); refused with ENOSYS, so that callers fall back to /proc
(statmount, listmount, lsm_*).

Why our own BPF and not libseccomp: the numbers are kernel ABI and never change, the program is a
binary search over ranges of numbers plus four argument checks, and the Python bindings of
libseccomp are not on PyPI in a form that installs into a virtual environment without the
system's headers. The search tree keeps every call at about ten instructions (the kernel also
caches "always allowed" per number for filters like this one, which never read an argument on
the way to an allow), and `tests/isolation/test_filter.py` walks every number from inside.

Standard library only: the spawn helper (helper.py) imports this file by path.
"""
from __future__ import annotations

import errno
import functools
import itertools
import os
import struct

# Syscall names in number order ("@N": the next name is number N), from the kernel's
# arch/x86/entry/syscalls/syscall_64.tbl and scripts/syscall.tbl (aarch64), as of Linux 6.18.
_FROM_424 = """@424 pidfd_send_signal io_uring_setup io_uring_enter io_uring_register open_tree move_mount
fsopen fsconfig fsmount fspick pidfd_open clone3 close_range openat2 pidfd_getfd faccessat2 process_madvise
epoll_pwait2 mount_setattr quotactl_fd landlock_create_ruleset landlock_add_rule landlock_restrict_self
memfd_secret process_mrelease futex_waitv set_mempolicy_home_node cachestat fchmodat2 map_shadow_stack
futex_wake futex_wait futex_requeue statmount listmount lsm_get_self_attr lsm_set_self_attr lsm_list_modules
mseal setxattrat getxattrat listxattrat removexattrat open_tree_attr file_getattr file_setattr"""
_TABLES = {"x86_64": """read write open close stat fstat lstat poll lseek mmap mprotect munmap brk rt_sigaction
rt_sigprocmask rt_sigreturn ioctl pread64 pwrite64 readv writev access pipe select sched_yield mremap msync
mincore madvise shmget shmat shmctl dup dup2 pause nanosleep getitimer alarm setitimer getpid sendfile socket
connect accept sendto recvfrom sendmsg recvmsg shutdown bind listen getsockname getpeername socketpair
setsockopt getsockopt clone fork vfork execve exit wait4 kill uname semget semop semctl shmdt msgget msgsnd
msgrcv msgctl fcntl flock fsync fdatasync truncate ftruncate getdents getcwd chdir fchdir rename mkdir rmdir
creat link unlink symlink readlink chmod fchmod chown fchown lchown umask gettimeofday getrlimit getrusage
sysinfo times ptrace getuid syslog getgid setuid setgid geteuid getegid setpgid getppid getpgrp setsid
setreuid setregid getgroups setgroups setresuid getresuid setresgid getresgid getpgid setfsuid setfsgid getsid
capget capset rt_sigpending rt_sigtimedwait rt_sigqueueinfo rt_sigsuspend sigaltstack utime mknod uselib
personality ustat statfs fstatfs sysfs getpriority setpriority sched_setparam sched_getparam
sched_setscheduler sched_getscheduler sched_get_priority_max sched_get_priority_min sched_rr_get_interval
mlock munlock mlockall munlockall vhangup modify_ldt pivot_root _sysctl prctl arch_prctl adjtimex setrlimit
chroot sync acct settimeofday mount umount2 swapon swapoff reboot sethostname setdomainname iopl ioperm
create_module init_module delete_module get_kernel_syms query_module quotactl nfsservctl getpmsg putpmsg
afs_syscall tuxcall security gettid readahead setxattr lsetxattr fsetxattr getxattr lgetxattr fgetxattr
listxattr llistxattr flistxattr removexattr lremovexattr fremovexattr tkill time futex sched_setaffinity
sched_getaffinity set_thread_area io_setup io_destroy io_getevents io_submit io_cancel get_thread_area
lookup_dcookie epoll_create epoll_ctl_old epoll_wait_old remap_file_pages getdents64 set_tid_address
restart_syscall semtimedop fadvise64 timer_create timer_settime timer_gettime timer_getoverrun timer_delete
clock_settime clock_gettime clock_getres clock_nanosleep exit_group epoll_wait epoll_ctl tgkill utimes vserver
mbind set_mempolicy get_mempolicy mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify mq_getsetattr
kexec_load waitid add_key request_key keyctl ioprio_set ioprio_get inotify_init inotify_add_watch
inotify_rm_watch migrate_pages openat mkdirat mknodat fchownat futimesat newfstatat unlinkat renameat linkat
symlinkat readlinkat fchmodat faccessat pselect6 ppoll unshare set_robust_list get_robust_list splice tee
sync_file_range vmsplice move_pages utimensat epoll_pwait signalfd timerfd_create eventfd fallocate
timerfd_settime timerfd_gettime accept4 signalfd4 eventfd2 epoll_create1 dup3 pipe2 inotify_init1 preadv
pwritev rt_tgsigqueueinfo perf_event_open recvmmsg fanotify_init fanotify_mark prlimit64 name_to_handle_at
open_by_handle_at clock_adjtime syncfs sendmmsg setns getcpu process_vm_readv process_vm_writev kcmp
finit_module sched_setattr sched_getattr renameat2 seccomp getrandom memfd_create kexec_file_load bpf execveat
userfaultfd membarrier mlock2 copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc pkey_free statx
io_pgetevents rseq uretprobe uprobe """ + _FROM_424,
           "aarch64": """io_setup io_destroy io_submit io_cancel io_getevents setxattr lsetxattr fsetxattr
getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr lremovexattr fremovexattr getcwd
lookup_dcookie eventfd2 epoll_create1 epoll_ctl epoll_pwait dup dup3 fcntl inotify_init1 inotify_add_watch
inotify_rm_watch ioctl ioprio_set ioprio_get flock mknodat mkdirat unlinkat symlinkat linkat renameat umount2
mount pivot_root nfsservctl statfs fstatfs truncate ftruncate fallocate faccessat chdir fchdir chroot fchmod
fchmodat fchownat fchown openat close vhangup pipe2 quotactl getdents64 lseek read write readv writev pread64
pwrite64 preadv pwritev sendfile pselect6 ppoll signalfd4 vmsplice splice tee readlinkat newfstatat fstat
sync fsync fdatasync sync_file_range timerfd_create timerfd_settime timerfd_gettime utimensat acct capget
capset personality exit exit_group waitid set_tid_address unshare futex set_robust_list get_robust_list
nanosleep getitimer setitimer kexec_load init_module delete_module timer_create timer_gettime
timer_getoverrun timer_settime timer_delete clock_settime clock_gettime clock_getres clock_nanosleep syslog
ptrace sched_setparam sched_setscheduler sched_getscheduler sched_getparam sched_setaffinity
sched_getaffinity sched_yield sched_get_priority_max sched_get_priority_min sched_rr_get_interval
restart_syscall kill tkill tgkill sigaltstack rt_sigsuspend rt_sigaction rt_sigprocmask rt_sigpending
rt_sigtimedwait rt_sigqueueinfo rt_sigreturn setpriority getpriority reboot setregid setgid setreuid setuid
setresuid getresuid setresgid getresgid setfsuid setfsgid times setpgid getpgid getsid setsid getgroups
setgroups uname sethostname setdomainname getrlimit setrlimit getrusage umask prctl getcpu gettimeofday
settimeofday adjtimex getpid getppid getuid geteuid getgid getegid gettid sysinfo mq_open mq_unlink
mq_timedsend mq_timedreceive mq_notify mq_getsetattr msgget msgctl msgrcv msgsnd semget semctl semtimedop
semop shmget shmctl shmat shmdt socket socketpair bind listen accept connect getsockname getpeername sendto
recvfrom setsockopt getsockopt shutdown sendmsg recvmsg readahead brk munmap mremap add_key request_key keyctl
clone execve mmap fadvise64 swapon swapoff mprotect msync mlock munlock mlockall munlockall mincore madvise
remap_file_pages mbind get_mempolicy set_mempolicy migrate_pages move_pages rt_tgsigqueueinfo
perf_event_open accept4 recvmmsg @260 wait4 prlimit64 fanotify_init fanotify_mark name_to_handle_at
open_by_handle_at clock_adjtime syncfs setns sendmmsg process_vm_readv process_vm_writev kcmp finit_module
sched_setattr sched_getattr renameat2 seccomp getrandom memfd_create bpf execveat userfaultfd membarrier
mlock2 copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents rseq
kexec_file_load """ + _FROM_424}

# Every name above is in exactly one of these (a test checks it): a new one needs a decision.
ALLOWED = frozenset("""accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown
clock_adjtime clock_getres clock_gettime clock_nanosleep close close_range connect copy_file_range creat dup
dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_pwait epoll_pwait2 epoll_wait eventfd eventfd2 execve
execveat exit exit_group faccessat faccessat2 fadvise64 fallocate fanotify_mark fchdir fchmod fchmodat fchown
fchownat fcntl fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat fstatfs fsync ftruncate
futex futex_waitv futimesat getcpu getcwd getdents getdents64 getegid geteuid getgid getgroups getitimer
getpeername getpgid getpgrp getpid getppid getpriority getrandom getresgid getresuid getrlimit get_robust_list
getrusage getsid getsockname getsockopt get_thread_area gettid gettimeofday getuid getxattr inotify_add_watch
inotify_init inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents io_pgetevents ioprio_get
ioprio_set io_setup io_submit kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown
lgetxattr link linkat listen listxattr llistxattr lremovexattr lseek lsetxattr lstat madvise membarrier
memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat mlock mlock2 mlockall mmap mprotect
mq_getsetattr mq_notify mq_open mq_timedreceive mq_timedsend mq_unlink mremap msgctl msgget msgrcv msgsnd
msync munlock munlockall munmap nanosleep newfstatat open openat openat2 pause pidfd_open pidfd_send_signal
pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll prctl pread64 preadv preadv2 prlimit64
process_mrelease pselect6 pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recvfrom
recvmmsg recvmsg remap_file_pages removexattr rename renameat renameat2 restart_syscall rmdir rseq
rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend rt_sigtimedwait
rt_tgsigqueueinfo sched_getaffinity sched_getattr sched_getparam sched_get_priority_max
sched_get_priority_min sched_getscheduler sched_rr_get_interval sched_setaffinity sched_setattr
sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop sendfile
sendmmsg sendmsg sendto setfsgid setfsuid setgid setgroups setitimer setpgid setpriority setregid setresgid
setresuid setreuid setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid
setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 socketpair splice stat statfs
statx symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create timer_delete
timer_getoverrun timer_gettime timer_settime timerfd_create timerfd_gettime timerfd_settime times tkill
truncate umask uname unlink unlinkat utime utimensat utimes vfork vmsplice wait4 waitid write writev
arch_prctl modify_ldt chroot
cachestat fchmodat2 futex_wake futex_wait futex_requeue mseal setxattrat getxattrat listxattrat
removexattrat file_getattr file_setattr map_shadow_stack uretprobe uprobe""".split())
ARGUMENT_RULES = {"ioctl": "ioctl", "clone": "flags", "unshare": "flags", "socket": "socket",
                  "personality": "personality"}
NESTED_ONLY = frozenset("""mount umount2 pivot_root setns sethostname setdomainname open_tree move_mount fsopen
fsconfig fsmount fspick mount_setattr open_tree_attr""".split())  # EPERM without nested user namespaces
NOSYS = frozenset("""clone3 statmount listmount lsm_get_self_attr lsm_set_self_attr lsm_list_modules
_sysctl getpmsg putpmsg afs_syscall tuxcall security vserver epoll_ctl_old epoll_wait_old""".split())
EPERM = frozenset("""ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd process_madvise bpf
perf_event_open userfaultfd io_uring_setup io_uring_enter io_uring_register keyctl add_key request_key
fanotify_init open_by_handle_at name_to_handle_at kexec_load kexec_file_load init_module finit_module
delete_module create_module get_kernel_syms query_module swapon swapoff reboot acct quotactl quotactl_fd
lookup_dcookie uselib nfsservctl iopl ioperm syslog vhangup settimeofday clock_settime mbind get_mempolicy
set_mempolicy set_mempolicy_home_node migrate_pages move_pages ustat sysfs""".split())

CLONE_NEWUSER = 0x10000000
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
AF_VSOCK = 40
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)  # Docker's: PER_LINUX, PER_LINUX32, UNAME26, both, query

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian)
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24
# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K, _JGE_K, _JSET_K = 0x15, 0x35, 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # AUDIT_ARCH_*


@functools.lru_cache(maxsize=None)
def numbers(machine: str) -> dict[str, int]:
    """Syscall name -> number on `machine` (x86_64 or aarch64). Shared: do not change it."""
    table, nr = {}, 0
    for word in _TABLES[machine].split():
        if word.startswith("@"):
            nr = int(word[1:])
            continue
        table[word] = nr
        nr += 1
    return table


def actions(machine: str, *, nested_userns: bool = False) -> dict[int, str]:
    """Number -> what the filter does with it: allow, eperm, nosys, or the argument rule it goes
    through (ioctl, flags, socket, personality). Numbers not here answer ENOSYS."""
    out, nested = {}, NESTED_ONLY | {"clone3", "clone", "unshare"} if nested_userns else frozenset()
    for name, nr in numbers(machine).items():
        if name in ALLOWED or name in nested:
            out[nr] = "allow"
        elif name in ARGUMENT_RULES:
            out[nr] = ARGUMENT_RULES[name]
        elif name in NOSYS:
            out[nr] = "nosys"
        else:  # EPERM, and NESTED_ONLY without nested user namespaces
            out[nr] = "eperm"
    return out


def program(machine: str | None = None, *, nested_userns: bool = False) -> bytes:
    """The filter as an array of `struct sock_filter` (what bwrap's --seccomp and prctl take)."""
    machine = machine or os.uname().machine  # platform.machine()'s answer, without platform's import
    if machine not in _ARCHES:
        raise OSError(errno.ENOTSUP, f"no syscall filter for {machine}; lis-tui supports x86_64 and aarch64")
    by_nr = actions(machine, nested_userns=nested_userns)
    # ranges of numbers with one action: (first number, action), the last one open-ended
    ranges: list[tuple[int, str]] = []
    for nr in range(max(by_nr) + 2):
        action = by_nr.get(nr, "nosys")
        if not ranges or ranges[-1][1] != action:
            ranges.append((nr, action))
    # (opcode, k, label to jump to when true, label when false); None: the next instruction
    code: list = [(_LD_W_ABS, _ARCH), (_JEQ_K, _ARCHES[machine], None, "nosys"), (_LD_W_ABS, _NR)]
    code += _search(ranges, itertools.count())
    code += ["ioctl", (_LD_W_ABS, _ARG1), (_JEQ_K, TIOCSTI, "eperm", None), (_JEQ_K, TIOCLINUX, "eperm", "allow"),
             "flags", (_LD_W_ABS, _ARG0), (_JSET_K, CLONE_NEWUSER, "eperm", "allow"),
             "socket", (_LD_W_ABS, _ARG0), (_JEQ_K, AF_VSOCK, "eperm", "allow"),
             "personality", (_LD_W_ABS, _ARG0)]
    code += [(_JEQ_K, value, "allow", None) for value in PERSONALITIES]
    code += ["eperm", (_RET_K, _RET_ERRNO | errno.EPERM),
             "allow", (_RET_K, _RET_ALLOW),
             "nosys", (_RET_K, _RET_ERRNO | errno.ENOSYS)]
    return _assemble(code)


def _search(ranges: list[tuple[int, str]], ids) -> list:
    """A balanced binary search over `ranges` (the number is loaded): each test is one JGE, and a
    leaf is a jump to its action's label, so any number takes about log2(len(ranges)) tests."""
    mid = len(ranges) // 2
    split = ranges[mid][0]
    left, right = ranges[:mid], ranges[mid:]
    if len(left) == 1 and len(right) == 1:
        return [(_JGE_K, split, right[0][1], left[0][1])]
    if len(right) == 1:
        return [(_JGE_K, split, right[0][1], None), *_search(left, ids)]
    if len(left) == 1:
        return [(_JGE_K, split, None, left[0][1]), *_search(right, ids)]
    label = f"ge{next(ids)}"
    return [(_JGE_K, split, label, None), *_search(left, ids), label, *_search(right, ids)]


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
    if len(out) > 4096:
        raise AssertionError("seccomp filter longer than the kernel takes (4096 instructions)")
    return b"".join(out)
