"""The --ray flags of `bench` and `rollout` (argparse only: `--help` imports no Ray)."""
from __future__ import annotations

import argparse
from pathlib import Path

from lis_tui.ray import RayOptions


def _address(value: str) -> str:
    """`auto`, HOST:PORT or ray://...: anything else is a word meant for TASKS, caught here."""
    if value == "auto" or ":" in value:
        return value
    raise argparse.ArgumentTypeError(f"{value!r} is not a Ray address (auto, HOST:PORT or ray://HOST:PORT); "
                                     "give TASKS before --ray, or write --ray auto")


def add_ray_flags(parser: argparse.ArgumentParser) -> None:
    """--ray, --ray-cpus, --ray-worker-cpus, --max-retries, --rootfs-dir."""
    group = parser.add_argument_group("cluster (Ray: ./install.sh --ray in the lis-tui checkout)")
    group.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS", type=_address,
                       help="run the episodes on a Ray cluster, in workers on every node: `auto` (the "
                            "default value) joins RAY_ADDRESS or a cluster you started (`ray "
                            "start`) on this machine, never another user's, else starts Ray "
                            "here; or HOST:PORT")
    group.add_argument("--ray-cpus", type=float, metavar="CPUS",
                       help="Ray CPUs one episode takes (default 0.25: four per core)")
    group.add_argument("--ray-worker-cpus", type=float, metavar="CPUS",
                       help="a node gets one worker process per this many of its CPUs (default 4: "
                            "one process's Python keeps 3-4 cores busy before its GIL is "
                            "full, so a 32-CPU node gets 8)")
    group.add_argument("--max-retries", type=int, metavar="N",
                       help="runs again of an episode whose node died under it, before it is "
                            "recorded as crashed (default 2)")
    group.add_argument("--rootfs-dir", metavar="DIR",
                       help="a folder every node sees (NFS): the rootfs tarball goes there instead "
                            "of through Ray's object store")


def add_workers_flag(parser: argparse.ArgumentParser) -> None:
    """--workers: how many local processes run the episodes."""
    parser.add_argument("--workers", type=int, metavar="N",
                        help="processes of this machine that run the episodes (default: the config's "
                             "sandbox.workers, 0: one per 2 cores, at most --concurrency; 1: all in "
                             "this process, as before). Not with --ray, whose nodes have their own")


def ray_from_args(args: argparse.Namespace) -> RayOptions | None:
    """The RayOptions the flags ask for; None without --ray (the other flags then are an error)."""
    extra = [flag for flag, value in (("--ray-cpus", args.ray_cpus), ("--ray-worker-cpus", args.ray_worker_cpus),
                                      ("--max-retries", args.max_retries), ("--rootfs-dir", args.rootfs_dir))
             if value is not None]
    if args.ray is not None and getattr(args, "workers", None) is not None:
        raise ValueError("--workers goes without --ray (a cluster's nodes get --ray-worker-cpus)")
    if args.ray is None:
        if extra:
            raise ValueError(f"{', '.join(extra)} go with --ray (run on a Ray cluster)")
        return None
    options = RayOptions(address=args.ray, concurrency=args.concurrency)
    if args.ray_cpus is not None:
        options.cpus = args.ray_cpus
    if args.ray_worker_cpus is not None:
        options.worker_cpus = args.ray_worker_cpus
    if args.max_retries is not None:
        options.max_retries = args.max_retries
    if args.rootfs_dir:
        options.rootfs_dir = Path(args.rootfs_dir).expanduser().resolve()
    options.__post_init__()  # check what the flags set
    return options
