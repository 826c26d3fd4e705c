"""`lis-tui doctor --ray ADDRESS`: doctor on every node of a Ray cluster, one table."""
from __future__ import annotations

import sys
from typing import Any

from lis_tui.ray import ClusterError, connect, require_ray, say_to
from tools.terminal_text import safe_terminal_text


def node_report() -> dict[str, Any]:
    """Doctor's checks on the node this runs on (a Ray task pinned there)."""
    from isolation import doctor  # noqa: PLC0415
    from lis_tui.ray.worker import node_label  # noqa: PLC0415

    checks = doctor.run_checks()
    return {"node": node_label(), "works": doctor.sandboxes_work(checks),
            "checks": [(c.name, c.status, c.detail, c.fix) for c in checks]}


def cluster_doctor(address: str, out: Any = None) -> int:
    """Print one table over the cluster's nodes; 0 when sandboxes work on every node."""
    out = out or sys.stdout
    try:
        rows = _reports(address)
    except ClusterError as exc:
        print(safe_terminal_text(f"lis-tui doctor: {exc}"), file=sys.stderr)
        return 1
    width = max([len(r["node"]) for r in rows] + [4])
    print(f"{'node':<{width}}  sandboxes  problems", file=out)
    for row in rows:
        bad = [c for c in row["checks"] if c[1] != "ok"]
        problems = ", ".join(f"{name} ({status})" for name, status, *_ in bad) or "-"
        works = "work" if row["works"] else "DO NOT"
        print(safe_terminal_text(f"{row['node']:<{width}}  {works:<9}  {problems}"), file=out)
    for row in rows:
        for name, status, detail, fix in row["checks"]:
            if status == "fail" or (status == "warn" and not row["works"]):
                print(safe_terminal_text(f"\n{row['node']}: {name}: {detail}" +
                                         (f"\n  fix: {fix}" if fix else "")), file=out)
    broken = sum(not r["works"] for r in rows)
    print(f"\nsandboxes work on {len(rows) - broken} of {len(rows)} node(s)"
          + (": bench --ray skips the others." if broken else "."), file=out)
    return 1 if broken or not rows else 0


def _reports(address: str) -> list[dict[str, Any]]:
    ray = require_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

    owned = connect(address, say_to(sys.stderr), start_local=False)
    try:
        check = ray.remote(num_cpus=0, max_retries=0)(node_report)
        refs = {n["NodeID"]: check.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote() for n in ray.nodes() if n.get("Alive")}
        rows = []
        for node_id, ref in refs.items():
            try:
                rows.append(ray.get(ref, timeout=120))
            except (ray.exceptions.RayError, TimeoutError) as exc:
                rows.append({"node": f"node {node_id[:8]}", "works": False,
                             "checks": [("ray", "fail", f"the check could not run there: {exc}",
                                         "pip install 'lis-tui[ray]' on that node, same version")]})
        return sorted(rows, key=lambda r: r["node"])
    finally:
        if owned:
            ray.shutdown()
