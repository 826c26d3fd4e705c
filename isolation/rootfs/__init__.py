"""The rootfs store: named root filesystems that sandboxes lay under their overlay.

Layout: ROOT/NAME/root/ is the tree, ROOT/NAME/meta.json says where it came from, ROOT/DEFAULT
names the default. New trees are made in ROOT/.tmp-NAME-PID-* and renamed into place only when
complete, so Ctrl-C, a failed download or a corrupt tarball never leave a half rootfs under a
real name; leftovers of killed processes are swept by the next write.

May import: isolation.spec, isolation.host (trees written through descriptors).

What makes a rootfs (build, pull, tar, prepare) is imported by the method that needs it: a sandbox
of the host rootfs, which asks the store at most for its default, loads none of it (nor the HTTP
client and tarfile they bring).
"""
from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from .errors import RootfsError, RootfsExists, RootfsNotFound, UnsafeArchive
from .safe import SafeRoot, process_alive, remove_tree, tree_size

if TYPE_CHECKING:
    from .tar import ExtractStats

__all__ = ["RootfsStore", "Rootfs", "RootfsError", "RootfsNotFound", "RootfsExists", "UnsafeArchive",
           "HOST", "PRESETS", "DEFAULT_BASE_URL", "default_store_root"]

HOST = "host"
Progress = Callable[[str], None]
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_LEFTOVER = re.compile(r"\.(?:tmp|trash)-.+-(\d+)-[^-]+")
_HOW_TO_MAKE = ("Fix: lis-tui rootfs build NAME (Ubuntu 24.04; for Debian add --suite bookworm "
                "--mirror http://deb.debian.org/debian), lis-tui rootfs pull ubuntu:24.04, "
                "or lis-tui rootfs import NAME FILE.tar")
_LAZY = {"PRESETS": "build", "DEFAULT_BASE_URL": "pull"}
"""Names of the store's makers this package gives, loaded when first asked for (see above)."""


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module  # noqa: PLC0415

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Rootfs:
    """One root filesystem a sandbox can use."""

    name: str
    path: Path | None
    """The tree to lay under the overlay; None for `host`, which binds the host's own dirs."""
    kind: str
    """`host` or `dir`."""
    meta: dict = field(default_factory=dict, compare=False)
    """What meta.json says: source, created, size, sha256, packages, ..."""

    @property
    def size(self) -> int | None:
        return self.meta.get("size")

    @property
    def source(self) -> str:
        return self.meta.get("source", "")

    @property
    def created(self) -> str:
        return self.meta.get("created", "")


def default_store_root() -> Path:
    """$LIS_DATA_HOME/rootfs, else $XDG_DATA_HOME/lis-tui/rootfs, else ~/.local/share/lis-tui/rootfs."""
    if os.environ.get("LIS_DATA_HOME"):
        return Path(os.environ["LIS_DATA_HOME"]) / "rootfs"
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(data) / "lis-tui" / "rootfs"


def check_name(name: str) -> str:
    """A store name: letters, digits and . _ + -, not starting with a dot or dash; not 'host'."""
    if name == HOST or not _NAME.fullmatch(name or ""):
        raise RootfsError(f"{name!r} cannot name a rootfs. Fix: use up to 64 letters, digits, '.', '_', "
                          "'+' or '-', starting with a letter or digit (and not 'host', which is built in)")
    return name


class RootfsStore:
    """Named root filesystems under one directory."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_store_root()

    # -- reading ---------------------------------------------------------------------------
    def resolve(self, name: str | None = None) -> Rootfs:
        """The rootfs called `name` (the default if None); an absolute directory path is taken as is."""
        name = name or self.get_default()
        if name == HOST:
            return Rootfs(HOST, None, "host", {"source": "the host's own system, read-only"})
        if os.path.isabs(name):
            if not os.path.isdir(name):
                raise RootfsNotFound(f"rootfs {name!r} is not a directory. {_HOW_TO_MAKE}")
            return Rootfs(name, Path(name), "dir", {"source": "a directory"})
        entry = self.root / name
        if not _NAME.fullmatch(name) or not (entry / "root").is_dir():
            known = ", ".join(r.name for r in self.list())
            raise RootfsNotFound(f"no rootfs named {name!r} (have: {known}; store: {self.root}). {_HOW_TO_MAKE}")
        return Rootfs(name, entry / "root", "dir", _read_meta(entry))

    def list(self) -> list[Rootfs]:
        """`host` first, then the stored ones by name."""
        names = sorted(p.name for p in _children(self.root) if _NAME.fullmatch(p.name) and (p / "root").is_dir())
        return [self.resolve(HOST)] + [self.resolve(name) for name in names]

    def get_default(self) -> str:
        """The name `resolve(None)` uses: what was set with set_default if it still exists, else host."""
        name = _read_text(self.root / "DEFAULT")
        try:
            return self.resolve(name).name if name else HOST
        except RootfsNotFound:  # removed behind our back: the host always works
            return HOST

    def default(self) -> str:
        """The same as get_default (both spellings are in use by callers)."""
        return self.get_default()

    # -- changing --------------------------------------------------------------------------
    def set_default(self, name: str) -> Rootfs:
        """Make `name` the default; it must exist."""
        found = self.resolve(name)
        self.root.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.root / "DEFAULT", found.name + "\n")
        return found

    def remove(self, name: str) -> None:
        """Delete a stored rootfs; if it was the default, `host` becomes the default."""
        if name == HOST:
            raise RootfsError("'host' is built in and cannot be removed")
        self.resolve(check_name(name))
        trash = self._side_path("trash", name)
        os.rename(self.root / name, trash)
        remove_tree(trash)
        if _read_text(self.root / "DEFAULT") == name:
            (self.root / "DEFAULT").unlink()

    def export(self, name: str, file: Path | str, force: bool = False) -> Path:
        """Write a stored rootfs to a tarball (.tar, .tar.gz, .tar.xz, .tar.bz2, .tar.zst by suffix)."""
        found = self.resolve(name)
        if found.kind == HOST:
            raise RootfsError("'host' is the host's own system; there is nothing to export. "
                              "Fix: export a stored rootfs (lis-tui rootfs list)")
        file = Path(file)
        if os.path.lexists(file) and not force:
            raise RootfsExists(f"{file} exists. Fix: choose another file name, or pass --force to overwrite it")
        from .tar import write_archive  # noqa: PLC0415 (the store's writers load when used)

        write_archive(found.path, file)
        return file

    def import_tar(self, name: str, file: Path | str, force: bool = False, progress: Progress | None = None) -> Rootfs:
        """Unpack a tarball (.tar, .tar.gz, .tar.xz, .tar.bz2, .tar.zst) as rootfs `name`."""
        file = Path(file)
        if not file.is_file():
            raise RootfsError(f"{file} is not a file. Fix: give the path of a tarball")
        with self._stage(name, force) as staging:
            _say(progress, f"unpacking {file}")
            stats = _unpack(file, staging, str(file))
            self._finish(staging, {"source": f"import {file.resolve()}", "sha256": _sha256(file)}, stats)
        return self.resolve(name)

    def build(self, name: str, suite: str = "noble", mirror: str | None = None, include: Iterable[str] = (),
              preset: str = "minimal", force: bool = False, progress: Progress | None = None,
              slim: bool = True) -> Rootfs:
        """Build `name` with rootless mmdebstrap from `suite` (Ubuntu noble by default)."""
        from .build import is_ubuntu, mmdebstrap_argv, packages_for, run_mmdebstrap  # noqa: PLC0415

        include = tuple(include)
        packages = packages_for(preset, include)
        argv = mmdebstrap_argv(suite, mirror, packages, slim)
        with self._stage(name, force) as staging:
            (staging / "root").mkdir()
            stats, digest = run_mmdebstrap(argv, staging / "root", progress, ubuntu_keys=is_ubuntu(suite, mirror))
            build = {"suite": suite, "mirror": mirror, "preset": preset, "include": list(include),
                     "requested": packages, "slim": slim}
            source = f"mmdebstrap {suite} {mirror or '(default mirror)'} preset={preset}"
            self._finish(staging, {"source": source, "sha256": digest, "build": build}, stats)
        return self.resolve(name)

    def pull(self, ref: str = "ubuntu:24.04", name: str | None = None, base_url: str | None = None,
             force: bool = False, progress: Progress | None = None, arch: str | None = None) -> Rootfs:
        """Download the official ubuntu-base tarball for `ref` (from `base_url`, else Ubuntu's
        cdimage, pull.DEFAULT_BASE_URL), check its sha256 and import it."""
        from .pull import DEFAULT_BASE_URL, download, find_image, machine_arch, parse_ref  # noqa: PLC0415

        base_url = base_url or DEFAULT_BASE_URL
        version = parse_ref(ref)
        name = name or f"ubuntu-{version}"
        self._check_free(check_name(name), force)
        image = find_image(version, base_url, arch or machine_arch())
        with self._stage(name, force) as staging:
            _say(progress, f"downloading {image.url}")
            tarball = staging / "download.tar.gz"
            digest = download(image, tarball, progress)
            _say(progress, "checksum ok; unpacking")
            stats = _unpack(tarball, staging, image.url)
            tarball.unlink()
            self._finish(staging, {"source": f"pull {ref} {image.url}", "sha256": digest}, stats)
        return self.resolve(name)

    # -- staging ---------------------------------------------------------------------------
    @contextmanager
    def _stage(self, name: str, force: bool) -> Iterator[Path]:
        """A fresh directory in the store that becomes ROOT/NAME if the block finishes."""
        self._check_free(check_name(name), force)
        self.root.mkdir(parents=True, exist_ok=True)
        self._sweep()
        import tempfile  # noqa: PLC0415 (only the store's writers stage)

        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-{os.getpid()}-", dir=self.root))
        try:
            yield staging
            self._commit(staging, name, force)
        finally:
            remove_tree(staging)

    def _check_free(self, name: str, force: bool) -> None:
        if not force and os.path.lexists(self.root / name):
            raise RootfsExists(f"a rootfs named {name!r} exists. Fix: choose another name, "
                               f"or pass --force to replace it (or lis-tui rootfs rm {name})")

    def _finish(self, staging: Path, meta: dict, stats: ExtractStats) -> None:
        from datetime import datetime, timezone  # noqa: PLC0415

        from .prepare import installed_packages, prepare  # noqa: PLC0415

        root = staging / "root"
        with SafeRoot(root) as safe:
            changes = prepare(safe, meta["source"])
            packages = installed_packages(safe)
        meta.update(kind="dir", created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    size=tree_size(root), packages=packages, changes=changes, entries=stats.entries,
                    skipped=stats.skipped[:50], skipped_count=len(stats.skipped), format=1)
        (staging / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")

    def _commit(self, staging: Path, name: str, force: bool) -> None:
        target = self.root / name
        trash = None
        if os.path.lexists(target):
            self._check_free(name, force)  # someone else made it meanwhile
            trash = self._side_path("trash", name)
            os.rename(target, trash)
        try:
            os.rename(staging, target)
        except OSError as exc:
            if trash:
                os.rename(trash, target)
            raise RootfsError(f"could not move the new rootfs into {target}: {exc.strerror}") from None
        if trash:
            remove_tree(trash)

    def _side_path(self, kind: str, name: str) -> Path:
        import secrets  # noqa: PLC0415 (only the store's writers rename aside)

        return self.root / f".{kind}-{name}-{os.getpid()}-{secrets.token_hex(4)}"

    def _sweep(self) -> None:
        """Remove staging and trash left by processes that were killed."""
        for path in _children(self.root):
            match = _LEFTOVER.fullmatch(path.name)
            if match and not process_alive(int(match.group(1))):
                remove_tree(path)


def _unpack(file: Path, staging: Path, label: str) -> ExtractStats:
    from .tar import extract, open_archive  # noqa: PLC0415

    (staging / "root").mkdir()
    with open_archive(file) as stream:
        return extract(stream, staging / "root", label)


def _say(progress: Progress | None, line: str) -> None:
    if progress:
        progress(line)


def _sha256(file: Path) -> str:
    import hashlib  # noqa: PLC0415 (its OpenSSL load, only when a tarball is checked)

    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _children(root: Path) -> list[Path]:
    try:
        return list(root.iterdir())
    except FileNotFoundError:
        return []


def _read_meta(entry: Path) -> dict:
    try:
        return json.loads((entry / "meta.json").read_text())
    except (OSError, ValueError):
        return {}


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _write_atomic(path: Path, text: str) -> None:
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text)
    os.replace(partial, path)
