"""Reinforcement learning on sandbox episodes: task sets whose context is files, group rollouts,
and environments (`SandboxEnv`, served by `lis-tui env serve`) for trainers that generate themselves.

May import: isolation, tools, lis_tui.agent, .model, .config, lis_tui.bench (its episodes and
worker processes).
"""
from __future__ import annotations

from typing import Any

__all__ = ["rollout", "build_tasks", "read_items", "SandboxEnv"]


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
    if name == "SandboxEnv":
        from lis_tui.rl.env import SandboxEnv  # noqa: PLC0415

        return SandboxEnv
    raise AttributeError(name)
