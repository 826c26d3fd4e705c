"""Paths a sandbox's changes may reach the host through only when a person names them.

Applying a workspace writes what a hostile model made into a folder the person then works in:
`git checkout` runs `.git/hooks/*`, direnv loads `.envrc`, Python runs `*.pth` lines at start-up,
editors run `.vscode` tasks, lis-tui reads `./lis-tui.toml`. Such changes are held back from an
"apply all" and applied only by name (as links the sandbox made are); `Change.held` says why.

A pattern is matched against a path's '/'-separated names: `*`, `?` and `[...]` within one name,
`**` for any number of names (none included: `.git/**` is `.git` itself too). It matches at any
depth (`*.pth` is `lib/site-packages/x.pth` too, `.git/**` a nested repository's) unless it starts
with `/`, which anchors it to the top of the workspace.
"""
from __future__ import annotations

from fnmatch import fnmatchcase

HELD_BACK: tuple[str, ...] = (".git/**", "lis-tui.toml", ".lis-tui/**", ".envrc", ".env*", ".vscode/**",
                              ".idea/**", ".devcontainer/**", ".github/workflows/**", "*.pth")
"""The default patterns (`[workspace] held_back` in the user's config replaces them)."""

WHY = {".git/**": "git runs hooks and obeys config from it", "lis-tui.toml": "lis-tui's own settings",
       ".lis-tui/**": "lis-tui's own settings", ".envrc": "direnv runs it", ".env*": "tools load it into the "
       "environment", ".vscode/**": "the editor runs tasks from it", ".idea/**": "the IDE runs tasks from it",
       ".devcontainer/**": "it configures a container the editor builds", ".github/workflows/**": "CI runs it",
       "*.pth": "Python runs .pth files at start-up"}


def matches(path: str, pattern: str) -> bool:
    """Whether `path` (relative, '/'-separated) matches `pattern` (see the module's docstring)."""
    return _matches(path.strip("/").split("/"), f"/{path.strip('/')}/", pattern)


def _matches(names: list[str], slashed: str, pattern: str) -> bool:
    want = [n for n in pattern.split("/") if n]
    if not want:
        return False
    if pattern.startswith("/") or want[0] == "**":
        return _match(names, 0, want, 0)
    if "**" not in want:  # then only one start can fit: the last len(want) names
        return len(names) >= len(want) and _match(names, len(names) - len(want), want, 0)
    first = None if any(c in want[0] for c in "*?[") else want[0]
    if first is not None and f"/{first}/" not in slashed:  # a deep tree is scanned once, in C
        return False
    return any(_match(names, i, want, 0) for i in range(len(names)) if first is None or names[i] == first)


def _match(names: list[str], i: int, want: list[str], j: int) -> bool:
    """Whether names[i:] matches want[j:]."""
    while j < len(want):
        if want[j] == "**":
            return j == len(want) - 1 or any(_match(names, k, want, j + 1) for k in range(i, len(names) + 1))
        if i >= len(names) or not fnmatchcase(names[i], want[j]):
            return False
        i, j = i + 1, j + 1
    return i == len(names)


def pattern_reason(path: str, patterns: tuple[str, ...]) -> str:
    """Why `path` is held back by a pattern; '' if none matches."""
    path = path.strip("/")
    names, slashed = path.split("/"), f"/{path}/"
    for pattern in patterns:
        if _matches(names, slashed, pattern):
            why = WHY.get(pattern, "a held-back pattern of your config")
            return f"matches held-back pattern {pattern!r} ({why})"
    return ""


# STAND-IN until the behavioural rewrite of this module lands (issue 34, item 3): the lead keeps
# theirs on merge. Same signature; here it applies only today's patterns (HELD_BACK and the user's).
def hold_reasons(project, changes, patterns: tuple[str, ...] = ()) -> dict[str, str]:
    """{path: why} for the `changes` ((path, kind) pairs) in `project` that are applied only by name."""
    rules = HELD_BACK + tuple(p for p in patterns if p not in HELD_BACK)
    found = {path: pattern_reason(path.rstrip("/"), rules) for path, _kind in changes}
    return {path: why for path, why in found.items() if why}
