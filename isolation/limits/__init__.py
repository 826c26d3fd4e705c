"""What a sandbox may use of the host, each bounded by the kernel where it can be.

budget (one memory budget for every writable tmpfs of the user's sandboxes, across processes)
with ledger (its locked file per user) and tmpfs (one sandbox's tmpfs, measured and resized);
diskcap (the disk cap: a sized tmpfs under the layers, or a walk of them); memcap (the memory
of a whole sandbox summed where no cgroup holds it); cgroup (cgroup v2 where the machine
delegates a subtree); counters (each sandbox's share of the per-user kernel counters); capacity
(how many sandboxes fit, and a clear refusal before a limit is hit).

May import: isolation.spec, isolation.spawn, and each other. Not the sandbox: it holds them.
"""
