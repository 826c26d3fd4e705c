"""The prompts: the built-in ones in `default.toml`; a TOML file of the same shape replaces any.

May import: isolation (the rootfs facts a prompt states), lis_tui.config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from pathlib import Path

from lis_tui.config.settings import ConfigError, parse_toml

DEFAULT_FILE = Path(__file__).with_name("default.toml")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Prompts:
    """The four prompt templates of a run."""

    system: str
    """System prompt of a sandbox run."""
    instance: str
    """First user message of a sandbox run: the task, where the answer goes, the directories."""
    llm_system: str
    """System prompt of a vanilla (`llm` mode) run; empty sends none."""
    llm_instance: str
    """The user message of a vanilla run."""
    workspace_system: str = ""
    """System prompt of a run over a workspace (the person's project, at its own path and /testbed;
    the model's own folders are under /agent); empty: `system`."""
    workspace_instance: str = ""
    """First user message of a run over a workspace; empty: `instance`."""
    instructions: str = ""
    """Standing instructions (AGENTS.md: lis_tui.agent.instructions) added to the system prompt as they
    are, never filled in as a template; no prompts file sets them."""

    def for_workspace(self) -> Prompts:
        """These prompts for a run over a workspace: its two templates in place of the plain ones."""
        return replace(self, system=self.workspace_system or self.system,
                       instance=self.workspace_instance or self.instance)


def load_prompts(path: Path | str | None = None) -> Prompts:
    """The built-in prompts, with the keys that `path` (a TOML file) sets replaced; or, for
    "llm-in-sandbox:SUITE", that suite's prompts from the installed package (`package.py`)."""
    from lis_tui.prompts.package import is_package_ref, package_prompts  # noqa: PLC0415

    if is_package_ref(path):
        return Prompts(**package_prompts(str(path)))
    prompts = Prompts(**_read(DEFAULT_FILE))
    if path:
        mine = _read(Path(path).expanduser())
        # A file that replaces `system` or `instance` replaces it over a workspace too, unless it
        # sets that one apart: its author's words are never silently passed over.
        for key in ("system", "instance"):
            if key in mine:
                mine.setdefault(f"workspace_{key}", "")
        prompts = replace(prompts, **mine)
    return prompts


def _read(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the prompts file ({exc.strerror}); check agent.prompts "
                          "or --prompts", path=path) from None
    data = parse_toml(text, path)
    known = [f.name for f in fields(Prompts) if f.name != "instructions"]
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f'unknown prompt "{key}"; the keys are {", ".join(known)}',
                              path=path, key=key)
        if not isinstance(value, str):
            raise ConfigError(f'prompt "{key}" must be a string (use \'\'\'...\'\'\' for several '
                              "lines)", path=path, key=key)
    return {key: value.strip("\n") for key, value in data.items()}


def render(template: str, values: dict[str, str]) -> str:
    """Fill `{name}` placeholders that `values` knows; other braces (`\\boxed{}`) stay as they are."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)
