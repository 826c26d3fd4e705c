"""What a rootfs offers a program inside it: apt or not, which Python, pip, uv, node, and the
well-known Python packages already installed. Read from the tree on the host side (a few dozen
directory lookups, no process started) and remembered per rootfs, so sandbox start pays nothing.

The tree is untrusted (an imported tarball may hold `usr/lib -> /home/you`): every lookup goes
through SafeRoot, which never follows a link out of it.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import UnsafeArchive
from .safe import SafeRoot

NOTABLE = {"numpy": "numpy", "scipy": "scipy", "pandas": "pandas", "sympy": "sympy",
           "matplotlib": "matplotlib", "sklearn": "scikit-learn", "torch": "torch", "mpmath": "mpmath",
           "networkx": "networkx", "PIL": "pillow", "requests": "requests", "IPython": "ipython",
           "bs4": "beautifulsoup4", "lxml": "lxml", "yaml": "pyyaml", "chardet": "chardet"}
"""Import name -> package name, for the packages a task most often wants."""
_VERSIONED = re.compile(r"python(3\.\d+)")
# The tree's os-release goes into the system prompt and onto screens: control and bidi characters
# (an escape sequence, a fake line of instructions) are dropped, and only its head is read.
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
OS_RELEASE_LIMIT = 64 << 10


@dataclass(frozen=True)
class RootfsFacts:
    """What a rootfs offers."""

    system: str
    """The distribution's PRETTY_NAME from /etc/os-release, or ''."""
    apt: bool
    """apt-get and a dpkg database: `apt-get install` can work (never in `host`)."""
    python: str | None
    """The version of `python3` on PATH ('3.12'), or None."""
    pip: bool
    """pip is installed for that Python."""
    uv: bool
    """A `uv` binary is on PATH."""
    node: bool
    """node and npm are on PATH."""
    packages: tuple[str, ...]
    """Well-known Python packages found installed, by package name."""


def rootfs_facts(name: str) -> RootfsFacts:
    """The facts of the rootfs a SandboxSpec names ('host', a store name or a directory)."""
    if name == "host":
        return _cached(Path("/"), True, 0)
    path = Path(name) if os.path.isabs(name) else _store_path(name)
    return _cached(path, False, _stamp(path))


def read_facts(root: Path, host: bool = False) -> RootfsFacts:
    """Read the facts from the tree at `root` (uncached). `host`: the host's own system, where
    apt is answered by a shim, so it does not count."""
    with SafeRoot(root) as safe:
        python = _python_version(safe)
        dirs = _package_dirs(python)
        found = set().union(*(_names(safe, d) for d in dirs)) if dirs else set()
        system = _pretty_name(safe)
        return RootfsFacts(
            system=system,
            apt=not host and safe.lexists(("usr", "bin", "apt-get")) and safe.lexists(("var", "lib", "dpkg", "status")),
            python=python, pip="pip" in found, uv=_on_path(safe, "uv"),
            node=_on_path(safe, "node") and _on_path(safe, "npm"),
            packages=tuple(sorted(NOTABLE[name] for name in found if name in NOTABLE)))


@functools.lru_cache(maxsize=32)
def _cached(root: Path, host: bool, stamp: int) -> RootfsFacts:
    return read_facts(root, host)


def _store_path(name: str) -> Path:
    from . import RootfsStore  # noqa: PLC0415

    return RootfsStore().resolve(name).path


def _stamp(path: Path) -> int:
    """Changes when the tree is replaced (a rebuild under the same name renames a new one in)."""
    try:
        info = path.stat()
    except OSError:
        return 0
    return info.st_ino ^ info.st_mtime_ns


def _python_version(safe: SafeRoot) -> str | None:
    """'3.12' for the first python3 on PATH: from its link's name, else the newest stdlib beside it."""
    for prefix in (("usr", "local"), ("usr",)):  # PATH order
        if not safe.lexists((*prefix, "bin", "python3")):
            continue
        match = _VERSIONED.search(_readlink(safe, (*prefix, "bin", "python3")) or "")
        if match:
            return match.group(1)
        versions = _versions(safe, (*prefix, "lib"))
        return max(versions, key=lambda v: int(v.split(".")[1])) if versions else "3"
    return None


def _versions(safe: SafeRoot, parts: tuple[str, ...]) -> list[str]:
    return [m.group(1) for name in _names(safe, parts) if (m := _VERSIONED.fullmatch(name))
            and safe.lexists((*parts, name, "os.py"))]


def _package_dirs(python: str | None) -> list[tuple[str, ...]]:
    if python is None:
        return []
    return [("usr", "lib", "python3", "dist-packages"), ("usr", "lib", f"python{python}", "site-packages"),
            ("usr", "lib", f"python{python}", "dist-packages"),
            ("usr", "local", "lib", f"python{python}", "dist-packages"),
            ("usr", "local", "lib", f"python{python}", "site-packages")]


def _names(safe: SafeRoot, parts: tuple[str, ...]) -> set[str]:
    """The entries of a directory (module files as their module name); empty when it is missing."""
    try:
        fd = safe.open_dir(parts)
    except (OSError, UnsafeArchive):
        return set()
    try:
        return {name[:-3] if name.endswith(".py") else name for name in os.listdir(fd)}
    finally:
        os.close(fd)


def _readlink(safe: SafeRoot, parts: tuple[str, ...]) -> str | None:
    try:
        fd = safe.open_dir(parts[:-1])
    except (OSError, UnsafeArchive):
        return None
    try:
        return os.readlink(parts[-1], dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def _on_path(safe: SafeRoot, tool: str) -> bool:
    return any(safe.lexists((*d, tool)) for d in (("usr", "local", "bin"), ("usr", "bin"), ("bin",)))


def _pretty_name(safe: SafeRoot) -> str:
    for parts in (("etc", "os-release"), ("usr", "lib", "os-release")):
        data = safe.read_file(parts, OS_RELEASE_LIMIT)
        if data:
            match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', data.decode(errors="replace"), re.M)
            if match:
                return _UNSHOWN.sub("", match.group(1))[:80].strip()
    return ""
