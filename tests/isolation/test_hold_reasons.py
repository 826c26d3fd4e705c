"""hold_reasons on real git repositories and real folders: what the host would run is held back,
by behaviour (the repository's config, what git takes for a repository, venvs), not by name only."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lis_tui.agent.instructions import FILE_NAME
from isolation.changes.heldback import (AGENTS, CACHE, DOT, GIT, IGNORED, KINDS, LINKS, PYTHON, REPO, TOOLS, YOURS,
                                        held_kind, hold_reasons)

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.gitconfig of the machine's decides here
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("a = 1\n")
    (root / ".gitignore").write_text("build/\n*.log\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "one")
    return root


def kinds(project: Path, paths: list[str], patterns: tuple[str, ...] = ()) -> dict[str, str]:
    return {p: held_kind(why) for p, why in hold_reasons(project, [(p, "added") for p in paths], patterns).items()}


def test_the_hooks_folder_fsmonitor_and_included_files_of_the_repositorys_config_are_held(repo):
    git(repo, "config", "core.hooksPath", ".githooks")
    git(repo, "config", "core.fsmonitor", "tools/fsmonitor.sh --fast")
    git(repo, "config", "include.path", "../shared.gitconfig")
    git(repo, "config", "includeIf.onbranch:main.path", "../cfg/main.gitconfig")
    changes = [".githooks/pre-commit", ".githooks/", ".githooks/lib/helper.txt", "tools/fsmonitor.sh",
               "shared.gitconfig", "cfg/main.gitconfig", "tools/other.sh", "src/a.py"]
    reasons = hold_reasons(repo, [(p, "modified") for p in changes])
    assert {p: held_kind(w) for p, w in reasons.items()} == {p: GIT for p in changes[:6]}
    assert "hooks folder (.githooks)" in reasons[".githooks/pre-commit"] and "whatever its mode" in \
        reasons[".githooks/pre-commit"]
    assert "core.fsmonitor" in reasons["tools/fsmonitor.sh"]
    assert "include.path" in reasons["shared.gitconfig"] and "includeif.onbranch:main.path" in \
        reasons["cfg/main.gitconfig"]


def test_without_a_hooks_path_the_git_folders_hooks_are_held(repo):
    reasons = hold_reasons(repo, [(".git/hooks/post-checkout", "added")])
    assert reasons[".git/hooks/post-checkout"].startswith(f"{GIT}: in the repository's hooks folder (.git/hooks)")


def test_a_folder_git_takes_for_a_repository_is_held_whole_wherever_it_is_and_whatever_its_name(repo):
    made = ["vendor/", "vendor/lib/", "vendor/lib/HEAD", "vendor/lib/config", "vendor/lib/objects/",
            "vendor/lib/refs/", "vendor/lib/refs/heads/", "vendor/lib/hooks/x"]
    assert kinds(repo, made + ["vendor/README"]) == {p: REPO for p in made[1:]}
    # Half of it on the host already, the other half in the change: still one repository.
    for name in ("objects", "refs"):
        (repo / "deps" / "x" / name).mkdir(parents=True)
    assert kinds(repo, ["deps/x/HEAD", "deps/x/config", "deps/y.txt"]) == {"deps/x/HEAD": REPO, "deps/x/config": REPO}
    # A worktree's folder (HEAD and commondir), a .git file, a .git folder at any depth.
    assert kinds(repo, ["w/HEAD", "w/commondir", "a/b/.git", "c/.git/config", "w2/HEAD"]) == {
        "w/HEAD": REPO, "w/commondir": REPO, "a/b/.git": REPO, "c/.git/config": REPO}


def test_every_repository_in_or_above_the_change_is_asked_with_one_query_each(repo, tmp_path, monkeypatch):
    """Only the repository the workspace is in was asked: a nested clone's hooks path, fsmonitor,
    included config and ignores, a submodule's (a gitdir file) and a repository in a workspace
    that is none went whole with apply all."""
    tool = repo / "vendor" / "tool"  # an untracked nested clone
    tool.mkdir(parents=True)
    git(tool, "init", "-q")
    git(tool, "config", "core.hooksPath", "hooks")
    git(tool, "config", "core.fsmonitor", "bin/fsmon --fast")
    git(tool, "config", "include.path", "../shared.cfg")  # beside .git/config: vendor/tool/shared.cfg
    (tool / ".gitignore").write_text("*.tmp\n")
    git(tmp_path, "init", "-q", f"--separate-git-dir={tmp_path / 'lib.git'}", str(repo / "lib"))
    git(repo / "lib", "config", "core.hooksPath", "githooks")  # lib/.git is a gitdir file
    (repo / "other" / ".git").mkdir(parents=True)  # git passes an empty .git by: the workspace's repository decides
    code = tmp_path / "code"  # a workspace that is no repository, holding one
    (code / "app").mkdir(parents=True)
    git(code / "app", "init", "-q")
    git(code / "app", "config", "core.hooksPath", ".githooks")
    log = tmp_path / "git-calls"
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "git").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {shutil.which("git")} "$@"\n')
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    made = {"vendor/tool/hooks/pre-commit": GIT, "vendor/tool/bin/fsmon": GIT, "vendor/tool/shared.cfg": GIT,
            "vendor/tool/x.tmp": IGNORED, "lib/githooks/post-checkout": GIT, "other/githooks/x": None,
            **{f"vendor/tool/src/m{i}.py": None for i in range(100)}, **{f"lib/m{i}.py": None for i in range(100)}}
    reasons = hold_reasons(repo, [(p, "added") for p in made])
    assert {p: held_kind(w) for p, w in reasons.items()} == {p: k for p, k in made.items() if k}
    assert "the repository vendor/tool/'s hooks folder (vendor/tool/hooks)" in reasons["vendor/tool/hooks/pre-commit"]
    assert "the repository vendor/tool/ ignores it (.gitignore:1 '*.tmp')" in reasons["vendor/tool/x.tmp"]
    calls = log.read_text().splitlines()
    # rev-parse, config, check-ignore for the workspace's, vendor/tool's and lib's; rev-parse for other/
    asked = [next(w for w in ("check-ignore", "config", "rev-parse") if w in call.split()) for call in calls]
    assert sorted(asked) == ["check-ignore"] * 3 + ["config"] * 3 + ["rev-parse"] * 4
    assert kinds(code, ["app/.githooks/pre-commit", "app/src/a.py"]) == {"app/.githooks/pre-commit": GIT}
    reasons = hold_reasons(code, [("app/.githooks/pre-commit", "modified")])  # a tracked hook's new contents
    assert reasons["app/.githooks/pre-commit"].startswith(f"{GIT}: in the repository app/'s hooks folder")


def test_in_a_workspace_inside_a_repository_only_what_git_discovery_reads_at_its_top_is_held(repo):
    """Every change at the top was held (an ordinary edit of a.py never went with apply all); now
    only what would make git take the workspace for a repository: HEAD, commondir, and objects/ or
    refs/ where the host has none (a project's own refs/ folder is just a folder)."""
    sub = repo / "src"
    (sub / "refs").mkdir()
    changes = ["HEAD", "refs/notes.md", "config", "a.py", "pkg/", "pkg/c.py"]
    reasons = hold_reasons(sub, [(p, "modified" if p == "a.py" else "added") for p in changes])
    assert {p: held_kind(w) for p, w in reasons.items()} == {"HEAD": REPO}
    assert f"inside the repository {os.path.realpath(repo)}" in reasons["HEAD"]
    assert kinds(sub, ["commondir", "objects/ab", "b.py"]) == {"commondir": REPO, "objects/ab": REPO}
    # HEAD and objects/ in the change, refs/ on the host: the workspace would be a repository, all of it held
    assert set(kinds(sub, ["HEAD", "objects/", "a.py"])) == {"HEAD", "objects/", "a.py"}
    (sub / "refs").rmdir()
    assert kinds(sub, ["refs/heads/x"]) == {"refs/heads/x": REPO}
    assert hold_reasons(repo, [("HEAD", "added"), ("objects/x", "added")]) == {}  # at its own top .git comes first


def test_a_venv_on_the_host_or_in_the_change_is_held_whole_and_so_is_what_python_imports_at_start(repo, tmp_path):
    (repo / ".venv").mkdir()
    (repo / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    made = ["env2/", "env2/pyvenv.cfg", "env2/bin/activate"]
    python = [".venv/bin/activate", "lib/python3.11/site-packages/x/__init__.py", "sitecustomize.py",
              "a/usercustomize.py", "lib/distutils-precedence.pth", "web/node_modules/left-pad/index.js"]
    assert kinds(repo, python + made + ["src/b.py"]) == {p: PYTHON for p in python + made}


CI_AND_TOOLS = [".husky/pre-commit", ".pre-commit-config.yaml", ".github/actions/setup/action.yml",
                ".github/CODEOWNERS", ".gitlab-ci.yml", ".circleci/config.yml", ".forgejo/workflows/ci.yml",
                ".gitea/workflows/ci.yml", "Jenkinsfile", ".zed/tasks.json", "app.code-workspace", ".exrc",
                ".nvim.lua", "mise.toml", ".mise.toml", ".tool-versions", "lis-tui.toml", ".envrc", ".env.local",
                ".vscode/tasks.json", ".idea/workspace.xml", ".devcontainer/devcontainer.json",
                ".github/workflows/ci.yml", "sub/dir/.envrc"]


def test_hooks_managers_ci_and_editor_and_tool_configs_are_held_at_any_depth(tmp_path):
    plain = tmp_path / "plain"  # not a repository: the name rules hold without git
    plain.mkdir()
    found = kinds(plain, CI_AND_TOOLS + ["src/github.py", "docs/mise.md", "environment.yml"])
    assert set(found) == set(CI_AND_TOOLS)
    assert found[".husky/pre-commit"] == found[".pre-commit-config.yaml"] == GIT
    assert {found[p] for p in CI_AND_TOOLS[2:]} == {TOOLS}


def test_paths_the_repository_ignores_are_held_in_one_git_call_even_past_names_git_chokes_on(repo):
    os.symlink("/etc", repo / "etc-link")  # git refuses a path beyond a link: the rest is still answered
    paths = ["build/", "build/out.o", "etc-link/x.log", ":(glob)*.log", "src/debug.log", "src/b.py", "-n.log"]
    reasons = hold_reasons(repo, [(p, "added") for p in paths])
    assert {p: held_kind(w) for p, w in reasons.items()} == {p: IGNORED for p in ("build/", "build/out.o",
                                                                                  ":(glob)*.log",
                                                                                  "src/debug.log", "-n.log")}
    assert "(.gitignore:2 '*.log')" in reasons["src/debug.log"]


def test_your_patterns_add_to_the_rules_and_cannot_take_one_away(repo):
    paths = ["run.sh", "tools/x.sh", ".envrc", ".git/hooks/pre-push", "a.txt"]
    assert kinds(repo, paths, ("*.sh",)) == {"run.sh": YOURS, "tools/x.sh": YOURS, ".envrc": TOOLS,
                                             ".git/hooks/pre-push": GIT}
    assert kinds(repo, paths, ("!.envrc", "")) == {".envrc": TOOLS, ".git/hooks/pre-push": GIT}
    assert kinds(repo, ["docs/x.md", "a/docs/y.md"], ("/docs/**",)) == {"docs/x.md": YOURS}


def test_without_git_the_git_rules_find_nothing_and_the_others_still_hold(repo, monkeypatch, tmp_path):
    git(repo, "config", "core.hooksPath", "githooks")
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    assert kinds(repo, ["githooks/pre-commit", "build/x", ".envrc", "v/HEAD", "v/objects/", "v/refs/"]) == {
        ".envrc": TOOLS, "v/HEAD": REPO, "v/objects/": REPO, "v/refs/": REPO}


def test_each_reason_names_its_kind_and_the_walks_own_reasons_are_links_and_exec_bits():
    assert held_kind("a symlink made in the sandbox, -> /etc/passwd") == LINKS
    assert all(held_kind(f"{kind}: why") == kind for kind in KINDS)


def test_the_quick_name_matching_agrees_with_the_patterns_as_documented(tmp_path):
    from isolation.changes.heldback import HELD_BACK, matches

    samples = [f"{pre}{name}{post}" for pre in ("", "a/", "a/b/") for post in ("", "/x", "/x/y.py")
               for name in ("site-packages", "node_modules", ".github", ".husky", "x.pth", ".envrc", ".env.local",
                            "a.code-workspace", "Jenkinsfile", "github", "x.pthx", "mise.toml.bak", ".zed", "zed",
                            "__pycache__", "m.pyc", ".cargo/config.toml", "cargo/config.toml", "lefthook.yml",
                            "AGENTS.md", "agents.md", ".yarnrc.yml", ".claude")]
    for patterns in ((), ("docs/*.md", "/top/**", "**/gen/*.py", "*.sh", "build", "a/b", "x/")):
        # modified, so that the names alone decide (a new dot-file is held whatever its name)
        reasons = hold_reasons(tmp_path, [(p, "modified") for p in samples + ["docs/a.md", "top/x", "q/gen/m.py"]],
                               patterns)
        for path in samples + ["docs/a.md", "top/x", "q/gen/m.py"]:
            expected = any(matches(path, pattern) for pattern in HELD_BACK + patterns)
            assert (path in reasons) == expected, (path, patterns, reasons.get(path))


REALISTIC = {"src/app/core.py": "modified", "src/app/new_feature.py": "added", "src/app/sub/": "added",
             "src/app/sub/__init__.py": "added", "tests/test_new_feature.py": "added", "tests/conftest.py": "added",
             "docs/guide.md": "modified", "docs/new.md": "added", "README.md": "modified", "pyproject.toml": "modified",
             ".gitignore": "modified", "web/.editorconfig": "modified", "docs/.gitignore": "modified", "old.py": "deleted",
             ".github.md": "deleted"}


def test_held_by_class_caches_new_dot_files_tool_configs_and_agent_instructions_and_nothing_ordinary(repo):
    held = {"scripts/__pycache__/": ("added", CACHE), "scripts/__pycache__/util.cpython-311.pyc": ("added", CACHE),
            "old/mod.pyc": ("modified", CACHE), "pkg/fast.cpython-311-x86_64-linux-gnu.so": ("added", CACHE),
            ".editorconfig": ("added", DOT), "pkg/.gitignore": ("added", DOT), ".config/": ("added", DOT),
            ".config/tool/settings.toml": ("added", DOT), ".prettierrc": ("type", DOT),
            ".cargo/config.toml": ("modified", TOOLS), ".claude/settings.json": ("modified", TOOLS),
            ".mcp.json": ("modified", TOOLS), ".npmrc": ("modified", TOOLS), ".yarnrc.yml": ("modified", TOOLS),
            ".devcontainer.json": ("modified", TOOLS), ".cursor/mcp.json": ("modified", TOOLS),
            ".lefthook.yml": ("modified", GIT), "lefthook.yml": ("modified", GIT),
            "lefthook-local.yml": ("added", GIT), "AGENTS.md": ("modified", AGENTS), "web/CLAUDE.md": ("added", AGENTS),
            FILE_NAME: ("deleted", AGENTS)}
    changes = {p: kind for p, (kind, _) in held.items()} | REALISTIC
    reasons = hold_reasons(repo, list(changes.items()))
    assert {p: held_kind(w) for p, w in reasons.items()} == {p: k for p, (_, k) in held.items()}
    assert "in place of its source" in reasons["scripts/__pycache__/util.cpython-311.pyc"]
    assert "new in the dot-folder .config/" in reasons[".config/tool/settings.toml"]
    assert "standing instructions" in reasons["AGENTS.md"]


def test_a_run_record_is_held_whole_by_its_shape_in_the_change_or_on_the_host_and_so_is_lis_output(repo):
    """A run record (trajectory.json beside answer.txt, files/ or changes.json) says where `lis-tui
    apply` writes and how `resume` runs; one lis-tui's index names (an --output-dir in the project)
    is trusted, so a sandbox may change none, whatever the folder's name."""
    kept = repo / "out" / "mine"  # a run's --output-dir inside the project, as lis-tui wrote it
    (kept / "files").mkdir(parents=True)
    (kept / "trajectory.json").write_text("{}")
    (repo / "data").mkdir()
    (repo / "data" / "trajectory.json").write_text("[]")  # a project's own file of that name
    changes = ["out/mine/trajectory.json", "out/mine/files/a.txt", "made/r1/trajectory.json", "made/r1/changes.json",
               "made/r1/changes.patch", "made/r1/", "lis-output/x/notes.txt", "src/lis-output/y", "made/",
               "data/trajectory.json", "data/answer.json", "src/a.py", "notes/answer.txt"]
    reasons = hold_reasons(repo, [(p, "added") for p in changes])
    assert {p: held_kind(w) for p, w in reasons.items()} == {p: TOOLS for p in changes[:8]}
    assert reasons["out/mine/files/a.txt"].startswith(f"{TOOLS}: in out/mine/, a lis-tui run record")
    assert reasons["made/r1/changes.patch"].startswith(f"{TOOLS}: in made/r1/, a lis-tui run record")
    assert reasons["src/lis-output/y"].startswith(f"{TOOLS}: in a lis-output/ folder")
