"""The first day's command-line rough edges (issue 36): the app takes `run`'s model flags, no
traceback on any port, and the smaller things a person met. `lis-tui` runs in this process (the
`cli` fixture) or as a subprocess, as a person would run it."""

import argparse

import pytest

from test_cli_errors import cli, one_line  # noqa: F401 (a fixture)


def _flags(parser: argparse.ArgumentParser, group: str) -> set[str]:
    (found,) = [g for g in parser._action_groups if g.title == group]  # noqa: SLF001
    return {o for a in found._group_actions for o in a.option_strings}  # noqa: SLF001


# -- item 4: the app takes run's model flags --------------------------------------------------------

def test_the_app_takes_every_model_flag_of_run():
    from lis_tui.cli import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    run_flags, app_flags = _flags(subs.choices["run"], "model and agent"), _flags(subs.choices["tui"], "model and agent")
    assert {"--tool-format", "--max-tokens", "--temperature"} <= run_flags
    assert run_flags <= app_flags


def test_lis_tui_with_runs_model_flags_is_not_refused(cli):
    """Without a terminal the app refuses, after its flags were read: none is unknown."""
    done = cli("--tool-format", "bash", "--max-tokens", "64", "--temperature", "0.2",
               "--max-context-tokens", "9000", "--observation", "paper", "-t", "hi")
    assert done.returncode == 2 and "needs a terminal" in one_line(done)
