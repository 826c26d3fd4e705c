"""What the syscall filter costs a call: ns per syscall with no filter, this checkout's, and
(--against) another version of isolation/spawn/seccomp.py, e.g. the deny list before it:

    git show 43a7731:isolation/spawn/seccomp.py > /tmp/old_seccomp.py
    .venv/bin/python benchmarks/seccomp_filter.py --against /tmp/old_seccomp.py [--calls 2000000] [--rounds 7]

A small C program (gcc needed) loads the filter with prctl, as the zygote does, and times a loop of
one call: getppid (allowed, no argument read: the kernel may cache "always allowed" for it and skip
the filter), ioctl(-1, TIOCGWINSZ) (allowed after an argument check: the filter runs every time),
personality(0xffffffff) (argument-checked in the allow list only) and number 1000 (no such call).
Variants alternate round by round; the table shows each one's median. Wall-clock numbers on a
busy machine are noisy, so a second table counts what does not vary: the BPF instructions each
program runs for each call (an emulator of the few opcodes the filters use).
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from isolation.spawn import seccomp  # noqa: E402

BENCH = r"""
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    static unsigned char code[65536];
    long calls = atol(argv[2]), nr = atol(argv[3]), a0 = strtol(argv[4], NULL, 0), a1 = strtol(argv[5], NULL, 0);
    if (strcmp(argv[1], "-")) {
        FILE *f = fopen(argv[1], "rb");
        size_t n = fread(code, 1, sizeof code, f);
        struct sock_fprog prog = {n / 8, (struct sock_filter *) code};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0)) {
            perror("seccomp");
            return 1;
        }
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < calls; i++) syscall(nr, a0, a1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.1f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / calls);
    return 0;
}
"""


def steps(code: bytes, nr: int, arch: int, args: tuple[int, ...] = (0,) * 6) -> int:
    """How many instructions `code` runs for this call (LD W ABS, JEQ/JGE/JSET K, RET K only)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    insns = [struct.unpack_from("=HBBI", code, at) for at in range(0, len(code), 8)]
    pc, acc, count = 0, 0, 0
    while True:
        op, jt, jf, k = insns[pc]
        count += 1
        if op == 0x06:
            return count
        if op == 0x20:
            acc, pc = struct.unpack_from("<I", data, k)[0], pc + 1
            continue
        taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
        pc += 1 + (jt if taken else jf)


def load(path: str):
    spec = importlib.util.spec_from_file_location("other_seccomp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="another seccomp.py to compare with (e.g. the deny list)")
    parser.add_argument("--calls", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    gcc = shutil.which("gcc")
    if gcc is None:
        sys.exit("needs gcc: apt-get install gcc")
    nr = seccomp.numbers(__import__("platform").machine())
    calls = {"getppid": (nr["getppid"], 0, 0), "ioctl TIOCGWINSZ": (nr["ioctl"], -1, 0x5413),
             "personality query": (nr["personality"], 0xFFFFFFFF, 0), "no such call (1000)": (1000, 0, 0)}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "bench.c")
        src.write_text(BENCH)
        subprocess.run([gcc, "-O2", "-o", str(src.with_suffix("")), str(src)], check=True)
        variants = {"no filter": "-"}
        programs = {"allow list (this checkout)": seccomp.program()}
        if args.against:
            programs[f"--against ({Path(args.against).name})"] = load(args.against).program()
        for name, code in programs.items():
            path = Path(tmp, f"{len(variants)}.bpf")
            path.write_bytes(code)
            variants[f"{name}, {len(code) // 8} insns"] = str(path)
        times = {(v, c): [] for v in variants for c in calls}
        for _ in range(args.rounds):
            for call, (number, a0, a1) in calls.items():
                for variant, path in variants.items():
                    out = subprocess.run([str(src.with_suffix("")), path, str(args.calls), str(number), str(a0), str(a1)],
                                         capture_output=True, text=True, check=True).stdout
                    times[variant, call].append(float(out))
    machine = __import__("platform").machine()
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[machine]
    allowed = [n for n, a in seccomp.actions(machine).items() if a == "allow"]
    print(f"BPF instructions run per call ({machine}; mean and most over the {len(allowed)} calls the allow list "
          "allows without an argument rule)")
    for name, code in programs.items():
        counts = [steps(code, n, arch) for n in allowed]
        probes = {c: steps(code, number, arch, (a0 & 0xFFFFFFFFFFFFFFFF, a1, 0, 0, 0, 0))
                  for c, (number, a0, a1) in calls.items()}
        print(f"  {name}: mean {statistics.mean(counts):.1f}, most {max(counts)}; "
              + ", ".join(f"{c} {n}" for c, n in probes.items()))
    width = max(map(len, variants)) + 2
    print("ns per call (median of", args.rounds, "rounds of", args.calls, "calls)")
    print("".ljust(width) + "".join(c.rjust(22) for c in calls))
    for variant in variants:
        print(variant.ljust(width) + "".join(f"{statistics.median(times[variant, c]):22.1f}" for c in calls))


if __name__ == "__main__":
    main()
