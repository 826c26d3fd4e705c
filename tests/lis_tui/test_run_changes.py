"""Headless work is never lost: `lis-tui run --workspace` saves a patch `git apply` takes, and
`lis-tui apply RUN [PATH...]` applies it later under the review's rules (real bwrap, real git)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, call, reply, submit

pytestmark = pytest.mark.sandbox

REPO = Path(__file__).resolve().parents[2]
# The tree as {path: what}, .git left out: run inside the sandbox over /testbed and here over the project.
TREE = r"""
import hashlib, json, os, sys
root, found = sys.argv[1], {}
for top, dirs, files in os.walk(root):
    if ".git" in dirs:
        dirs.remove(".git")
    for name in dirs + files:
        path = os.path.join(top, name)
        rel, st = os.path.relpath(path, root), os.lstat(path)
        if os.path.islink(path):
            found[rel] = "link -> " + os.readlink(path)
        elif os.path.isdir(path):
            found[rel] = "dir"
        else:
            with open(path, "rb") as f:
                found[rel] = "file %s %s" % ("x" if st.st_mode & 0o100 else "-", hashlib.sha256(f.read()).hexdigest())
print(json.dumps(found, sort_keys=True))
"""
WORK = ("cd /testbed && printf 'one\\nTWO\\nthree\\nfour\\n' > notes.txt && rm old.txt "
        "&& head -c 4096 /dev/urandom > blob.bin && printf '\\000\\001\\377' >> logo.png "
        "&& printf '#!/bin/sh\\necho built\\n' > build.sh && chmod +x build.sh "
        "&& mkdir -p src/pkg && echo 'x = 1' > src/pkg/mod.py && ln -s notes.txt latest")
HELD = {"build.sh", "latest"}


def bash(command: str):
    return call("execute_bash", {"command": command})


def tree(root: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", TREE, str(root)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def env_for(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LIS_MODEL")}
    env.update(PYTHONPATH=str(REPO), XDG_CONFIG_HOME=str(tmp_path / "xdg"), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_DATA_HOME=str(tmp_path / "data"))
    return env


def lis(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lis_tui.cli", *args], cwd=cwd or tmp_path, env=env_for(tmp_path),
                          capture_output=True, text=True, timeout=300)


def git(where: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=where,
                          capture_output=True, text=True, check=True)


def make_project(where: Path) -> Path:
    where.mkdir(parents=True)
    (where / "notes.txt").write_text("one\ntwo\nthree\n")
    (where / "old.txt").write_text("bye\n")
    (where / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)))
    git(where, "init", "-q")
    git(where, "add", ".")
    git(where, "commit", "-qm", "start")
    return where


def run_in(tmp_path: Path, project: Path, *flags: str, work: str = WORK) -> tuple[subprocess.CompletedProcess, dict]:
    """A headless run whose scripted model does `work` in the workspace; also the sandbox's tree then."""
    seen: list[str] = []

    def keep_tree(request):
        seen.append(request.tool_outputs[-1])
        return submit()

    script = [reply("working", [bash(work)]), reply("looking", [bash(f"python3 -c '{TREE}' /testbed")]), keep_tree]
    with FakeOpenAI(script) as server:
        done = lis(tmp_path, "run", "--base-url", server.base_url, "--model", "m", "--rootfs", "host",
                   "--workspace", str(project), *flags, "edit the project")
    assert done.returncode == 0, done.stderr
    return done, json.loads(seen[0])


def run_dir(done: subprocess.CompletedProcess) -> Path:
    line = next(line for line in done.stderr.splitlines() if "changes.patch" in line)
    return Path(line.split("saved in ", 1)[1].split("; apply", 1)[0]).parent


def test_a_workspace_run_saves_a_patch_and_lis_tui_apply_reproduces_the_sandboxs_tree(tmp_path):
    project = make_project(tmp_path / "project")
    before = tree(project)
    done, inside = run_in(tmp_path, project)
    run = run_dir(done)
    assert (f"7 files changed (2 held back): saved in {run}/changes.patch; apply with `lis-tui apply {run}`"
            in done.stderr.splitlines())
    assert tree(project) == before  # nothing on the host until asked
    assert not run.is_relative_to(project) and run.parent == tmp_path / "data" / "lis-tui" / "runs"

    copy = tmp_path / "copy"
    shutil.copytree(project, copy, symlinks=True)
    checked = subprocess.run(["git", "apply", "--check", str(run / "changes.patch")], cwd=copy,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr

    applied = lis(tmp_path, "apply", run.name.rsplit("-", 1)[1])
    assert applied.returncode == 0, applied.stderr
    assert "applied 5 changes" in applied.stderr and "held back 2" in applied.stderr
    assert "a new executable file" in applied.stderr and "a symlink made in the sandbox, -> notes.txt" in applied.stderr
    assert tree(project) == {k: v for k, v in inside.items() if k not in HELD}

    named = lis(tmp_path, "apply", str(run), *sorted(HELD))
    assert named.returncode == 0, named.stderr
    assert tree(project) == inside  # binary, modes, the link, the deletion: exactly the sandbox's

    again = lis(tmp_path, "apply", str(run))  # twice: what is true is that it is in, not that the project changed
    assert (again.returncode, again.stderr.splitlines()) == (0, [
        f"already applied: {project} has blob.bin, logo.png, notes.txt, old.txt, src/pkg/mod.py as the run left "
        "them; nothing written"]), again.stderr  # and the held-back ones, named before, are no longer said to wait
    assert tree(project) == inside
    assert all(line.endswith("(already applied)") for line in lis(tmp_path, "apply", str(run), "--list").stdout.splitlines())


def test_a_file_changed_in_the_project_since_the_run_is_named_and_nothing_is_written(tmp_path):
    project = make_project(tmp_path / "project")
    done, inside = run_in(tmp_path, project, work=WORK + " && head -c 9000000 /dev/urandom > big.bin")
    run = run_dir(done)
    # A large file is kept beside the patch, not base85 in it, and said with its size.
    assert "too large for the patch: big.bin (8.6 MiB)" in done.stderr, done.stderr
    assert b"big.bin" not in (run / "changes.patch").read_bytes()
    listed = lis(tmp_path, "apply", str(run), "--list").stdout
    assert "added     big.bin  (8.6 MiB, kept beside the patch in blobs/, not in it)" in listed, listed
    (project / "logo.png").write_bytes(b"changed by the person")
    (project / "notes.txt").write_text("ONE\ntwo\nthree\n")
    before = tree(project)
    refused = lis(tmp_path, "apply", str(run))
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "logo.png" in refused.stderr and "nothing was applied" in refused.stderr
    assert "Fix: look at logo.png, then apply the others by name, with --3way to merge notes.txt" in refused.stderr
    alone = lis(tmp_path, "apply", str(run), "notes.txt")
    assert f"Fix: `lis-tui apply {run} --3way notes.txt` merges notes.txt with the project's edits" in alone.stderr
    assert tree(project) == before
    # git's 3-way apply: the same lines changed on both sides, so git's conflict markers, said by name
    merged = lis(tmp_path, "apply", str(run), "notes.txt", "old.txt", "big.bin", "--3way")
    assert merged.returncode == 1 and "merged with conflicts: notes.txt" in merged.stderr, merged.stderr
    assert (project / "notes.txt").read_text() == ("<<<<<<< ours\nONE\ntwo\n=======\none\nTWO\n>>>>>>> theirs\n"
                                                   "three\nfour\n")
    assert "old.txt" not in tree(project) and tree(project)["big.bin"] == inside["big.bin"]


def test_bad_input_is_one_line_with_the_fix_and_writes_nothing(tmp_path):
    project = make_project(tmp_path / "project")
    done, _ = run_in(tmp_path, project)
    run = run_dir(done)
    before = tree(project)
    cases = [(["apply", str(project)], 2, "is not a run folder"),
             (["apply", str(run), "nothere.txt"], 2, "the run did not change nothere.txt"),
             (["apply", "zzzzzz"], 2, "no run 'zzzzzz'")]
    patch = run / "changes.patch"
    for args, code, says in cases:
        got = lis(tmp_path, *args)
        assert (got.returncode, len(got.stderr.splitlines())) == (code, 1) and says in got.stderr, (args, got.stderr)
    saved = patch.read_bytes()
    patch.write_bytes(saved.replace(b"TWO", b"TW0"))
    got = lis(tmp_path, "apply", str(run))
    assert got.returncode == 1 and "not the patch the run saved" in got.stderr and "git apply" in got.stderr
    patch.unlink()
    got = lis(tmp_path, "apply", str(run))
    assert got.returncode == 1 and "changes.patch is missing" in got.stderr
    assert tree(project) == before


def test_run_apply_applies_at_the_end_and_keeps_the_held_back_for_naming(tmp_path):
    project = make_project(tmp_path / "project")
    done, inside = run_in(tmp_path, project, "--apply")
    (line,) = [line for line in done.stderr.splitlines() if "changes.patch" in line]  # one thing said, not "apply with" first
    run = line.split("saved in ", 1)[1].split("/changes.patch", 1)[0]
    assert line.startswith(f"7 files changed (2 held back), saved in {run}/changes.patch: applied 5 changes to "
                           f"{project}; held back 2, applied only by name (lis-tui apply {run} PATH): build.sh (a new "
                           "executable file), latest (a symlink"), line
    assert tree(project) == {k: v for k, v in inside.items() if k not in HELD}


def test_a_saved_move_of_an_executable_or_a_link_is_held_whole_and_naming_its_new_path_takes_both(tmp_path):
    from isolation import Sandbox, SandboxSpec
    from lis_tui.runs.changes import apply_run, save_changes

    project = make_project(tmp_path / "project")
    (project / "tool.sh").write_text("#!/bin/sh\n")
    (project / "tool.sh").chmod(0o755)
    (project / "latest").symlink_to("notes.txt")
    (tmp_path / "run").mkdir()
    with Sandbox(SandboxSpec(rootfs="host", workspace=str(project))) as sb:
        assert sb.exec("mkdir bin && mv tool.sh latest bin/ && echo four >> notes.txt").exit_code == 0
        saved = save_changes(sb, tmp_path / "run")
    assert saved.held["tool.sh"].startswith("link or exec bit: the other half of a move to bin/tool.sh")
    assert saved.held["latest"].startswith("link or exec bit: the other half of a move to bin/latest")
    assert apply_run(tmp_path / "run", None, project=project).applied == ["notes.txt"]
    assert (project / "tool.sh").is_file() and os.readlink(project / "latest") == "notes.txt"
    assert apply_run(tmp_path / "run", ["bin/tool.sh"], project=project).applied == ["bin/tool.sh", "tool.sh"]
    assert apply_run(tmp_path / "run", ["latest"], project=project).applied == ["latest"]  # the deletion alone: no held-back link
    assert not os.path.lexists(project / "latest") and sorted(os.listdir(project / "bin")) == ["tool.sh"]


def test_a_workspace_in_a_subfolder_of_a_repository_is_patched_where_it_is(tmp_path):
    """A plain `git apply` run in a repository's subfolder skips every path (exit 0, no word)."""
    repo = make_project(tmp_path / "repo")
    sub = repo / "app"
    sub.mkdir()
    (sub / "main.py").write_text("print('a')\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "app")
    done, inside = run_in(tmp_path, sub, work="cd /testbed && echo \"print('b')\" > main.py && echo new > more.txt "
                                              "&& echo ref: refs/heads/main > HEAD")
    # At the top of a workspace inside a repository, what git's discovery reads there (HEAD, and
    # objects/ and refs/) is held back; an ordinary edit at the top goes (it was held too).
    applied = lis(tmp_path, "apply", str(run_dir(done)))
    assert "applied 2 changes" in applied.stderr and "held back 1" in applied.stderr, applied.stderr
    assert "HEAD (nested repository: at the top of a workspace inside the repository" in applied.stderr
    assert tree(sub) == {k: v for k, v in inside.items() if k != "HEAD"}
    assert (sub / "main.py").read_text() == "print('b')\n"


def test_runs_live_outside_the_project_and_are_all_listed_with_their_folder(tmp_path):
    """`run` in a project used to copy /testbed/output (a conftest.py and a test) into ./lis-output,
    which the project's own pytest then collected and ran."""
    project = tmp_path / "project"
    project.mkdir()
    planted = ("mkdir -p /testbed/output && printf 'import os\\nos.system(\"touch /tmp/pwned\")\\n' "
               "> /testbed/output/conftest.py && printf 'def test_x():\\n    pass\\n' > /testbed/output/test_x.py "
               "&& echo 1 > /testbed/output/answer.txt")
    elsewhere = tmp_path / "kept" / "mine"
    for extra in ([], ["--output-dir", str(elsewhere)]):
        with FakeOpenAI([reply("planting", [bash(planted)]), submit()]) as server:
            done = lis(tmp_path, "run", "--base-url", server.base_url, "--model", "m", "--rootfs", "host", *extra,
                       "a task", cwd=project)
        assert done.returncode == 0, done.stderr
    assert list(project.iterdir()) == []  # nothing written into the folder it was started in
    collected = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q"],
                               cwd=project, capture_output=True, text=True, timeout=120)
    assert collected.returncode == 5 and "no tests" in collected.stdout + collected.stderr  # 5: none collected

    listed = [json.loads(line) for line in lis(tmp_path, "runs", "--json", cwd=tmp_path).stdout.splitlines()]
    assert sorted(Path(run["path"]).parent for run in listed) == sorted([tmp_path / "data" / "lis-tui" / "runs",
                                                                         tmp_path / "kept"])
    table = lis(tmp_path, "runs", cwd=tmp_path).stdout
    assert "FOLDER" in table and str(tmp_path / "kept") in table


COMMITS = ("cd /testbed && G='git -c safe.directory=* -c user.name=m -c user.email=m@x' "
           "&& echo more >> notes.txt && $G commit -qam 'model: one' && echo again >> notes.txt "
           "&& $G commit -qam 'model: two' && $G tag planted "
           "&& printf '#!/bin/sh\\ntouch /tmp/pwned-hook\\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout "
           "&& $G config core.fsmonitor 'touch /tmp/pwned-fsmonitor'")


def refs(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)").stdout.splitlines()


def test_commits_made_inside_come_home_as_one_branch_and_nothing_else(tmp_path):
    project = make_project(tmp_path / "project")
    before_refs, config = refs(project), (project / ".git" / "config").read_text()
    done, _ = run_in(tmp_path, project, "--git-writable", work=COMMITS)
    run = run_dir(done)
    assert f"2 new commits saved in {run}/commits.bundle" in done.stderr, done.stderr
    # The commits' change to notes.txt is in the work tree, so in changes.patch too: said, take one
    both = "the commits and {} hold the same changes to notes.txt: take one or the other"
    assert both.format("changes.patch") in done.stderr, done.stderr
    assert done.stderr.count(".git/") == 1  # one note for the repository's folder, not an item per file
    listed = lis(tmp_path, "apply", str(run), "--list")
    assert f"2 commits  lis-tui/{run.name}  ({both.format('the patch')}" in listed.stdout, listed.stdout
    assert ".git" not in listed.stdout

    fetched = lis(tmp_path, "apply", str(run), "--commits")
    assert fetched.returncode == 0 and f"branch lis-tui/{run.name}" in fetched.stderr, fetched.stderr
    assert "you took the commits" in fetched.stderr and "do not apply the patch too" in fetched.stderr
    log = git(project, "log", "--format=%s", f"lis-tui/{run.name}").stdout.split("\n")
    assert log[:3] == ["model: two", "model: one", "start"]
    new = [line for line in refs(project) if line not in before_refs]
    assert [line.split()[0] for line in new] == [f"refs/heads/lis-tui/{run.name}"]  # no tag, no other ref
    assert (project / ".git" / "config").read_text() == config
    assert not (project / ".git" / "hooks" / "post-checkout").exists()
    assert (project / "notes.txt").read_text() == "one\ntwo\nthree\n"  # the work tree is the patch's business

    fetched_refs = refs(project)
    again = lis(tmp_path, "apply", str(run), "--commits")
    assert again.returncode == 1 and len(again.stderr.splitlines()) == 1 and "already exists" in again.stderr
    plain = tmp_path / "plain"
    shutil.copytree(project, plain, ignore=shutil.ignore_patterns(".git"))
    elsewhere = lis(tmp_path, "apply", str(run), "--commits", "--workspace", str(plain))
    assert elsewhere.returncode == 1 and "is not a git repository" in elsewhere.stderr, elsewhere.stderr
    assert not (plain / ".git").exists() and refs(project) == fetched_refs

    patched = lis(tmp_path, "apply", str(run), "notes.txt")  # both taken: what the note says is so
    assert "the run's commits hold the same changes to notes.txt: you took the patch" in patched.stderr
    merged = subprocess.run(["git", "merge", "--ff-only", f"lis-tui/{run.name}"], cwd=project, capture_output=True,
                            text=True)
    assert merged.returncode != 0 and "notes.txt" in merged.stderr, merged.stderr
    record = json.loads((run / "changes.json").read_text())
    record["commits"]["count"] = 1
    (run / "changes.json").write_text(json.dumps(record))
    assert f"1 commit  lis-tui/{run.name}" in lis(tmp_path, "apply", str(run), "--list").stdout  # was "1 commits"
