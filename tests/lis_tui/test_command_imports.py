"""A command loads no module for a feature it does not use (issue 54): `lis-tui exec` is called
once per command by scripts, hooks and Makefiles, and each call pays for every import.

Each command runs as a person runs it, `python -m lis_tui.cli ...` in a fresh process, under
`-X importtime`, whose log names every module the process loaded and which one loaded it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

NOT_IN_PLAY = {
    "the rootfs store's makers (the host rootfs needs none)": (
        "isolation.rootfs.build", "isolation.rootfs.pull", "isolation.rootfs.tar", "isolation.rootfs.prepare",
        "isolation.rootfs.keys", "isolation.rootfs.facts", "tarfile"),
    "the network (the network is off)": ("isolation.net", "ssl"),
    "review and changes (there is no workspace)": ("isolation.changes",),
    "an HTTP client": ("http", "urllib.request", "email"),
    "asyncio": ("asyncio",),
    "the agent, the model, the app, batch runs": (
        "lis_tui.agent", "lis_tui.model", "lis_tui.app", "lis_tui.bench", "lis_tui.rl", "lis_tui.ray",
        "lis_tui.servers", "openai", "textual"),
}
"""Groups of modules, by the feature they serve, that none of the commands below has in play."""


def loaded(argv: list[str], tmp_path: Path) -> dict[str, str]:
    """Every module `lis-tui ARGV` loads, each with the chain of modules that imported it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "lis_tui.cli", *argv], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:") and "cumulative" not in line]
    assert done.returncode == 0, done.stderr[-2000:]
    # importtime prints a module after the modules it imported, indented two more spaces each level
    rows = [(len(name) - len(name.lstrip()), name.strip()) for name in (line.split("|")[2] for line in lines)]
    chains = {}
    for index, (depth, name) in enumerate(rows):
        chain, level = [name], depth
        for later_depth, later in rows[index + 1:]:
            if later_depth < level:
                chain.append(later)
                level = later_depth
        chains.setdefault(name, " <- ".join(chain))
    return chains


def not_in_play(chains: dict[str, str], allowed: tuple[str, ...] = ()) -> dict[str, list[str]]:
    found = {}
    for group, prefixes in NOT_IN_PLAY.items():
        hits = [chain for name, chain in chains.items() if any(name == p or name.startswith(p + ".") for p in prefixes)
                and not any(name == a or name.startswith(a + ".") for a in allowed)]
        if hits:
            found[group] = hits
    return found


@pytest.mark.parametrize("argv, own, allowed", [
    pytest.param(["exec", "--rootfs", "host", "--network", "off", "--", "true"], "lis_tui.commands.sandbox", (),
                 marks=pytest.mark.sandbox, id="exec"),
    pytest.param(["doctor"], "lis_tui.commands.sandbox", ("isolation.rootfs.keys",),  # it checks Ubuntu's keys
                 marks=pytest.mark.sandbox, id="doctor"),
    pytest.param(["--version"], "", (), id="version"),
    pytest.param(["runs"], "lis_tui.commands.runs", (), id="runs"),
])
def test_a_command_loads_no_module_of_a_feature_not_in_play(argv, own, allowed, tmp_path):
    chains = loaded(argv, tmp_path)
    found = not_in_play(chains, allowed)
    assert not found, "\n".join(f"{group}: {chain}" for group, chains in found.items() for chain in chains)
    # nor another command's module: the parser is built for the command given (cli.COMMANDS)
    assert [chain for name, chain in chains.items() if name.startswith("lis_tui.commands.") and name != own] == []


def test_the_commands_table_names_what_each_module_registers():
    import argparse
    import importlib

    from lis_tui.cli import COMMANDS

    for module, words in COMMANDS.items():
        sub = argparse.ArgumentParser().add_subparsers()
        commands = importlib.import_module(f"lis_tui.commands.{module}")
        (getattr(commands, "add_parsers", None) or commands.add_parser)(sub)
        assert tuple(sub.choices) == words, module
