"""`[workspace]`: how a host folder laid over /testbed may be changed, inside and on the host; and
where a run shows it (observed_spec)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from lis_tui.config.toml_text import ConfigError, user_config_path


@dataclass
class WorkspaceConfig:
    """What the sandbox may do to a workspace's git repository, and what apply holds back."""

    git_writable: bool = False
    """Let commands write the workspace's .git (tasks that commit); off, it is read-only inside."""
    held_back: list[str] = field(default_factory=list)
    """More paths applied only when named (`*.sh`): added to the behavioural rules, never replacing them."""


def workspace_options(config: Any) -> dict:
    """SandboxSpec keywords for [workspace]. `held_back` decides what a sandbox may write to the host
    unasked, so a folder's own lis-tui.toml (which the sandbox may have written) never sets it."""
    section = config.workspace
    source = config.sources.get("workspace.held_back", "default")
    if source not in ("default", str(user_config_path())):
        raise ConfigError(f"workspace.held_back is read from your user config only ({user_config_path()}), "
                          f"not from {source}: remove it there (or move it to the user config)",
                          key="workspace.held_back")
    return {"git_writable": section.git_writable, "held_back": tuple(section.held_back)}


def observed_spec(spec: Any, config: Any) -> Any:
    """`spec` as `config`'s observation format wants it: the paper's prompts name /testbed alone,
    so in paper mode a workspace is shown at /testbed only, not at its own path too."""
    if spec is None or spec.workspace is None or not spec.own_path or config.agent.observation != "paper":
        return spec
    return replace(spec, own_path=False)
