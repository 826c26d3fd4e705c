"""`./install.sh` on a fresh copy of the checkout: quiet (no warnings, pip's noise hidden) and ending
with what to try next; and pip's output shown when it fails. Needs PyPI or a warm pip cache."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def fresh_copy(tmp_path: Path) -> Path:
    """The checkout's tracked files as they are now (uncommitted edits included), nothing else."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True)
    copy = tmp_path / "lis-tui"
    for name in filter(None, files.stdout.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    return copy


def install(copy: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return subprocess.run(["./install.sh"], cwd=copy, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("git is needed to list the checkout's files")
    copy = fresh_copy(tmp_path_factory.mktemp("install"))
    done = install(copy)
    done.copy = copy  # where it was installed, for the tests that use the result
    if done.returncode != 0 and "Could not find a version" in done.stderr:
        pytest.skip("PyPI is unreachable and the pip cache is cold")
    return done


def test_install_is_quiet_and_ends_with_what_to_try(installed):
    output = installed.stdout + installed.stderr
    assert installed.returncode == 0, output
    noisy = [line for line in output.splitlines()
             if any(word in line.lower() for word in ("warning", "deprecat", "!!", "notice"))]
    assert noisy == []
    last = installed.stdout.rstrip("\n").splitlines()[-1]
    assert "source .venv/bin/activate" in last and " lis-tui exec -- uname -a" in last


def test_the_last_line_s_advice_puts_lis_tui_on_path(installed):
    """`lis-tui` was not on PATH after ./install.sh, and the README mixed `.venv/bin/lis-tui` with
    `lis-tui`: both now say to activate the venv, and then `lis-tui` is found."""
    copy = installed.copy
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    done = subprocess.run(["bash", "-c", "source .venv/bin/activate && command -v lis-tui && lis-tui --version"],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(copy / ".venv" / "bin" / "lis-tui"))
    readme = (REPO / "README.md").read_text()
    assert "source .venv/bin/activate" in readme
    assert not re.search(r"^\.venv/bin/lis-tui", readme, re.M)  # every example: `lis-tui ...`


def test_a_failing_pip_shows_its_output(tmp_path):
    copy = fresh_copy(tmp_path)
    (copy / "pyproject.toml").write_text("[project\nname = broken\n")
    done = install(copy)
    assert done.returncode == 1
    assert "'pip install -e .' failed (its output is above)" in done.stderr
    assert "Traceback" in done.stderr and "line 1, column" in done.stderr  # pip's own complaint, shown
