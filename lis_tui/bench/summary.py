"""Numbers over results.jsonl: accuracy per domain and mode, tokens, steps, capability, errors."""
from __future__ import annotations

from collections import Counter, defaultdict
from statistics import mean
from typing import Any

from lis_tui.bench.capability import KINDS

TOKEN_KINDS = ("prompt", "completion", "environment")


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """A summary dict (JSON-ready) of the records of one bench run."""
    by_mode: dict[str, list[dict]] = defaultdict(list)
    for record in records:
        by_mode[record["mode"]].append(record)
    modes = [m for m in ("sandbox", "llm") if m in by_mode] + sorted(
        set(by_mode) - {"sandbox", "llm"})
    domains = sorted({r.get("domain", "general") for r in records})
    summary = {"episodes": len(records), "modes": modes, "domains": domains,
               "per_mode": {m: _mode(by_mode[m], domains) for m in modes},
               "notes": sorted({n for r in records for n in r.get("notes") or ()})}
    if "sandbox" in by_mode and "llm" in by_mode:
        summary["comparison"] = _compare(summary["per_mode"]["sandbox"], summary["per_mode"]["llm"])
    return summary


def _mode(records: list[dict], domains: list[str]) -> dict[str, Any]:
    steps_total = sum(r.get("steps", 0) for r in records)
    return {
        "episodes": len(records),
        "accuracy": _accuracy(records),
        "mean_reward": mean(r.get("reward", 0.0) for r in records),
        "domains": {d: {"episodes": len(sub), "accuracy": _accuracy(sub)}
                    for d in domains if (sub := [r for r in records if r.get("domain") == d])},
        "mean_steps": mean(r.get("steps", 0) for r in records),
        "tokens": {k: mean(r.get("tokens", {}).get(k, 0) for r in records) for k in TOKEN_KINDS},
        "capability": {k: (sum(r.get("capability", {}).get(k, 0) for r in records) / steps_total
                           if steps_total else 0.0) for k in KINDS},
        "capability_episodes": {k: sum(1 for r in records if r.get("capability", {}).get(k))
                                / len(records) for k in KINDS},
        "wall_time": mean(r.get("wall_time", 0.0) for r in records),
        "errors": dict(Counter(_error_kind(r) for r in records if _error_kind(r))),
    }


def _accuracy(records: list[dict]) -> float:
    return sum(bool(r.get("correct")) for r in records) / len(records) if records else 0.0


def _error_kind(record: dict) -> str:
    if record.get("crashed"):
        return "crash"
    if record.get("reward_error"):
        return "reward"
    reason = record.get("finish_reason", "")
    return "" if reason == "submitted" else reason


def model_tokens(mode: dict[str, Any]) -> float:
    """Tokens the model read and wrote per episode."""
    return mode["tokens"]["prompt"] + mode["tokens"]["completion"]


def _compare(sandbox: dict, llm: dict) -> dict[str, Any]:
    llm_tokens = model_tokens(llm)
    return {
        "accuracy_delta": sandbox["accuracy"] - llm["accuracy"],
        "domain_delta": {d: sandbox["domains"][d]["accuracy"] - llm["domains"][d]["accuracy"]
                         for d in sandbox["domains"] if d in llm["domains"]},
        "token_ratio": model_tokens(sandbox) / llm_tokens if llm_tokens else None,
    }
