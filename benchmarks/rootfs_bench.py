"""Directory rootfs under an overlay vs the host rootfs, and many sandboxes on one rootfs (issue 3).

    .venv/bin/python benchmarks/rootfs_bench.py --rootfs NAME_OR_DIR [--runs 100] [--many 200]

Without --rootfs it uses the Debian rootfs the tests build (~/.cache/lis-tui-test/rootfs-uidN/store).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from isolation import Sandbox, SandboxSpec, records  # noqa: E402
from isolation.rootfs import RootfsStore  # noqa: E402
from isolation.rootfs.safe import tree_size  # noqa: E402


def p50(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def start_exec_close(spec: SandboxSpec, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        with Sandbox(spec) as sb:
            sb.exec("true")
        times.append(time.perf_counter() - start)
    return times


def many_writing(spec: SandboxSpec, count: int) -> tuple[int, int, float]:
    sandboxes = []
    start = time.perf_counter()
    try:
        for i in range(count):
            sandboxes.append(Sandbox(spec).start())
        for i, sb in enumerate(sandboxes):
            sb.exec(f"head -c 1048576 /dev/urandom > /root/blob && echo {i} > /etc/lis-who")
        isolated = sum(sb.exec("cat /etc/lis-who").stdout.strip() == str(i) for i, sb in enumerate(sandboxes))
    finally:
        for sb in sandboxes:
            sb.close()
    left = len(list(records.scratch_root().glob("*")))
    return isolated, left, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rootfs", help="a rootfs name in the store or a directory")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--many", type=int, default=200)
    args = parser.parse_args()
    if args.rootfs:
        root = RootfsStore().resolve(args.rootfs).path if not os.path.isabs(args.rootfs) else Path(args.rootfs)
    else:
        store = Path.home() / ".cache" / "lis-tui-test" / f"rootfs-uid{os.getuid()}" / "store"
        root = RootfsStore(store).resolve("debian-bookworm-minimal").path
    spec = SandboxSpec(rootfs=str(root))
    Sandbox(spec).start().close()  # warm the page cache
    host, ours = [], []
    for _ in range(args.runs):  # interleaved, so both see the same load
        host += start_exec_close(SandboxSpec(), 1)
        ours += start_exec_close(spec, 1)
    with Sandbox(spec) as sb:
        fresh_upper = tree_size(sb.writable / "upper")
    isolated, left, took = many_writing(spec, args.many)
    ratio = p50(ours) / p50(host)
    print(f"\nrootfs {root} ({tree_size(root.parent) / 1e6:.0f} MB in the store), {args.runs} runs\n")
    print("| measure | value | target |\n|---|---|---|")
    print(f"| start + exec('true') + close, host rootfs, p50 | {p50(host) * 1000:.1f} ms | |")
    print(f"| start + exec('true') + close, overlay dir rootfs, p50 | {p50(ours) * 1000:.1f} ms | |")
    print(f"| ratio overlay / host | {ratio:.2f} | <= 1.3 |")
    print(f"| a fresh sandbox's upper dir | {fresh_upper} bytes | 0 |")
    print(f"| store size of the rootfs | {tree_size(root.parent) / 1e6:.0f} MB | minimal <= 300 MB |")
    print(f"| {args.many} sandboxes at once each writing 1 MB: isolated | {isolated}/{args.many} "
          f"({took:.1f} s) | all |")
    print(f"| scratch entries left after closing them | {left} | 0 |")


if __name__ == "__main__":
    main()
