"""The model installs what a task needs: pip in every rootfs, through the proxy, from a loopback index
(a wheel built here, served over HTTP on 127.0.0.2); in `host`, into the sandbox's own /root."""
from __future__ import annotations

import os
import shutil

import pytest

from isolation import Sandbox, SandboxSpec

from netfixtures import HOST, StaticServer, make_pip_index

pytestmark = pytest.mark.sandbox

PKG = "lispipdemo"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("pypi")
    make_pip_index(root, PKG)
    server = StaticServer(root)
    yield server
    server.close()


def _online(rootfs: str, index: StaticServer) -> Sandbox:
    return Sandbox(SandboxSpec(rootfs=rootfs, network="on", allow_hosts=(index.hostport,)))


def _pip(index: StaticServer, pip: str = "pip") -> str:
    return (f"{pip} install -q --no-cache-dir --disable-pip-version-check --index-url {index.url}/simple/ "
            f"--trusted-host {HOST} {PKG}")


def _rootfs(request) -> str:
    return "host" if request.param == "host" else str(request.getfixturevalue("debian_rootfs").rootfs.path)


@pytest.fixture(params=["host", "debian"])
def rootfs(request) -> str:
    return _rootfs(request)


@pytest.mark.parametrize("pip", ["pip", "python3 -m pip"])
def test_pip_install_then_import(rootfs, index, pip):
    with _online(rootfs, index) as sb:
        r = sb.exec(_pip(index, pip), timeout=120)
        assert r.exit_code == 0, r.stdout + r.stderr
        r = sb.exec(f"python3 -c 'import {PKG}; print({PKG}.VALUE, {PKG}.__file__)'")
    assert r.exit_code == 0, r.stderr
    value, where = r.stdout.split()
    assert value == "42"
    if rootfs == "host":  # the host's /usr is read-only: the package went to the sandbox's own /root
        assert where.startswith("/root/.local/lib/python3"), where


def test_host_pip_in_a_venv_is_not_forced_to_a_user_install(index):
    with _online("host", index) as sb:
        r = sb.exec(f"python3 -m venv /tmp/v && {_pip(index, '/tmp/v/bin/pip')} && "
                    f"/tmp/v/bin/python -c 'import {PKG}; print({PKG}.__file__)'", timeout=120)
    assert r.exit_code == 0 and r.stdout.startswith("/tmp/v/lib/"), r.stdout + r.stderr


def test_host_apt_names_the_fix_and_npm_installs_under_root():
    with Sandbox() as sb:
        apt = sb.exec("apt-get install -y curl")
        apt2 = sb.exec("apt update")
        npm = sb.exec("command -v npm >/dev/null && npm config get prefix || echo /root/.local")
        path = sb.exec("echo $PATH").stdout
    assert apt.exit_code == 100 and apt.stdout == ""
    assert apt.stderr.count("\n") == 1 and "lis-tui rootfs build ubuntu --preset paper" in apt.stderr
    assert apt2.exit_code == 100 and apt2.stderr.startswith("apt: ")
    assert npm.stdout.strip() == "/root/.local", npm.stderr
    assert path.startswith("/root/.local/bin:")


def test_directory_rootfs_keeps_its_own_apt_and_path(debian_rootfs):
    with Sandbox(SandboxSpec(rootfs=str(debian_rootfs.rootfs.path))) as sb:
        r = sb.exec("command -v apt-get; echo $PATH; env")
    assert r.stdout.splitlines()[0] == "/usr/bin/apt-get"
    assert "/root/.local" not in r.stdout and "PIP_" not in r.stdout


# -- uv in the host rootfs: a shim sends `uv pip install` outside a venv to /root/.local ----------

def _uv_binary() -> str | None:
    import shutil  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    beside = Path(sys.executable).parent / "uv"  # `pip install uv` into the test's venv puts it here
    return str(beside) if beside.is_file() else shutil.which("uv")


def test_host_uv_shim_exists_only_where_the_host_has_uv(tmp_path, monkeypatch):
    from isolation import layout  # noqa: PLC0415

    fake = tmp_path / "uv"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setattr(layout, "HOST_UV", (str(tmp_path / "missing"), str(fake)))
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    shims = layout._apt_shims(tmp_path / "with")  # noqa: SLF001
    assert f"real={fake}" in (shims / "uv").read_text() and os.access(shims / "uv", os.X_OK)
    monkeypatch.setattr(layout, "HOST_UV", (str(tmp_path / "missing"),))
    assert not (layout._apt_shims(tmp_path / "without") / "uv").exists()  # noqa: SLF001


def test_host_uv_pip_install_lands_in_root_local_and_venvs_keep_theirs(index, tmp_path):
    """The shim as the host rootfs writes it, around a real uv (from the test's venv, given to the
    sandbox as input: the host rootfs shows only the host's /usr)."""
    from isolation.layout import uv_shim  # noqa: PLC0415

    uv = _uv_binary()
    if uv is None:
        pytest.skip("no uv binary: pip install uv into the test venv")
    (tmp_path / "in").mkdir()
    shutil.copy(uv, tmp_path / "in" / "uv")
    spec = SandboxSpec(rootfs="host", network="on", allow_hosts=(index.hostport,), input_dir=str(tmp_path / "in"))
    pkg = f"--index-url {index.url}/simple/ {PKG}"
    where = f"python3 -c 'import {PKG}; print({PKG}.__file__)'"
    with Sandbox(spec) as sb:
        sb.write_file("/tmp/bin/uv", uv_shim("/testbed/input/uv").encode(), mode=0o755)
        bare = sb.exec(f"/testbed/input/uv pip install {pkg}", timeout=120)
        plain = sb.exec(f"/tmp/bin/uv pip install {pkg} && {where}", timeout=120)
        venv = sb.exec(f"cd /tmp && /tmp/bin/uv venv -q v && VIRTUAL_ENV=/tmp/v /tmp/bin/uv pip install {pkg} && "
                       f"/tmp/v/bin/python -c 'import {PKG}; print({PKG}.__file__)'", timeout=120)
        gone = sb.exec(f"/tmp/bin/uv pip uninstall {PKG} && {where}", timeout=120)
    assert bare.exit_code != 0 and "No virtual environment found" in bare.stderr  # what the shim is for
    assert plain.exit_code == 0 and plain.stdout.startswith("/root/.local/lib/python3"), plain
    assert venv.exit_code == 0 and venv.stdout.startswith("/tmp/v/lib/"), venv
    assert gone.exit_code != 0 and "No module named" in gone.stderr, gone
