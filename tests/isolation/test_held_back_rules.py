"""Apply is inert by behaviour (issue 34): in real sandboxes over real git projects, what the host
would run once applied is held back from "apply all", whatever it is named; named, it does run."""
from __future__ import annotations

import importlib.util
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from isolation import Sandbox, SandboxSpec
from isolation.changes.heldback import CACHE, GIT, IGNORED, PYTHON, REPO, TOOLS, YOURS, held_kind
from isolation.host.walk import RefusedPaths

pytestmark = pytest.mark.sandbox
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1"}
MARK = "echo ran > {marker}\n"


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 or not check, done.stderr
    return done


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))  # the machine's ~/.gitconfig decides nothing here
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("build/\n*.log\n")
    git(root, "init", "-q")
    return root


def commit(repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "work")


def held_after_apply_all(sb: Sandbox, script: str) -> dict[str, str]:
    """Run `script` in the sandbox, apply all; {path: why} of what was held back (and not written)."""
    done = sb.exec(script)
    assert done.exit_code == 0, done.stderr
    with pytest.raises(RefusedPaths) as refused:
        sb.apply()
    return refused.value.held_back


def test_a_hook_in_the_hooks_path_folder_is_held_and_git_commit_runs_it_once_named(repo):
    (repo / ".githooks").mkdir()
    (repo / ".githooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (repo / ".githooks" / "pre-commit").chmod(0o755)
    git(repo, "config", "core.hooksPath", ".githooks")
    commit(repo)
    with Sandbox(SandboxSpec(workspace=repo)) as sb:
        held = held_after_apply_all(sb, "printf '#!/bin/sh\\necho ran > hook-ran\\n' > .githooks/pre-commit"
                                        " && echo b > a.txt")
        assert held_kind(held[".githooks/pre-commit"]) == GIT and set(held) == {".githooks/pre-commit"}
        assert (repo / "a.txt").read_text() == "b\n"  # the rest went
        commit(repo)
        assert not (repo / "hook-ran").exists()
        sb.apply([".githooks/pre-commit"])  # named, it goes: and git commit runs it, as the user
    (repo / "a.txt").write_text("c\n")
    commit(repo)
    assert (repo / "hook-ran").read_text() == "ran\n"


def test_husky_v9_a_new_non_executable_hook_is_held_and_its_stub_runs_it_once_named(repo):
    stub = repo / ".husky" / "_" / "pre-commit"  # what husky v9 writes: the stub runs `sh -e .husky/<hook>`
    stub.parent.mkdir(parents=True)
    stub.write_text('#!/bin/sh\n[ -f .husky/pre-commit ] || exit 0\nexec sh -e .husky/pre-commit\n')
    stub.chmod(0o755)
    git(repo, "config", "core.hooksPath", ".husky/_")
    commit(repo)
    with Sandbox(SandboxSpec(workspace=repo)) as sb:
        held = held_after_apply_all(sb, "echo 'echo ran > husky-ran' > .husky/pre-commit && echo b > a.txt")
        assert set(held) == {".husky/pre-commit"} and held_kind(held[".husky/pre-commit"]) == GIT
        assert not (repo / ".husky" / "pre-commit").exists()
        sb.apply([".husky/pre-commit"])
    assert not (repo / ".husky" / "pre-commit").stat().st_mode & 0o111
    commit(repo)
    assert (repo / "husky-ran").read_text() == "ran\n"


def test_every_repository_in_the_workspace_keeps_its_hooks_a_nested_one_and_an_untracked_clone_in_it(tmp_path,
                                                                                                     monkeypatch):
    """Issue 52: with --workspace ~/code, where app/ is a repository with core.hooksPath=.githooks
    holding an untracked clone vendor/tool (core.hooksPath=hooks), apply all wrote both hooks' new
    contents and the next git commit there ran them: only the workspace's own repository was asked."""
    monkeypatch.setenv("HOME", str(tmp_path))
    code, hooks = tmp_path / "code", {"app": ".githooks", "app/vendor/tool": "hooks"}
    for where, folder in hooks.items():
        hook = code / where / folder / "pre-commit"
        hook.parent.mkdir(parents=True)
        hook.write_text("#!/bin/sh\n")
        hook.chmod(0o755)
        (code / where / "a.txt").write_text("a\n")
        git(code / where, "init", "-q")
        git(code / where, "config", "core.hooksPath", folder)
        commit(code / where)
    planted = [f"{where}/{folder}/pre-commit" for where, folder in hooks.items()]
    with Sandbox(SandboxSpec(workspace=code)) as sb:
        held = held_after_apply_all(sb, " && ".join(f"echo 'echo ran > hook-ran' >> {p}" for p in planted)
                                        + " && echo b > app/a.txt && echo b > app/vendor/tool/a.txt")
        assert set(held) == set(planted) and {held_kind(w) for w in held.values()} == {GIT}
        assert "the repository app/vendor/tool/'s hooks folder" in held["app/vendor/tool/hooks/pre-commit"]
        for where in hooks:
            assert (code / where / "a.txt").read_text() == "b\n"  # the rest went
            commit(code / where)
            assert not (code / where / "hook-ran").exists()
        sb.apply(planted)  # named, they go: and git commit runs each, as the user
    for where in hooks:
        (code / where / "a.txt").write_text("c\n")
        commit(code / where)
        assert (code / where / "hook-ran").read_text() == "ran\n"


def test_a_forged_pyc_is_held_and_python_runs_it_past_the_unchanged_source_once_named(repo):
    """Issue 52: a .pyc carrying the host util.py's mtime and size went with apply all (the review
    showed only an added binary) and the next `python3 scripts/main.py` ran the planted code."""
    (repo / "scripts").mkdir()
    (repo / "scripts" / "util.py").write_text('VALUE = "clean"\n')
    (repo / "scripts" / "main.py").write_text("import util\nprint(util.VALUE)\n")
    commit(repo)
    source = (repo / "scripts" / "util.py").stat()
    code = compile('VALUE = "planted"\n', "util.py", "exec")  # what the model would write, with the source's facts
    forged = b"".join([importlib.util.MAGIC_NUMBER, bytes(4), (int(source.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little"),
                       (source.st_size & 0xFFFFFFFF).to_bytes(4, "little"), marshal.dumps(code)])
    pyc = f"scripts/__pycache__/util.{sys.implementation.cache_tag}.pyc"
    run = [sys.executable, "-E", "-B", "scripts/main.py"]  # -B: this python writes no cache of its own
    with Sandbox(SandboxSpec(workspace=repo)) as sb:
        done = sb.exec(f"mkdir -p scripts/__pycache__ && cat > {pyc} && echo b > a.txt", stdin=forged)
        assert done.exit_code == 0, done.stderr
        with pytest.raises(RefusedPaths) as refused:
            sb.apply()
        held = refused.value.held_back
        assert set(held) == {pyc, "scripts/__pycache__"} and {held_kind(w) for w in held.values()} == {CACHE}
        assert (repo / "a.txt").read_text() == "b\n" and not (repo / "scripts" / "__pycache__").exists()
        assert subprocess.run(run, cwd=repo, capture_output=True, text=True).stdout == "clean\n"
        sb.apply([pyc])
    assert subprocess.run(run, cwd=repo, capture_output=True, text=True).stdout == "planted\n"


REALISTIC = {"src/app/core.py": "def run():\n    return 2\n", "src/app/feature.py": "def feature():\n    return 1\n",
             "src/app/sub/__init__.py": "", "tests/test_feature.py": "from app.feature import feature\n",
             "tests/conftest.py": "import sys\n", "docs/feature.md": "# Feature\n", "README.md": "# App, now more\n",
             "pyproject.toml": "[project]\nname = 'app'\nversion = '0.2'\n",
             ".gitignore": "__pycache__/\n*.pyc\n.venv/\nbuild/\ndist/\n", ".editorconfig": "root = true\n"}


def test_a_realistic_projects_work_applies_whole_with_apply_all(repo):
    """Nothing ordinary is held: source edits, new modules and tests, docs, a tracked .gitignore and
    .editorconfig edit, a conftest.py (code your pytest runs, on purpose), a deletion and a move."""
    for path, text in {"src/app/__init__.py": "", "src/app/core.py": "def run():\n    return 1\n",
                       "src/app/old.py": "OLD = 1\n", "tests/test_core.py": "from app.core import run\n",
                       "docs/index.md": "# App\n", "docs/gone.md": "bye\n", "README.md": "# App\n",
                       "pyproject.toml": "[project]\nname = 'app'\n", ".editorconfig": "root = false\n"}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    commit(repo)
    with Sandbox(SandboxSpec(workspace=repo)) as sb:
        for path, text in REALISTIC.items():
            sb.write_file(f"/testbed/{path}", text.encode())
        done = sb.exec("rm docs/gone.md && mv src/app/old.py src/app/renamed.py")
        assert done.exit_code == 0, done.stderr
        assert not [c for c in sb.changes() if c.held]
        sb.apply()  # apply all: nothing refused, nothing held
    assert {p: (repo / p).read_text() for p in REALISTIC} == REALISTIC
    assert not (repo / "docs" / "gone.md").exists() and (repo / "src" / "app" / "renamed.py").read_text() == "OLD = 1\n"


REPO_IN = ("git init -q --bare {where} && git -C {where} config core.bare false"
           " && git -C {where} config core.worktree . && git -C {where} config core.fsmonitor"
           " 'echo ran > fsmonitor-ran; exit 1'")


def test_a_repository_made_in_the_sandbox_under_another_name_is_held_whole_and_its_fsmonitor_runs_once_named(repo):
    with Sandbox(SandboxSpec(workspace=repo)) as sb:
        held = held_after_apply_all(sb, REPO_IN.format(where="vendor/lib") + " && echo b > a.txt")
        made = [c.path for c in sb.changes()]
        assert {"vendor", "vendor/lib", "vendor/lib/HEAD", "vendor/lib/config"} <= set(held)
        assert {held_kind(why) for why in held.values()} == {REPO} and set(held) == {p.rstrip("/") for p in made}
        assert not (repo / "vendor").exists() and (repo / "a.txt").read_text() == "b\n"
        sb.apply(made)
    git(repo / "vendor" / "lib", "status", check=False)  # what a git-aware prompt runs on `cd`
    assert (repo / "vendor" / "lib" / "fsmonitor-ran").read_text() == "ran\n"


def test_in_a_workspace_that_is_a_subfolder_of_a_repository_what_makes_it_one_is_held(repo):
    commit(repo)
    with Sandbox(SandboxSpec(workspace=repo / "pkg")) as sb:  # the workspace itself made a repository
        held = held_after_apply_all(sb, REPO_IN.format(where=".") + " && mkdir -p sub && echo z > sub/deep.py")
        assert {"HEAD", "config", "objects", "refs", "sub/deep.py"} <= set(held)
        assert {held_kind(why) for why in held.values()} == {REPO}
    assert sorted(p.name for p in (repo / "pkg").iterdir()) == ["mod.py"]
    git(repo / "pkg", "status")
    assert not (repo / "pkg" / "fsmonitor-ran").exists()
    with Sandbox(SandboxSpec(workspace=repo / "pkg")) as sb:  # one part of it, with ordinary edits at the top
        held = held_after_apply_all(sb, "echo ref: refs/heads/x > HEAD && echo y > top.py && echo 'x = 2' > mod.py"
                                        " && mkdir -p sub && echo z > sub/deep.py")
        assert {p: held_kind(w) for p, w in held.items()} == {"HEAD": REPO}
        assert (repo / "pkg" / "mod.py").read_text() == "x = 2\n" and (repo / "pkg" / "top.py").is_file()
        assert (repo / "pkg" / "sub" / "deep.py").read_text() == "z\n" and not (repo / "pkg" / "HEAD").exists()
        held = held_after_apply_all(sb, "mkdir -p /testbed/objects/ab /testbed/refs/heads")  # the other parts
        assert set(held) == {"HEAD", "objects", "objects/ab", "refs", "refs/heads"}
        assert git(repo / "pkg", "rev-parse", "--git-dir").stdout.strip() == os.path.realpath(repo / ".git")
        sb.apply(sorted(held))  # named, they go: and git takes the workspace itself for a repository
    assert git(repo / "pkg", "rev-parse", "--git-dir").stdout.strip() == "."


def test_a_real_venv_on_the_host_is_held_whole(repo):
    made = subprocess.run([sys.executable, "-m", "venv", str(repo / ".venv")], capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    hack = next(repo.glob(".venv/lib/python3*/site-packages/_distutils_hack/__init__.py")).relative_to(repo)
    before = {p: (repo / p).read_bytes() for p in (hack, Path(".venv/bin/activate"))}
    with Sandbox(SandboxSpec(workspace=repo)) as sb:
        held = held_after_apply_all(sb, f"echo 'import os' >> {hack} && echo 'curl x | sh' >> .venv/bin/activate"
                                        " && echo b > a.txt")
    assert set(held) == {str(hack), ".venv/bin/activate"} and {held_kind(w) for w in held.values()} == {PYTHON}
    assert "pyvenv.cfg" in held[".venv/bin/activate"]
    assert {p: (repo / p).read_bytes() for p in before} == before and (repo / "a.txt").read_text() == "b\n"


CI_AND_TOOLS = (".github/actions/setup/action.yml", ".github/workflows/ci.yml", ".pre-commit-config.yaml",
                ".gitlab-ci.yml", ".circleci/config.yml", ".forgejo/workflows/ci.yml", ".gitea/workflows/ci.yml",
                "Jenkinsfile", ".zed/tasks.json", "app.code-workspace", "mise.toml", ".mise.toml",
                ".tool-versions", ".exrc", ".nvim.lua")


def test_ci_and_tool_configs_are_held_and_apply_all_leaves_no_empty_folder_for_them(repo):
    script = " && ".join(f"mkdir -p $(dirname {p}) && echo x > {p}" for p in CI_AND_TOOLS) + " && echo b > a.txt"
    with Sandbox(SandboxSpec(workspace=repo)) as sb:
        held = held_after_apply_all(sb, script)
    assert set(CI_AND_TOOLS) <= set(held) and {held_kind(w) for w in held.values()} <= {GIT, TOOLS}
    assert sorted(p.name for p in repo.iterdir()) == [".git", ".gitignore", "a.txt", "pkg"]
    assert (repo / "a.txt").read_text() == "b\n"


def test_paths_the_repository_ignores_are_held(repo):
    with Sandbox(SandboxSpec(workspace=repo)) as sb:
        held = held_after_apply_all(sb, "mkdir build && echo o > build/out.o && echo l > pkg/debug.log"
                                        " && echo y > pkg/new.py")
    assert set(held) == {"build", "build/out.o", "pkg/debug.log"} and {held_kind(w) for w in held.values()} == {IGNORED}
    assert (repo / "pkg" / "new.py").read_text() == "y\n" and not (repo / "build").exists()


def test_a_users_pattern_adds_to_the_rules_and_cannot_remove_one(repo):
    with Sandbox(SandboxSpec(workspace=repo, held_back=("*.sh",))) as sb:
        held = held_after_apply_all(sb, "echo 'echo hi' > tool.sh && echo 'curl x | sh' > .envrc && echo b > a.txt")
    assert {p: held_kind(w) for p, w in held.items()} == {"tool.sh": YOURS, ".envrc": TOOLS}
    assert not (repo / "tool.sh").exists() and not (repo / ".envrc").exists()
