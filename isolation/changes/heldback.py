"""What of a sandbox's changes would configure or run something on the host once applied: those
are held back, applied only when a person names them (`Change.held` says why).

The rule is behaviour and class, not a list of names a hostile model can step around. Before
applying, it finds what the host would run and holds those paths back:
- what each host repository in or above the change makes git run or read, by its effective config
  (isolation.changes.hostgit, one query per repository): the one the workspace is in, and every
  folder of the change holding a `.git` on the host (an untracked nested clone, a submodule, a
  gitdir file): the hooks folder (`core.hooksPath`, else `.git/hooks`) whatever the modes in it,
  the file named by `core.fsmonitor`, the files `include.path` and `includeIf.*.path` name;
- anything git would take for a repository: a `.git` file or folder, or a folder holding HEAD with
  objects/ and refs/ (or commondir), in the change or on the host, and all of it; in a workspace
  that is a subfolder of a repository, what git's discovery reads at its top (HEAD, commondir, and
  objects/ or refs/ where the host has none): with them git would take the workspace itself for a
  repository (and obey its config) instead of the one around it; the other changes at the top go;
- virtual environments (a folder holding `pyvenv.cfg`, in the change or on the host: all of it),
  and the classes of `BUILT_IN`, new or changed: what Python imports at start-up, installed
  packages, compiled code and caches a runtime loads in place of the source the review shows
  (`__pycache__`, `*.pyc`, extension modules), git hooks managers, CI, editor and tool configs that
  run commands, and instructions agents read (`AGENTS.md`, `CLAUDE.md`);
- every new dot-file and dot-folder, and whatever is new in one, at any depth (`NEW` kinds): tools
  load them on their own, a model has no business adding one; an edit of one the host has goes;
- the paths a host repository ignores (build outputs, caches, venvs): not reviewable source.
The person's `[workspace] held_back` patterns add to these; they never turn one off. Links the
sandbox made and new executable bits are held back too (isolation.changes.workspace: they need the walk's
stat data), and so is the deletion half of a held-back move (`pair_moves`, `move_reason`: the
callers compare contents; naming the new path takes both, `with_moves`). A reason reads
"KIND: why", KIND one of `KINDS` (`held_kind` takes it back out).

A pattern is matched against a path's '/'-separated names: `*`, `?` and `[...]` within one name,
`**` for any number of names (none included: `.git/**` is `.git` itself too). It matches at any
depth (`*.pth` is `lib/site-packages/x.pth` too) unless it starts with `/`, which anchors it to
the top of the workspace.
"""
from __future__ import annotations

import os
import re
import stat
from fnmatch import fnmatchcase, translate
from pathlib import Path
from typing import Callable, Hashable, Iterable

from . import hostgit
from .baseline import folders_above

GIT, REPO, PYTHON, TOOLS = "git hooks & config", "nested repository", "venv & packages", "CI & tool config"
CACHE, AGENTS, DOT = "cache & compiled code", "agent instructions", "new dot-file"
IGNORED, LINKS, YOURS = "ignored path", "link or exec bit", "your pattern"
KINDS = (GIT, REPO, PYTHON, CACHE, TOOLS, AGENTS, DOT, IGNORED, LINKS, YOURS)
"""The kinds of held-back changes, in the order the review lists them."""
NEW = ("added", "type")
"""The change kinds that make a path new: what was not there (or was of another type)."""
_COMPILED = "a runtime loads it in place of its source, which the review shows unchanged"
_RUNS = "runs commands it names"
_AGENT = "agents read it as standing instructions for every later run here"
_LEFTHOOK = "lefthook's config and scripts: git runs them at commit and push"
_CARGO = f"cargo's config (runners, rustc wrappers) {_RUNS}"

BUILT_IN: dict[str, tuple[str, str]] = {
    ".husky/**": (GIT, "husky's hooks: git runs them through core.hooksPath=.husky/_, whatever their mode"),
    ".pre-commit-config.yaml": (GIT, "the pre-commit hook runs what it names"),
    "site-packages/**": (PYTHON, "Python imports installed packages from it"),
    "*.pth": (PYTHON, "Python runs .pth lines at every start"),
    "sitecustomize.py": (PYTHON, "Python imports it at every start"),
    "usercustomize.py": (PYTHON, "Python imports it at every start"),
    "node_modules/**": (PYTHON, "node and npm scripts run what is installed there"),
    ".github/**": (TOOLS, "CI runs it (GitHub Actions: workflows and actions)"),
    ".gitlab-ci.yml": (TOOLS, "CI runs it"), ".circleci/**": (TOOLS, "CI runs it"),
    ".forgejo/**": (TOOLS, "CI runs it"), ".gitea/**": (TOOLS, "CI runs it"), "Jenkinsfile": (TOOLS, "CI runs it"),
    ".envrc": (TOOLS, "direnv runs it"), ".env*": (TOOLS, "tools load it into the environment"),
    "mise.toml": (TOOLS, "mise runs its tasks and hooks"), ".mise.toml": (TOOLS, "mise runs its tasks and hooks"),
    ".tool-versions": (TOOLS, "asdf and mise install and run what it names"),
    ".vscode/**": (TOOLS, "the editor runs tasks from it"), "*.code-workspace": (TOOLS, "the editor runs tasks from it"),
    ".zed/**": (TOOLS, "the editor runs tasks from it"), ".idea/**": (TOOLS, "the IDE runs tasks from it"),
    ".exrc": (TOOLS, "vim runs it (exrc)"), ".nvim.lua": (TOOLS, "neovim runs it (exrc)"),
    ".devcontainer/**": (TOOLS, "it configures a container the editor builds"),
    ".devcontainer.json": (TOOLS, "it configures a container the editor builds"),
    "lis-tui.toml": (TOOLS, "lis-tui's own settings"), ".lis-tui/**": (TOOLS, "lis-tui's own settings"),
    # compiled code and caches: what runs is not what the review shows (a forged .pyc with the
    # source's mtime and size runs past an unchanged .py; an extension module is imported before it)
    "__pycache__/**": (CACHE, f"Python's bytecode cache: {_COMPILED}"),
    "*.pyc": (CACHE, f"Python bytecode: {_COMPILED}"), "*.pyo": (CACHE, f"Python bytecode: {_COMPILED}"),
    "*.so": (CACHE, f"native code (Python imports an extension module before the .py): {_COMPILED}"),
    "*.elc": (CACHE, f"Emacs bytecode: {_COMPILED}"), "*.zwc": (CACHE, f"compiled zsh: {_COMPILED}"),
    # tool and editor configs that run commands, new or tracked
    "lefthook.*": (GIT, _LEFTHOOK), "lefthook-local.*": (GIT, _LEFTHOOK), ".lefthook*": (GIT, _LEFTHOOK),
    ".lefthook/**": (GIT, _LEFTHOOK), ".lefthook-local/**": (GIT, _LEFTHOOK),
    ".claude/**": (TOOLS, f"Claude Code's settings: its hooks and MCP servers {_RUNS}"),
    ".mcp.json": (TOOLS, "MCP clients start the servers it names"),
    ".cursor/**": (TOOLS, f"Cursor's settings: its MCP servers {_RUNS}"),
    ".gemini/**": (TOOLS, f"Gemini CLI's settings {_RUNS}"), ".codex/**": (TOOLS, f"Codex's settings {_RUNS}"),
    ".aider.conf.yml": (TOOLS, f"aider's settings (lint-cmd, test-cmd) {_RUNS}"),
    ".npmrc": (TOOLS, f"npm's config (script-shell, node-options) {_RUNS}"),
    ".yarnrc*": (TOOLS, "yarn runs the yarnPath it names"), ".pnpmfile.cjs": (TOOLS, "pnpm runs it at install"),
    "bunfig.toml": (TOOLS, "bun runs the preload scripts it names"),
    ".cargo/config.toml": (TOOLS, _CARGO), ".cargo/config": (TOOLS, _CARGO),
    ".nvimrc": (TOOLS, "neovim runs it (exrc)"), ".dir-locals.el": (TOOLS, "Emacs evaluates it in the project"),
    ".pdbrc": (TOOLS, "pdb runs it at start"), ".irbrc": (TOOLS, "irb runs it at start"),
    ".pryrc": (TOOLS, "pry runs it at start"), ".gitpod.yml": (TOOLS, "Gitpod runs its tasks"),
    # instructions agents read (lis-tui itself: AGENTS.md at the project's top, lis_tui/agent/instructions.py)
    "AGENTS.md": (AGENTS, _AGENT), "AGENT.md": (AGENTS, _AGENT), "CLAUDE.md": (AGENTS, _AGENT),
    "CLAUDE.local.md": (AGENTS, _AGENT), "GEMINI.md": (AGENTS, _AGENT), ".cursorrules": (AGENTS, _AGENT),
    ".windsurfrules": (AGENTS, _AGENT), ".clinerules": (AGENTS, _AGENT), ".clinerules/**": (AGENTS, _AGENT),
    ".windsurf/**": (AGENTS, _AGENT),
}
"""Names held back at any depth whether new or changed: pattern -> (kind, why)."""
HELD_BACK: tuple[str, ...] = tuple(BUILT_IN)


def hold_reasons(project: Path, changes: Iterable[tuple[str, str]], patterns: tuple[str, ...] = ()) -> dict[str, str]:
    """path -> why, for each change that would configure or run something on the host once applied.
    `project`: the host workspace folder; `changes`: (path, kind) as in workspace.Change (relative,
    '/'-separated, directories end with '/'; kind added/modified/deleted/mode/type);
    `patterns`: the user's extra held-back patterns (added to the built-in rules, never replacing them)."""
    changes = list(changes)
    paths = [path for path, _ in changes]
    tree = _Tree(project, paths)
    own = hostgit.host_repo(project)
    repos = {"": own} if own else {}
    repos.update((f, r) for f in sorted(tree.git_folders) if (r := hostgit.host_repo(project, f)))
    runs: dict[str, str] = {}
    for repo in repos.values():
        for where, why in repo.runs.items():
            runs.setdefault(where, why)
    names, yours = _Names(BUILT_IN), _Names({p: (YOURS, "a held-back pattern of your config") for p in patterns})
    reasons: dict[str, str] = {}
    for path, kind in changes:
        why = _git_reason(path, runs, own, project) or tree.reason(path) or names.reason(path) \
            or (_new_dot(path) if kind in NEW else "") or yours.reason(path)
        if why:
            reasons[path] = why
    reasons.update({p: why for p, why in run_record_reasons(project, paths).items() if p not in reasons})
    for folder, asked in tree.asked(repos, [p for p in paths if p not in reasons]).items():
        whose = f"the repository {folder}/" if folder else "the repository"
        for path, rule in hostgit.ignored(project, asked, folder).items():
            path = f"{folder}/{path}" if folder else path  # the innermost repository's rule is said
            reasons[path] = f"{IGNORED}: {whose} ignores it ({rule}), so it is no source to review"
    return reasons


def held_kind(why: str) -> str:
    """The kind (one of KINDS) of a held-back change's reason."""
    head = why.partition(": ")[0]
    return head if head in KINDS else LINKS  # the walk's own reasons: links and executable bits


def without_kind(why: str) -> str:
    """A reason without its "KIND: " (the walk's own reasons have none)."""
    head, sep, rest = why.partition(": ")
    return rest if sep and held_kind(why) == head else why


# ---- run records: a folder lis-tui would take for one of its runs ------------------------------

RUN_FILES = ("changes.json", "answer.txt", "files")
"""What lis-tui writes beside a run's trajectory.json: a folder holding one of them and a
trajectory.json is a run's record, whatever its name."""


def run_record_reasons(project: Path, paths: list[str]) -> dict[str, str]:
    """path -> why, for each change in a folder holding a run record (a trajectory.json beside one
    of RUN_FILES, in the change or on the host) or under a `lis-output` folder (where lis-tui kept
    runs before): a record says where `lis-tui apply` writes and how `resume` runs, and one that
    lis-tui's index names (an --output-dir inside the project) is trusted."""
    named = {p.rstrip("/") for p in paths}
    folders = folders_above(named)
    within = named | folders

    def has(folder: str, name: str) -> bool:
        path = f"{folder}/{name}" if folder else name
        return path in within or os.path.lexists(os.path.join(project, path))

    record_of: dict[str, str | None] = {}  # folder -> the run record folder it is in, if any
    for folder in sorted(folders):  # a parent sorts before its children
        is_record = has(folder, "trajectory.json") and any(has(folder, name) for name in RUN_FILES)
        record_of[folder] = folder if is_record else record_of.get(folder.rpartition("/")[0]) if folder else None
    reasons: dict[str, str] = {}
    for path in paths:
        key = path.rstrip("/")
        record = record_of.get(key) if key in record_of else record_of[key.rpartition("/")[0]]
        if record is not None:
            reasons[path] = (f"{TOOLS}: in {record or 'the workspace'}/, a lis-tui run record (a trajectory.json "
                             "beside its files): lis-tui apply and resume read from it where to write and how to run")
        elif "/lis-output/" in f"/{key}/":
            reasons[path] = (f"{TOOLS}: in a lis-output/ folder, where lis-tui kept its runs before: a run "
                             "record there says where lis-tui apply writes and how resume runs")
    return reasons


# ---- moves: a deletion that is the other half of a held-back addition --------------------------

def pair_moves(added: dict[str, Hashable], deleted: dict[str, Hashable],
               same: Callable[[str, str], bool] = lambda gone, made: True) -> dict[str, str]:
    """{deletion: addition} for moves: each held-back addition (path -> what identifies its content:
    bytes and mode, or a link's target) matched to a deletion with the same, one to one; the same
    name is taken first, then the first path. `same(deletion, addition)` confirms a match (bytes
    read only for the few whose size and mode agree)."""
    waiting: dict[Hashable, list[str]] = {}
    for path in sorted(deleted):
        waiting.setdefault(deleted[path], []).append(path)
    pairs: dict[str, str] = {}
    for made in sorted(added):
        name = made.rpartition("/")[2]
        candidates = waiting.get(added[made], [])
        for gone in sorted(candidates, key=lambda p: p.rpartition("/")[2] != name):
            if same(gone, made):
                candidates.remove(gone)
                pairs[gone] = made
                break
    return pairs


def move_reason(made: str, why: str) -> str:
    """Why the deletion that is the other half of the held-back addition `made` (held for `why`) is held too."""
    return (f"{held_kind(why)}: the other half of a move to {made}, which is held back ({without_kind(why)}); "
            f"naming {made} applies both")


def with_moves(held: dict[str, str], named: set[str]) -> set[str]:
    """`named` with the deletions held back only as the other half of a named held-back move: a
    person who takes the new path takes the move (naming the deletion alone takes only it)."""
    wanted = {move_reason(path, held[path]) for path in named if path in held}
    return named | {path for path, why in held.items() if why in wanted}


def _git_reason(path: str, runs: dict[str, str], own: hostgit.HostRepo | None, project: Path) -> str:
    key = path.rstrip("/")
    for where, why in runs.items():
        if not where or key == where or key.startswith(f"{where}/"):
            return f"{GIT}: {why}"
    if own and own.prefix and _makes_a_repository(key, project):
        return (f"{REPO}: at the top of a workspace inside the repository {own.top}, git's discovery reads "
                f"{key.partition('/')[0]}: with HEAD, objects/ and refs/ (or commondir) there, git would take "
                "the workspace itself for a repository and obey its config")
    return ""


def _new_dot(path: str) -> str:
    """Why a new path that is, or is in, a dot-file or dot-folder is held ("" if it is neither)."""
    if "/." not in f"/{path}":  # most paths: one scan in C
        return ""
    names = path.rstrip("/").split("/")
    dotted = next(i for i, name in enumerate(names) if name.startswith("."))
    what = f"new in the dot-folder {'/'.join(names[:dotted + 1])}/" if dotted < len(names) - 1 else "a new dot-name"
    return (f"{DOT}: {what}: tools and editors load dot-files on their own, and a model has no business "
            "adding a tool's config (an edit of one you have, a .gitignore say, goes)")


def _makes_a_repository(key: str, project: Path) -> bool:
    """Whether a change at `key` gives the workspace's top what git's discovery (is_git_directory)
    looks for there: HEAD, commondir, or an objects/ or refs/ folder the host does not have."""
    top = key.partition("/")[0]
    if top in ("HEAD", "commondir"):
        return True
    # git tests these two with access(): a folder the host already has (or a link to one) is nothing new
    return top in ("objects", "refs") and not os.path.isdir(os.path.join(project, top))


class _Tree:
    """The folders the changes are in, with what git and Python would take them for, from the
    change list and from the host (never through a host link: what lies beyond is not the workspace)."""

    def __init__(self, project: Path, paths: list[str]) -> None:
        self.root = os.fspath(project)
        self.named = {p.rstrip("/") for p in paths}
        folders = {""}
        for path in paths:  # each folder and every one above it, each added once
            folder = path.rstrip("/") if path.endswith("/") else path.rpartition("/")[0]
            while folder not in folders:
                folders.add(folder)
                folder = folder.rpartition("/")[0]
        self.within = self.named | folders  # everything the change has, folders it implies included
        self.linked: set[str] = set()
        self.git_folders: set[str] = set()
        """Host folders below the top holding a .git (folder or gitdir file): repositories of their own."""
        self.repos_above: dict[str, tuple[str, ...]] = {"": ()}
        """folder -> the git_folders at or above it, outermost first."""
        for folder in sorted(folders)[1:]:  # a parent sorts before its children
            parent = folder.rpartition("/")[0]
            if parent in self.linked or self._host_is_link(folder):
                self.linked.add(folder)
            elif "/.git/" not in f"/{folder}/" and os.path.lexists(os.path.join(self.root, folder, ".git")):
                self.git_folders.add(folder)
            above = self.repos_above[parent]
            self.repos_above[folder] = (*above, folder) if folder in self.git_folders else above
        self.repos = {f for f in folders if self._is_repo(f)}
        self.venvs = {f for f in folders if self._has(f, "pyvenv.cfg")}

    def asked(self, repos: dict[str, object], paths: list[str]) -> dict[str, list[str]]:
        """{folder of a repository: `paths` to ask it about, relative to it}: every repository at or
        above each path ('' the workspace's own, for all), none through a host link."""
        asked: dict[str, list[str]] = {folder: [] for folder in repos}
        for path in paths:
            if self.below_link(path):
                continue
            if "" in asked:
                asked[""].append(path)
            for folder in self.repos_above[path.rstrip("/").rpartition("/")[0]]:
                if folder in asked:
                    asked[folder].append(path[len(folder) + 1:])
        return {folder: found for folder, found in asked.items() if found}

    def reason(self, path: str) -> str:
        key = path.rstrip("/")
        names = key.split("/")
        # the outermost reason wins: (depth of the folder it is about, then .git before repo before venv);
        # found from the few repositories and venvs, not by joining every prefix (a 2,500-level tree)
        found = [(names.index(".git"), 0, f"{REPO}: git takes the folder holding a .git for a repository "
                  "and obeys its config and hooks")] if ".git" in names else []
        for order, folders in ((1, self.repos), (2, self.venvs)):
            found += [(folder.count("/") + 1 if folder else 0, order, folder) for folder in folders
                      if not folder or key.startswith(f"{folder}/")]
        if found:
            _, order, folder = min(found)
            if order == 0:
                return folder  # the .git text
            if order == 1:
                return (f"{REPO}: in {folder or 'the workspace'}/, which git takes for a repository (HEAD, "
                        "objects/, refs/): git obeys its config and runs its hooks in there")
            return (f"{PYTHON}: in the virtual environment {folder or '.'}/ (it holds pyvenv.cfg): its "
                    "python, scripts and activate run as you")
        if key in self.repos:
            return f"{REPO}: git takes it for a repository (HEAD, objects/, refs/) and obeys its config"
        if key in self.venvs:
            return f"{PYTHON}: a virtual environment (it holds pyvenv.cfg): its python and scripts run as you"
        return ""

    def below_link(self, path: str) -> bool:
        parent = path.rstrip("/").rpartition("/")[0]
        return parent in self.linked

    def _is_repo(self, folder: str) -> bool:
        if not self._has(folder, "HEAD"):
            return False
        return (self._has(folder, "objects") and self._has(folder, "refs")) or self._has(folder, "commondir")

    def _has(self, folder: str, name: str) -> bool:
        path = f"{folder}/{name}" if folder else name
        if path in self.within:
            return True
        return folder not in self.linked and os.path.lexists(os.path.join(self.root, path))

    def _host_is_link(self, folder: str) -> bool:
        try:
            return stat.S_ISLNK(os.lstat(os.path.join(self.root, folder)).st_mode)
        except OSError:
            return False


class _Names:
    """Patterns matched quickly: `NAME/**` by a set of names, a plain name (or plain `A/B`) by its
    last name, a name with wildcards by one regular expression; the rest one by one."""

    def __init__(self, rules: dict[str, tuple[str, str]]) -> None:
        self.rules = rules
        self.folders, self.leaves, self.globs, self.general = {}, {}, [], []
        for pattern in rules:
            head, _, tail = pattern.partition("/")
            if tail == "**" and head and not _wild(head):
                self.folders.setdefault(head, pattern)
            elif not _wild(pattern) and not pattern.startswith("/") and pattern.strip("/"):
                want = [n for n in pattern.split("/") if n]
                self.leaves.setdefault(want[-1], []).append((want, pattern))
            elif "/" not in pattern:
                self.globs.append(pattern)
            else:
                self.general.append(pattern)
        self.glob = re.compile("|".join(f"(?:{translate(g)})" for g in self.globs)) if self.globs else None

    def reason(self, path: str) -> str:
        names = path.strip("/").split("/")
        pattern = next((self.folders[n] for n in names if n in self.folders), None) \
            or next((p for want, p in self.leaves.get(names[-1], ()) if names[-len(want):] == want), None)
        if pattern is None and self.glob is not None and self.glob.fullmatch(names[-1]):
            pattern = next(g for g in self.globs if fnmatchcase(names[-1], g))
        if pattern is None:
            slashed = f"/{'/'.join(names)}/"
            pattern = next((p for p in self.general if _matches(names, slashed, p)), None)
        if pattern is None:
            return ""
        kind, why = self.rules[pattern]
        return f"{kind}: matches {pattern!r} ({why})"


def _wild(name: str) -> bool:
    return any(c in name for c in "*?[")



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
