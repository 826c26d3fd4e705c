"""The syscall filter is an allow list: every number walked from inside a real sandbox, the argument
rules attacked for real, and a real toolchain (gcc, python, pip, git, node, apt) run under it.

How the walk stays harmless: a small C program adds a second filter of its own (allowed: seccomp,
with no_new_privs) that hands every call carrying a cookie in its sixth argument to a listener
thread (SECCOMP_RET_USER_NOTIF) instead of the kernel. The kernel takes the answer of highest
precedence over all filters, and the sandbox's ERRNO outranks USER_NOTIF: a call the sandbox
refuses answers its errno, and a call it allows reaches the listener, which answers 4242 without
running it. So every number is asked, exit and fork included, and none runs."""
from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import socket
import subprocess
import textwrap

import pytest

from isolation import Sandbox, SandboxSpec
from isolation.spawn import seccomp

pytestmark = pytest.mark.sandbox

MACHINE = platform.machine()
NR = seccomp.numbers(MACHINE) if MACHINE in ("x86_64", "aarch64") else {}
# The kernel lets these past every filter (Linux 6.15+) and kills a caller that is not its own
# uprobe trampoline with SIGILL; no filter can answer for them, so the walk leaves them out.
PASSED_BY_THE_KERNEL = {"uretprobe", "uprobe"}

WALKER = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MARK 4242
#define COOKIE 0x5ec0c0de5ec0c0deUL
static int ready[2];

static void *answer(void *unused) {  /* started before the filter: its own calls never go to it */
    int listener;
    if (read(ready[0], &listener, sizeof listener) != sizeof listener) return NULL;
    for (;;) {
        struct seccomp_notif n;
        struct seccomp_notif_resp r;
        memset(&n, 0, sizeof n);
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &n) < 0) {
            if (errno == EINTR || errno == ENOENT) continue;
            return NULL;
        }
        memset(&r, 0, sizeof r);
        r.id = n.id;
        r.val = MARK;
        ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &r);
    }
}

int main(int argc, char **argv) {
    static long nr[4096], a0[4096], a1[4096], ret[4096], err[4096];
    int n = argc - 1, listener;
    pthread_t thread;
    for (int i = 0; i < n; i++)
        if (sscanf(argv[i + 1], "%li,%li,%li", &nr[i], &a0[i], &a1[i]) != 3) return 2;
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[5])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned) COOKIE, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[5]) + 4),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned) (COOKIE >> 32), 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    if (pipe(ready) || pthread_create(&thread, NULL, answer, NULL)) return 3;
    listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) { perror("seccomp"); return 4; }
    if (write(ready[1], &listener, sizeof listener) != sizeof listener) return 5;
    for (int i = 0; i < n; i++) {  /* no other call in between: nothing else carries the cookie */
        errno = 0;
        ret[i] = syscall(nr[i], a0[i], a1[i], 0L, 0L, 0L, COOKIE);
        err[i] = errno;
    }
    syscall(SYS_getpid, 0L, 0L, 0L, 0L, 0L, 0L);  /* the cookie out of every argument register */
    for (int i = 0; i < n; i++)
        printf("%s %ld\n", ret[i] == MARK ? "allow" : ret[i] == -1 ? "errno" : "returned",
               ret[i] == -1 ? err[i] : ret[i]);
    return 0;
}
"""


@pytest.fixture(scope="module")
def walker(tmp_path_factory) -> bytes:
    """The walker, built static on the host (so it runs in any rootfs)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc on this machine to build the walker: apt-get install gcc libc6-dev")
    src = tmp_path_factory.mktemp("walker") / "walk.c"
    src.write_text(WALKER)
    done = subprocess.run([gcc, "-O1", "-static", "-pthread", "-Wl,-z,now", "-o", str(src.with_suffix("")), str(src)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot build a static walker here ({done.stderr.strip()[-200:]}): apt-get install libc6-dev")
    return src.with_suffix("").read_bytes()


def walk(sb: Sandbox, binary: bytes, probes: list[tuple[int, int, int]]) -> list[str]:
    """What the sandbox's filter answers for each (number, arg0, arg1): allow, EPERM, ENOSYS, ..."""
    sb.write_file("/tmp/walk", binary, mode=0o755)
    r = sb.exec(["/tmp/walk", *(f"{nr},{a0},{a1}" for nr, a0, a1 in probes)], timeout=60)
    assert r.exit_code == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(probes)
    return [kind if kind == "allow" else errno.errorcode.get(int(v), v) if kind == "errno" else f"returned {v}"
            for kind, v in (line.split() for line in lines)]


def every_number() -> list[int]:
    """Every number up to well past the newest syscall, the x32 range, and a few far beyond."""
    far = [1000, 4095, 0x3FFFFFFF, 0x40000000 | NR["getpid"], 0x7FFFFFFF, 0xFFFFFFFF]
    return [nr for nr in range(max(NR.values()) + 100) if nr not in {NR.get(n) for n in PASSED_BY_THE_KERNEL}] + far


def expected(nr: int, nested: bool) -> str:
    action = seccomp.actions(MACHINE, nested_userns=nested).get(nr & 0xFFFFFFFF, "nosys")
    return {"eperm": "EPERM", "nosys": "ENOSYS"}.get(action, "allow")  # argument rules allow all-zero arguments


def test_every_number_answers_as_the_table_says(walker):
    numbers = every_number()
    with Sandbox() as sb:
        got = dict(zip(numbers, walk(sb, walker, [(nr, 0, 0) for nr in numbers])))
    wrong = {nr: (got[nr], expected(nr, False)) for nr in numbers if got[nr] != expected(nr, False)}
    assert wrong == {}
    by_name = {name: got[nr] for name, nr in NR.items() if nr in got}
    # the decisions, by name, whatever the table says
    assert {by_name[n] for n in ("read", "openat", "mmap", "clone", "execve", "statx", "faccessat2", "openat2",
                                 "close_range", "rseq", "getrandom", "memfd_create", "seccomp", "futex_waitv",
                                 "cachestat", "fchmodat2", "mseal", "setxattrat", "getxattrat", "file_getattr",
                                 "landlock_create_ruleset", "chroot", "socket", "personality", "ioctl")} == {"allow"}
    refused = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise", "bpf",
               "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl",
               "add_key", "request_key", "fanotify_init", "open_by_handle_at", "kexec_load", "kexec_file_load",
               "init_module", "finit_module", "delete_module", "swapon", "swapoff", "reboot", "acct", "quotactl",
               "quotactl_fd", "mount", "umount2", "setns", "pivot_root", "fsopen", "open_tree_attr",
               "set_mempolicy_home_node")
    assert {n: by_name[n] for n in refused} == dict.fromkeys(refused, "EPERM")
    assert {by_name[n] for n in ("clone3", "statmount", "listmount", "lsm_get_self_attr", "lsm_set_self_attr",
                                 "lsm_list_modules")} == {"ENOSYS"}
    assert {got[nr] for nr in (max(NR.values()) + 1, 1000, 0x40000000 | NR["getpid"], 0xFFFFFFFF)} == {"ENOSYS"}


ARG_PROBES = [  # (name, arg0, arg1, without nested user namespaces, with them)
    *[("personality", v, 0, "allow", "allow") for v in seccomp.PERSONALITIES],
    ("personality", 0x0040000, 0, "EPERM", "EPERM"),  # ADDR_NO_RANDOMIZE: no ASLR for what it runs next
    ("personality", 0x0400000, 0, "EPERM", "EPERM"),  # READ_IMPLIES_EXEC
    ("personality", 1 << 32, 0, "allow", "allow"),  # the kernel reads 32 bits: this is PER_LINUX
    ("socket", 40, 1, "EPERM", "EPERM"),  # AF_VSOCK
    ("socket", 40 | 1 << 32, 1, "EPERM", "EPERM"),  # the kernel reads an int: still AF_VSOCK
    ("socket", 2, 1, "allow", "allow"), ("socket", 1, 1, "allow", "allow"), ("socket", 16, 3, "allow", "allow"),
    ("ioctl", 0, seccomp.TIOCSTI, "EPERM", "EPERM"), ("ioctl", 0, seccomp.TIOCLINUX, "EPERM", "EPERM"),
    ("ioctl", 0, seccomp.TIOCSTI | 1 << 32, "EPERM", "EPERM"), ("ioctl", 0, 0x5413, "allow", "allow"),
    ("clone", seccomp.CLONE_NEWUSER | 17, 0, "EPERM", "allow"), ("clone", 0x20000 | 17, 0, "allow", "allow"),
    ("unshare", seccomp.CLONE_NEWUSER, 0, "EPERM", "allow"), ("unshare", 0x04000000, 0, "allow", "allow"),
    ("clone3", 0, 0, "ENOSYS", "allow"), ("mount", 0, 0, "EPERM", "allow"), ("setns", 0, 0, "EPERM", "allow"),
    ("pidfd_getfd", 0, 0, "EPERM", "EPERM"), ("ptrace", 0, 0, "EPERM", "EPERM"),
]


@pytest.mark.parametrize("nested", [False, True], ids=["plain", "nested_userns"])
def test_argument_rules_answer_by_value(walker, nested):
    with Sandbox(SandboxSpec(nested_userns=nested)) as sb:
        got = walk(sb, walker, [(NR[name], a0, a1) for name, a0, a1, *_ in ARG_PROBES])
        numbers = every_number()
        whole = dict(zip(numbers, walk(sb, walker, [(nr, 0, 0) for nr in numbers]))) if nested else {}
    want = [probe[4 if nested else 3] for probe in ARG_PROBES]
    assert [(name, hex(a0), hex(a1), g, w) for (name, a0, a1, *_), g, w in zip(ARG_PROBES, got, want) if g != w] == []
    assert {nr: v for nr, v in whole.items() if v != expected(nr, True)} == {}


def test_personality_takes_only_dockers_values():
    """ADDR_NO_RANDOMIZE would turn off ASLR for every program the sandbox runs next."""
    with Sandbox() as sb:
        r = sb.exec(["python3", "-c", textwrap.dedent(f"""
            import ctypes, errno, json
            libc = ctypes.CDLL(None, use_errno=True)
            def persona(value):
                r = libc.personality(ctypes.c_ulong(value))
                return r if r != -1 else errno.errorcode[ctypes.get_errno()]
            out = {{"linux32": persona(0x0008), "back": persona(0), "no_aslr": persona(0x0040000),
                   "exec_all": persona(0x0400000)}}
            out["now"] = open("/proc/self/personality").read().strip()
            print(json.dumps(out))
            """)])
    got = json.loads(r.stdout)
    assert got["linux32"] == 0 and got["back"] == 8  # an allowed value ran: it was set, and set back
    assert got["no_aslr"] == got["exec_all"] == "EPERM" and got["now"] == "00000000"


def test_a_vsock_socket_is_refused_by_the_filter():
    """AF_VSOCK is in no network namespace: a network-off sandbox listened on the VM's vsock ports."""
    try:
        socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
        host = "created"
    except OSError as exc:  # EAFNOSUPPORT: no vsock in this kernel; never EPERM
        host = errno.errorcode[exc.errno]
    with Sandbox() as sb:
        r = sb.exec(["python3", "-c", "import errno, socket\n"
                     "try:\n s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); s.bind((socket.VMADDR_CID_ANY, 5000)); s.listen()\n"
                     " print('listening')\n"
                     "except OSError as e:\n print(errno.errorcode[e.errno])\n"
                     "socket.socket(socket.AF_INET, socket.SOCK_STREAM).close(); print('inet')"])
    assert host != "EPERM"
    assert r.stdout.split() == ["EPERM", "inet"], r.stdout + r.stderr


def test_pidfd_getfd_takes_no_descriptor_of_another_process():
    """It took pid 1's pipes; our own child shows the kernel would have allowed it (same uid, dumpable)."""
    with Sandbox() as sb:
        r = sb.exec(["python3", "-c", textwrap.dedent(f"""
            import ctypes, errno, json, os, subprocess
            libc = ctypes.CDLL(None, use_errno=True)
            child = subprocess.Popen(["sleep", "30"])
            out = {{}}
            for name, pid in (("pid1", 1), ("child", child.pid)):
                pidfd = os.pidfd_open(pid)
                r = libc.syscall({NR['pidfd_getfd']}, pidfd, 1, 0)
                out[name] = "fd" if r >= 0 else errno.errorcode[ctypes.get_errno()]
            child.kill()
            print(json.dumps(out))
            """)])
    assert json.loads(r.stdout) == {"pid1": "EPERM", "child": "EPERM"}, r.stderr


def test_every_named_syscall_has_one_decision_and_the_filter_fits():
    groups = [seccomp.ALLOWED, set(seccomp.ARGUMENT_RULES), seccomp.NESTED_ONLY, seccomp.NOSYS, seccomp.EPERM]
    for machine in ("x86_64", "aarch64"):
        names = seccomp.numbers(machine)
        assert [n for n in names if sum(n in g for g in groups) != 1] == []
        assert len(set(names.values())) == len(names)
        for nested in (False, True):
            assert len(seccomp.program(machine, nested_userns=nested)) // 8 < 255  # one jump reaches the end
    named = set(seccomp.numbers("x86_64")) | set(seccomp.numbers("aarch64"))
    assert [n for g in groups for n in g if n not in named] == []


def test_the_numbers_match_this_machines_kernel_headers():
    """The table against the system's headers, where they are (they may be older than the table)."""
    header = {"x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
              "aarch64": "/usr/include/aarch64-linux-gnu/asm/unistd.h"}.get(MACHINE)
    gcc = shutil.which("gcc")
    if not header or not os.path.exists(header) or gcc is None:
        pytest.skip("no kernel headers or gcc here: apt-get install linux-libc-dev gcc")
    done = subprocess.run([gcc, "-E", "-dM", "-include", "sys/syscall.h", "-x", "c", "/dev/null"],
                          capture_output=True, text=True, check=True)
    theirs = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].startswith("__NR_") and parts[2].isdigit():
            theirs[parts[1][5:]] = int(parts[2])
    assert len(theirs) > 250
    assert {name: nr for name, nr in theirs.items() if NR.get(name) != nr} == {}


# -- nothing normal breaks: real tools under the filter -----------------------------------------

C_PROGRAM = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
static void *work(void *arg) { return (void *) ((long) arg * 2); }
int main(void) {
    pthread_t t[4]; long sum = 0; void *r; unsigned char b[8]; struct stat st;
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, work, (void *) i);
    for (int i = 0; i < 4; i++) { pthread_join(t[i], &r); sum += (long) r; }
    char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    m[12345] = 7;
    pid_t pid = fork();
    if (pid == 0) { execlp("true", "true", (char *) NULL); _exit(9); }
    int status; waitpid(pid, &status, 0);
    if (getrandom(b, sizeof b, 0) != sizeof b || stat("/etc/hostname", &st)) return 1;
    printf("gcc-ok %ld %d %d\n", sum, m[12345], WEXITSTATUS(status));
    return 0;
}
"""

TOOLS = {
    "gcc": f"""cat > /tmp/t.c <<'END'
{C_PROGRAM}
END
gcc -O2 -pthread -o /tmp/t /tmp/t.c && /tmp/t""",
    "python3": """python3 - <<'END'
import asyncio, concurrent.futures, multiprocessing, os, shutil, sqlite3, ssl, subprocess, tempfile, threading
def square(x):
    return x * x
async def child():
    p = await asyncio.create_subprocess_exec("echo", "async", stdout=asyncio.subprocess.PIPE)
    return (await p.communicate())[0].decode().strip()
with multiprocessing.Pool(2) as pool:
    assert pool.map(square, range(5)) == [0, 1, 4, 9, 16]
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    assert sum(ex.map(square, range(10))) == 285
assert asyncio.run(child()) == "async"
assert subprocess.run(["sh", "-c", "exit 3"]).returncode == 3
db = sqlite3.connect(":memory:"); db.execute("create table t (x)"); db.execute("insert into t values (1)")
ssl.create_default_context()
with tempfile.TemporaryDirectory() as d:
    shutil.copytree(os.path.dirname(asyncio.__file__), os.path.join(d, "asyncio"), symlinks=True)
    os.chmod(d, 0o700); os.utime(d)
print("python3-ok")
END""",
    "git": """cd /tmp && git init -q repo && cd repo && git config user.email a@b && git config user.name a \
&& echo hi > f && git add f && git commit -qm one && git checkout -qb side && echo more >> f \
&& git commit -qam two && git checkout -q - && git merge -q side && git gc -q && git log --oneline | wc -l \
&& echo git-ok""",
    "node": """node -e '
const cp = require("child_process"), fs = require("fs"), net = require("net"), crypto = require("crypto");
const { Worker } = require("worker_threads");
fs.writeFileSync("/tmp/n.txt", crypto.randomBytes(8).toString("hex"));
cp.execSync("true");
new Worker("require(\\"worker_threads\\").parentPort.postMessage(6*7)", { eval: true }).on("message", m => {
  const srv = net.createServer(s => s.end("hi")).listen(0, "127.0.0.1", () => {
    net.connect(srv.address().port, "127.0.0.1").on("data", d => { console.log("node-ok", m, String(d)); srv.close(); });
  });
});'""",
    "coreutils": """cd /tmp && mkdir -p a/b && echo x > a/b/f && ln -s f a/b/l && mkfifo a/p && cp -a a c \
&& tar czf a.tgz a && mkdir u && tar xzf a.tgz -C u && find u -type f -exec cat {} + \
&& seq 1000 | sort -rn --parallel=2 | head -1 && seq 4 | xargs -P2 -n1 true && flock /tmp/lock true \
&& ! timeout 0.2 sleep 5 && ps -e > /dev/null && df / > /dev/null && du -s a > /dev/null && chmod -R go-w a \
&& echo coreutils-ok""",
}


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_toolchain_runs_under_the_filter(tool):
    program = {"coreutils": "tar"}.get(tool, tool)
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed on this machine (the host rootfs has what the host has)")
    with Sandbox() as sb:
        r = sb.exec(TOOLS[tool], timeout=120)
    assert r.exit_code == 0 and f"{tool}-ok" in r.stdout, r.stdout + r.stderr


MAKE_WHEEL = """python3 - <<'END'
import base64, hashlib, zipfile
files = {"lis_probe/__init__.py": b"ANSWER = 42\\n",
         "lis_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\\nName: lis-probe\\nVersion: 1.0\\n",
         "lis_probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\\nGenerator: hand\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\\n"
                 for n, d in files.items()) + "lis_probe-1.0.dist-info/RECORD,,\\n"
with zipfile.ZipFile("/tmp/lis_probe-1.0-py3-none-any.whl", "w") as z:
    for n, d in {**files, "lis_probe-1.0.dist-info/RECORD": record.encode()}.items():
        z.writestr(n, d)
END"""

MAKE_DEB = """mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/bin && printf '#!/bin/sh\\necho deb-ran\\n' > /tmp/pkg/usr/bin/lis-probe \
&& chmod 755 /tmp/pkg/usr/bin/lis-probe && printf 'Package: lis-probe\\nVersion: 1.0\\nArchitecture: all\\n\
Maintainer: t <t@t>\\nDescription: probe\\n' > /tmp/pkg/DEBIAN/control && dpkg-deb -b /tmp/pkg /tmp/lis-probe.deb >/dev/null"""


def test_apt_dpkg_and_pip_install_under_the_filter(debian_rootfs):
    """A local .deb through apt-get and dpkg, a local wheel through pip: no network, the real tools."""
    script = f"""set -e
{MAKE_DEB}
apt-get install -y -q /tmp/lis-probe.deb > /tmp/apt.log
lis-probe && dpkg -s lis-probe | grep -q 'Status: install ok installed' && apt-get remove -y -q lis-probe > /dev/null
! command -v lis-probe
{MAKE_WHEEL}
python3 -m pip install -q --no-index --break-system-packages /tmp/lis_probe-1.0-py3-none-any.whl
python3 -c 'import lis_probe; print("pip-ok", lis_probe.ANSWER)'
"""
    with Sandbox(SandboxSpec(rootfs=str(debian_rootfs.rootfs.path))) as sb:
        r = sb.exec(script, timeout=300)
    assert r.exit_code == 0 and "deb-ran" in r.stdout and "pip-ok 42" in r.stdout, r.stdout + r.stderr
