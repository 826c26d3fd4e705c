"""Reinforcement learning on sandbox episodes: task sets whose context is files, and group rollouts."""
from __future__ import annotations

from typing import Any

__all__ = ["rollout", "build_tasks", "read_items"]


def __getattr__(name: str) -> Any:  # lazy: `lis-tui --help` and the task builder need no agent
    if name == "rollout":
        from lis_tui.rl.runner import rollout  # noqa: PLC0415

        return rollout
    if name == "build_tasks":
        from lis_tui.rl.build import build_tasks  # noqa: PLC0415

        return build_tasks
    if name == "read_items":
        from lis_tui.rl.items import read_items  # noqa: PLC0415

        return read_items
    raise AttributeError(name)
