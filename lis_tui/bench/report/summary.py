"""Numbers over results.jsonl: accuracy per domain and mode, tokens, steps, capability, errors."""
from __future__ import annotations

from collections import Counter, defaultdict
from statistics import mean
from typing import Any

from lis_tui.bench.report.capability import KINDS

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
    summary["group_by"], summary["groups"] = _groups(records)
    return summary


def group_of(record: dict[str, Any]) -> str:
    """What the per-suite table groups a record by: its paper suite, else its domain."""
    return record.get("suite") or record.get("domain") or "general"


def _groups(records: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Per suite (or per domain when no record has a suite): each mode's accuracy, tokens and
    capability use, and sandbox against llm, as the paper's tables set them side by side."""
    by = "suite" if any(r.get("suite") for r in records) else "domain"
    grouped: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        grouped[group_of(record)][record["mode"]].append(record)
    groups = {}
    for name in sorted(grouped):
        modes = {m: _group_mode(rs) for m, rs in grouped[name].items()}
        row: dict[str, Any] = {"modes": modes}
        if "sandbox" in modes and "llm" in modes:
            box, llm = modes["sandbox"], modes["llm"]
            row["accuracy_delta"] = box["accuracy"] - llm["accuracy"]
            row["token_ratio"] = _ratio(box["total_tokens"], llm["total_tokens"])
            row["trajectory_ratio"] = _ratio(box["trajectory_tokens"], llm["trajectory_tokens"])
        groups[name] = row
    return by, groups


def _group_mode(records: list[dict]) -> dict[str, Any]:
    steps = sum(r.get("steps", 0) for r in records)
    return {
        "episodes": len(records),
        "accuracy": _accuracy(records),
        "mean_reward": mean(r.get("reward", 0.0) for r in records),
        "mean_steps": mean(r.get("steps", 0) for r in records),
        "total_tokens": mean(_total(r) for r in records),
        "trajectory_tokens": mean(_trajectory(r) for r in records),
        "capability": {k: (sum(r.get("capability", {}).get(k, 0) for r in records) / steps
                           if steps else 0.0) for k in KINDS},
    }


def _total(record: dict) -> int:
    tokens = record.get("tokens", {})
    return tokens.get("prompt", 0) + tokens.get("completion", 0)


def _trajectory(record: dict) -> int:
    """The whole conversation once: the last call's prompt and its reply (the model's own
    earlier replies and every observation are inside that prompt). Older records lack it."""
    return record.get("tokens", {}).get("trajectory", _total(record))


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


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
        "error_reasons": _error_reasons(records),
    }


def _accuracy(records: list[dict]) -> float:
    return sum(bool(r.get("correct")) for r in records) / len(records) if records else 0.0


def _error_kind(record: dict) -> str:
    if record.get("crashed"):
        return "crash"
    if record.get("reward_error"):
        return "reward"
    reason = record.get("finish_reason", "")
    if reason == "submitted" and not str(record.get("answer") or "").strip():
        return "no answer"
    return "" if reason == "submitted" else reason


def _error_reasons(records: list[dict]) -> dict[str, str]:
    """Per error kind, its most common reason (the server's 400, the limit hit, ...), so a
    report says why and not only `error`."""
    reasons: dict[str, Counter] = defaultdict(Counter)
    for record in records:
        kind = _error_kind(record)
        if kind:
            why = record.get("reward_error") if kind == "reward" else record.get("message")
            reasons[kind][str(why or ("the answer was empty" if kind == "no answer" else ""))] += 1
    return {kind: counts.most_common(1)[0][0] for kind, counts in reasons.items()}


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
