"""A directory rootfs under an overlay: uid 0 installs things, the stored rootfs never changes."""
from __future__ import annotations

import io
import os
import zipfile

import pytest

from isolation import Sandbox, SandboxSpec, sessions

pytestmark = pytest.mark.sandbox


@pytest.fixture
def spec(debian_rootfs):
    return SandboxSpec(rootfs=str(debian_rootfs.rootfs.path))


def _tree_bytes(path) -> int:
    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(path) for f in fs)


def test_a_fresh_upper_is_empty_until_the_sandbox_writes(spec):
    with Sandbox(spec) as sb:
        assert sb.exec("cat /etc/debian_version").exit_code == 0
        upper = sb.writable / "upper"
        assert _tree_bytes(upper) == 0
        sb.exec("echo hi > /etc/motd-lis")
        assert _tree_bytes(upper) > 0


def test_apt_installs_a_package_as_uid_0_and_the_store_is_untouched(spec, debian_rootfs):
    stored = debian_rootfs.rootfs.path
    script = r"""
        set -e
        mkdir -p /tmp/pkg/DEBIAN /tmp/pkg/usr/bin
        printf 'Package: lis-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: test\n' \
            > /tmp/pkg/DEBIAN/control
        printf '#!/bin/sh\necho hello from a package\n' > /tmp/pkg/usr/bin/lis-hello
        chmod 755 /tmp/pkg/usr/bin/lis-hello
        dpkg-deb --build /tmp/pkg /tmp/lis-hello.deb >/dev/null
        apt-get install -y /tmp/lis-hello.deb >/dev/null 2>&1 || apt-get install -y /tmp/lis-hello.deb
        lis-hello
        dpkg -s lis-hello | grep Status
    """
    with Sandbox(spec) as sb:
        r = sb.exec(script, timeout=120)
        assert r.exit_code == 0, r.stdout + r.stderr
        assert "hello from a package" in r.stdout and "install ok installed" in r.stdout
    assert not (stored / "usr/bin/lis-hello").exists()


def _wheel() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as whl:
        whl.writestr("lishello/__init__.py", "GREETING = 'hello from pip'\n")
        whl.writestr("lishello-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: lishello\nVersion: 1.0\n")
        whl.writestr("lishello-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                     "Tag: py3-none-any\n")
        whl.writestr("lishello-1.0.dist-info/RECORD", "")
    return buf.getvalue()


def test_pip_installs_system_wide_as_uid_0(spec):
    with Sandbox(spec) as sb:
        sb.write_file("/tmp/lishello-1.0-py3-none-any.whl", _wheel())
        r = sb.exec("pip install --no-index --break-system-packages /tmp/lishello-1.0-py3-none-any.whl && "
                    "cd / && python3 -c 'import lishello; print(lishello.GREETING, lishello.__file__)'", timeout=120)
        assert r.exit_code == 0, r.stdout + r.stderr
        assert "hello from pip /usr/local/lib/" in r.stdout


def test_two_sandboxes_on_one_rootfs_never_see_each_others_writes(spec, debian_rootfs):
    with Sandbox(spec) as one, Sandbox(spec) as two:
        one.exec("echo one > /etc/lis-mine && rm /etc/debian_version")
        assert two.exec("cat /etc/lis-mine").exit_code != 0
        assert two.exec("cat /etc/debian_version").exit_code == 0
    assert (debian_rootfs.rootfs.path / "etc/debian_version").exists()


def test_a_session_keeps_what_was_installed(spec, tmp_path, monkeypatch):
    monkeypatch.setenv("LIS_SESSIONS", str(tmp_path / "sessions"))
    kept = SandboxSpec(rootfs=spec.rootfs, session="dir-rootfs")
    with Sandbox(kept) as sb:
        sb.exec("printf '#!/bin/sh\\necho tool\\n' > /usr/local/bin/lis-tool && chmod +x /usr/local/bin/lis-tool")
    with Sandbox(kept) as sb:
        assert sb.exec("lis-tool").stdout == "tool\n"
    sessions.remove("dir-rootfs")  # overlayfs leaves work/work mode 000, which pytest cannot remove
    assert not (tmp_path / "sessions" / "dir-rootfs").exists()
