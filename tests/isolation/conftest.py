"""Fixtures for isolation tests: a real Debian rootfs, built once and cached, and an empty store.

`debian_rootfs` builds Debian bookworm (the `minimal` preset) with real mmdebstrap the first time
and reuses it afterwards from a per-user cache: $LIS_TEST_CACHE/rootfs-uidN, else
~/.cache/lis-tui-test/rootfs-uidN (~ from the password database, so root and an unprivileged user
running the same checkout never share one). Delete that directory to force a fresh build.
"""
from __future__ import annotations

import fcntl
import os
import pwd
import tempfile
import urllib.request
from pathlib import Path
from typing import NamedTuple

import pytest

from isolation.rootfs import Rootfs, RootfsStore
from isolation.rootfs.build import packages_for

DEBIAN_MIRROR = os.environ.get("LIS_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
DEBIAN_SUITE = "bookworm"
DEBIAN_NAME = "debian-bookworm-minimal"


class DebianRootfs(NamedTuple):
    """A store holding a built Debian rootfs, and its name (`SandboxSpec(rootfs=...)` needs both)."""

    store: RootfsStore
    name: str

    @property
    def rootfs(self) -> Rootfs:
        return self.store.resolve(self.name)


def test_cache_dir() -> Path:
    """The per-user directory where the cached Debian store lives."""
    base = os.environ.get("LIS_TEST_CACHE")
    path = Path(base) if base else Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "lis-tui-test"
    try:
        (path / f"rootfs-uid{os.getuid()}").mkdir(parents=True, exist_ok=True)
    except OSError:  # no writable home: fall back to a directory of our own under /tmp
        path = Path(tempfile.gettempdir()) / f"lis-tui-test-{os.getuid()}"
        (path / f"rootfs-uid{os.getuid()}").mkdir(parents=True, exist_ok=True)
        if path.stat().st_uid != os.getuid():
            pytest.fail(f"{path} belongs to someone else; set LIS_TEST_CACHE")
    return path / f"rootfs-uid{os.getuid()}"


test_cache_dir.__test__ = False  # a helper, not a test


@pytest.fixture(scope="session")
def debian_rootfs() -> DebianRootfs:
    """Debian bookworm, minimal preset, built with mmdebstrap once and then cached."""
    cache = test_cache_dir()
    store = RootfsStore(cache / "store")
    with open(cache / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel workers wait for one build
        if not _cached_ok(store):
            _require_mirror()
            store.build(DEBIAN_NAME, suite=DEBIAN_SUITE, mirror=DEBIAN_MIRROR, preset="minimal", force=True)
    return DebianRootfs(store, DEBIAN_NAME)


def _cached_ok(store: RootfsStore) -> bool:
    """Whether the cached build is there and was made the way this code would make it now."""
    try:
        meta = store.resolve(DEBIAN_NAME).meta
    except LookupError:
        return False
    build = meta.get("build") or {}
    return (meta.get("format") == 1 and build.get("suite") == DEBIAN_SUITE
            and build.get("requested") == packages_for("minimal", ()))


def _require_mirror() -> None:
    url = f"{DEBIAN_MIRROR}/dists/{DEBIAN_SUITE}/Release"
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=15).close()
    except OSError as exc:
        pytest.skip(f"the Debian mirror is unreachable ({url}: {exc}); set LIS_TEST_DEBIAN_MIRROR")


@pytest.fixture(scope="session")
def debian_mirror() -> str:
    """The Debian mirror tests build from ($LIS_TEST_DEBIAN_MIRROR, else deb.debian.org)."""
    return DEBIAN_MIRROR


@pytest.fixture
def store(tmp_path) -> RootfsStore:
    """An empty store of this test's own."""
    return RootfsStore(tmp_path / "store")
