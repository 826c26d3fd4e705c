"""A workspace is seen at its own absolute path as well as at /testbed (one overlay, one change),
so the project's venv, shebangs and absolute paths work inside; a path the sandbox's system needs
stays /testbed only; and a kept session cannot steer where the second name is made with a link."""
from __future__ import annotations

import io
import os
import secrets
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from isolation import Sandbox, SandboxError, SandboxSpec, layout, sessions
from isolation.spec import project_path
from tools.shell import Shell

pytestmark = pytest.mark.sandbox
SYSTEM_PYTHON = "/usr/bin/python3"  # the host rootfs shows the host's /usr: a venv made from it works inside


def _editable_wheel(src: Path) -> bytes:
    """A wheel that installs `ownpkg` as pip's editable installs do: a .pth naming its source folder
    by absolute path, which resolves inside only where the project is at its own path."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as whl:
        whl.writestr("__editable__.ownpkg-1.0.pth", f"{src}\n")
        info = "ownpkg-1.0.dist-info"
        whl.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: ownpkg\nVersion: 1.0\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")
    return buf.getvalue()


def test_a_projects_own_venv_and_editable_package_work_inside(tmp_path):
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"no {SYSTEM_PYTHON} to make a venv the host rootfs can run")
    project = tmp_path / "project"
    (project / "src" / "ownpkg").mkdir(parents=True)
    (project / ".git").mkdir()
    (project / "src" / "ownpkg" / "__init__.py").write_text("WHERE = __file__\n")
    made = subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(project / ".venv")], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"{SYSTEM_PYTHON} cannot make a venv here: {made.stderr.strip()[-200:]}")
    wheel = tmp_path / "ownpkg-1.0-py3-none-any.whl"
    wheel.write_bytes(_editable_wheel(project / "src"))
    subprocess.run([project / ".venv/bin/pip", "install", "-q", "--no-index", "--no-deps", wheel], check=True,
                   env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    real = os.path.realpath(project)
    with Sandbox(SandboxSpec(workspace=project)) as sb:
        assert sb.spec.places.working == real
        shell = Shell(sb, timeout=60, env={"PYTHONDONTWRITEBYTECODE": "1"})  # starts where the model works
        try:
            assert shell.run("pwd").output.strip() == real
            found = shell.run(".venv/bin/python -c 'import ownpkg; print(ownpkg.WHERE)'")
            assert found.exit_code == 0 and found.output.strip() == f"{real}/src/ownpkg/__init__.py", found
            pip = shell.run(".venv/bin/pip --version")  # its shebang names the venv's python by that path
            assert pip.exit_code == 0 and f"{real}/.venv/lib/" in pip.output, pip
            active = shell.run(". .venv/bin/activate && command -v pip")
            assert active.output.strip() == f"{real}/.venv/bin/pip", active
            # /testbed is the same folder, what is mounted under it too: an edit through either name
            # is one change, and .git is read-only by both
            shell.run(f"echo one > /testbed/made.txt && echo two >> {real}/made.txt")
            assert "Read-only file system" in shell.run(f"touch {real}/.git/hooks-planted").output
        finally:
            shell.close()
        assert sb.read_file(f"{real}/made.txt") == sb.read_file("/testbed/made.txt") == b"one\ntwo\n"
        assert [c.path for c in sb.changes()] == ["made.txt"]


@pytest.mark.parametrize("path, own", [
    ("/home/someone/project", True), ("/tmp/project", True), ("/root/project", True),
    ("/usr/local/src/project", True), ("/etc/nixos", True),
    ("/", False), ("/usr", False), ("/tmp", False), ("/root", False), ("/etc", False), ("/usr/local", False),
    ("/usr/lib", False), ("/proc/sys/kernel", False), ("/testbed/sub", False), ("/agent/output", False),
    ("/tmp/lis", False), ("/run/lis-tui/bin", False),
])
def test_a_path_the_sandboxs_system_or_our_folders_need_stays_testbed_only(path, own):
    spec = SandboxSpec(workspace=path)
    if os.path.realpath(path) != path:
        pytest.skip(f"{path} is a link on this host")
    assert project_path(spec) == (path if own else None)
    assert spec.places.working == (path if own else "/testbed")


def test_a_kept_session_cannot_steer_the_projects_path_with_a_link(debian_rootfs, tmp_path, monkeypatch):
    """The second name's folders are kept in a session's layers (a directory rootfs's upper): one
    replaced by a link (to /etc, where a walk that followed it would make the rest and bind the
    project) is refused at the next start, by name; and were that check missed, the first zygote,
    which walks there without following a link, refuses it too."""
    monkeypatch.setenv("LIS_SESSIONS", str(tmp_path / "sessions"))
    # beside the cached rootfs, in the user's home: not /tmp, which is fresh at every start
    project = Path(debian_rootfs.rootfs.path).parents[2] / f"ownpath-{secrets.token_hex(4)}"
    if str(project).startswith("/tmp/"):
        pytest.skip("the test cache is under /tmp (LIS_TEST_CACHE), which no session keeps")
    project.mkdir()
    try:
        (project / "a.txt").write_text("a\n")
        spec = SandboxSpec(rootfs=str(debian_rootfs.rootfs.path), workspace=project, session="own-path")
        # a folder the sandbox made on the way (/root/.cache/lis-tui-test, /home/lis-ci/.cache)
        victim = "/" + "/".join(str(project).strip("/").split("/")[:3])
        with Sandbox(spec) as sb:
            planted = sb.exec(f"cat {project}/a.txt && mv {victim} {victim}.moved && ln -s /etc {victim} && "
                              f"readlink {victim}")
            assert planted.stdout == "a\n/etc\n", planted
        with pytest.raises(SandboxError) as refused:
            Sandbox(spec).start()
        assert f"put a link or a file at {victim}, on the way to the project's own path {project}" in \
            str(refused.value) and "start a new session" in str(refused.value)
        monkeypatch.setattr(layout, "_own_path_is_clear", lambda *args: None)
        with Sandbox(spec) as sb, pytest.raises(SandboxError):
            sb.exec("true")
    finally:
        sessions.remove("own-path")
        shutil.rmtree(project)
