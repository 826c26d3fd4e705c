"""The import direction (isolation <- tools <- lis_tui; textual only in the TUI) and what the wheel ships."""
from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"isolation": {"tools", "lis_tui", "textual", "openai"}, "tools": {"lis_tui", "textual", "openai"}}
TUI = ("lis_tui/app/",)


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_never_import_upper_ones(package):
    bad = {str(p.relative_to(ROOT)): imported_roots(p) & FORBIDDEN[package]
           for p in (ROOT / package).rglob("*.py")}
    assert not {k: v for k, v in bad.items() if v}


def test_textual_is_imported_only_by_the_tui_modules():
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "lis_tui").rglob("*.py")
                 if "textual" in imported_roots(p) and not str(p.relative_to(ROOT)).startswith(TUI)]
    assert offenders == []


def test_the_agent_core_loads_without_textual():
    code = ("import sys, importlib, pkgutil, lis_tui, lis_tui.cli\n"
            "for m in ('agent.loop', 'model.client', 'config.settings', 'agent.trajectory', 'commands.run', 'commands.sandbox'):\n"
            "    try: importlib.import_module('lis_tui.' + m)\n"
            "    except ModuleNotFoundError as e:\n"
            "        if not e.name.startswith('lis_tui'): raise\n"
            "lis_tui.cli.build_parser()\n"
            "assert 'textual' not in sys.modules, [m for m in sys.modules if m.startswith('textual')]\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_wheel_ships_exactly_the_three_packages(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("lis_tui-*.whl"))
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"isolation", "tools", "lis_tui"}
