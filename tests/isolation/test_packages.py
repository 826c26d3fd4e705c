"""The model installs what a task needs: pip in every rootfs, through the proxy, from a loopback index
(a wheel built here, served over HTTP on 127.0.0.2); in `host`, into the sandbox's own /root."""
from __future__ import annotations

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
