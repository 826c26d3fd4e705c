"""The host repositories of a workspace, read with the host's own git: the one the workspace is
in, and each of its folders holding a `.git` (a nested clone, a submodule, a gitdir file): what
git would run there (the hooks folder, core.fsmonitor, included config files) and which paths
each ignores. One query per repository, never per path.

These are the person's own repositories and config, so their git is asked, in the workspace folder
or the nested repository's own (host folders the sandbox did not make); never inside a folder the
sandbox made, whose config would be the sandbox's. `rev-parse`, `config` and `check-ignore` read
the config and run nothing it names. Paths go through stdin, never argv; the environment is a small, fixed one, with
no lock taken (GIT_OPTIONAL_LOCKS=0), no pathspec magic and no fsmonitor of the repository's run
for the asking. Without git, or outside a repository, every answer is empty.
"""
from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

TIMEOUT = 60  # seconds; a git that hangs (a network file system) decides nothing rather than block
PASSED = ("PATH", "HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM")
"""What of our environment git sees: enough to read the person's effective config, no GIT_DIR."""
CONFIG_KEYS = r"^(include|includeif\..*)\.path$|^core\.(fsmonitor|hookspath)$"
NOT_A_COMMAND = {"", "true", "false", "yes", "no", "on", "off", "1", "0"}  # core.fsmonitor as a bool


@dataclass(frozen=True)
class HostRepo:
    """The repository a workspace is in, as its git sees it."""

    top: str
    """The repository's top folder (real path)."""
    prefix: str
    """Where the workspace is in it: '' at the top, else 'sub/dir/'."""
    runs: dict[str, str] = field(default_factory=dict)
    """Workspace-relative path ('' for the whole workspace) -> why git would run or read it."""


def host_repo(project: Path, folder: str = "") -> HostRepo | None:
    """The repository git finds at `project` (`folder` '': the one the workspace is in, at its top
    or above it) or at its subfolder `folder` (one holding a `.git`: None where git passes it by,
    going on up), and what of the workspace its git would run; None if none."""
    where = Path(project, folder)
    found = _git(where, "rev-parse", "--path-format=absolute", "--show-toplevel", "--show-prefix",
                 "--git-path", "hooks")
    lines = found.split("\n") if found is not None else []
    if len(lines) != 4 or not lines[0]:  # not a work tree (or a name with a newline: decide nothing)
        return None
    top, prefix, hooks = lines[:3]
    here, top_real = os.path.realpath(where), os.path.realpath(top)
    if folder and here != top_real and _inside(top_real, here) is not None:
        return None  # git went on up past a .git it does not take for a repository: the one around decides
    real = os.path.realpath(project)
    whose = f"the repository {folder}/'s" if folder else "the repository's"
    runs: dict[str, str] = {}

    def note(path: str, why: str) -> None:
        rel = _inside(real, path)
        if rel is not None:
            runs.setdefault(rel, why)

    note(hooks, f"in {whose} hooks folder ({_shown(real, hooks)}): git runs what is there "
                "at commit, checkout, merge, push, whatever its mode")
    for origin, key, value in _config(where):
        if key == "core.fsmonitor" and value.strip().lower() not in NOT_A_COMMAND:
            words = _words(value)
            if words:
                note(_resolve(words[0], top), f"named by {whose} core.fsmonitor: git runs it at every status")
        elif key.endswith(".path") and key != "core.hookspath":
            base = os.path.dirname(_resolve(origin, top)) if origin else top
            note(_resolve(value, base), f"a config file git includes ({key} in {_shown(real, origin or top)})")
    return HostRepo(top, prefix, runs)


def ignored(project: Path, paths: list[str], folder: str = "") -> dict[str, str]:
    """{path: the ignore rule} of `paths` (relative to `project`/`folder`) that the repository there
    ignores. One git for all of them; a path git cannot take (beyond a link, in a submodule) is skipped."""
    found: dict[str, str] = {}
    rest = list(paths)
    for _ in range(16):  # each failure skips the path git choked on; a bound keeps it cheap
        if not rest:
            break
        answers, complete = _check_ignore(Path(project, folder), rest)
        for path, rule in zip(rest, answers):
            if rule:
                found[path] = rule
        if complete:
            break
        rest = rest[len(answers) + 1:]
    return found


def _check_ignore(project: Path, paths: list[str]) -> tuple[list[str], bool]:
    """The rule matching each path in order ('' for none), and whether git answered for all."""
    data = "".join(f"./{p}\0" for p in paths)  # './': a name starting with ':' is no pathspec magic
    out = _git(project, "-c", "core.fsmonitor=false", "check-ignore", "--stdin", "-z", "-v", "-n",
               stdin=data, ok=(0, 1), partial=True)
    fields = (out or "").split("\0")
    answers = []
    for i in range(0, len(fields) - 3, 4):
        source, line, pattern, _path = fields[i:i + 4]
        answers.append(f"{source}:{line} {pattern!r}" if source else "")
    return answers, len(answers) >= len(paths)


def _config(project: Path) -> list[tuple[str, str, str]]:
    """(origin file, key, value) of the config entries that make git run or read a file."""
    out = _git(project, "config", "-z", "--show-origin", "--get-regexp", CONFIG_KEYS, ok=(0, 1)) or ""
    found = []
    fields = out.split("\0")
    for i in range(0, len(fields) - 1, 2):
        origin, entry = fields[i], fields[i + 1]
        key, _, value = entry.partition("\n")
        found.append((origin[len("file:"):] if origin.startswith("file:") else "", key.lower(), value))
    return found


def _git(project: Path, *args: str, stdin: str | None = None, ok: tuple[int, ...] = (0,),
         partial: bool = False) -> str | None:
    env = {name: os.environ[name] for name in PASSED if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", GIT_FLUSH="1", LC_ALL="C")
    try:
        done = subprocess.run(["git", *args], cwd=project, env=env, input=stdin, capture_output=True,
                              text=True, errors="surrogateescape", timeout=TIMEOUT)
    except (OSError, subprocess.SubprocessError):  # no git, a workspace gone: nothing to add
        return None
    return done.stdout if done.returncode in ok or partial else None


def _words(value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def _resolve(path: str, base: str) -> str:
    path = os.path.expanduser(path)
    return os.path.realpath(os.path.join(base, path))


def _inside(real: str, path: str) -> str | None:
    """`path` relative to the workspace `real` ('' for the workspace itself), None if outside."""
    path = os.path.realpath(path)
    if path == real:
        return ""
    return path[len(real) + 1:] if path.startswith(real.rstrip("/") + "/") else None


def _shown(real: str, path: str) -> str:
    rel = _inside(real, path)
    return path if rel is None else (rel or ".")
