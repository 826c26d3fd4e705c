"""What travels between the driver and the nodes: the rootfs by content hash, a task's files,
an episode's folder.

The rootfs is named by the sha256 of its exported tarball. A node keeps it in its own store as
`ray-<hash>`, imported with the store's safe import (the same as `lis-tui rootfs import`), so the
next run finds it there and nothing moves again.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from isolation.rootfs import RootfsError, RootfsNotFound, RootfsStore
from lis_tui.bench.tasks import Task

CHUNK = 1 << 20


@dataclass(frozen=True)
class RootfsParcel:
    """How a node gets the driver's rootfs."""

    digest: str
    """sha256 of the exported tarball: the rootfs's name on every node."""
    label: str
    """The rootfs's name on the driver, for messages."""
    ref: Any = None
    """The tarball's bytes in Ray's object store, or None when `path` is given."""
    path: str | None = None
    """The tarball on a folder every node sees (--rootfs-dir)."""

    @property
    def name(self) -> str:
        return f"ray-{self.digest[:16]}"


def pack_rootfs(rootfs: str, put: Any, shared: Path | None = None) -> RootfsParcel | None:
    """The parcel for a directory rootfs; None for `host`, which every node has as its own."""
    store = RootfsStore()
    found = store.resolve(rootfs)
    if found.kind == "host":
        return None
    tarball = _export(store, found)
    digest = _sha256(tarball)
    if shared is None:
        return RootfsParcel(digest, found.name, ref=put(tarball.read_bytes()))
    shared.mkdir(parents=True, exist_ok=True)
    target = shared / f"{digest}.tar"
    if not target.exists():
        partial = shared / f".{digest}.tar.{os.getpid()}"
        shutil.copyfile(tarball, partial)
        os.replace(partial, target)
    return RootfsParcel(digest, found.name, path=str(target))


def _export(store: RootfsStore, found: Any) -> Path:
    """The rootfs as a tarball, kept next to the store while the rootfs stays the same."""
    cache = store.root.parent / "ray-exports"
    cache.mkdir(parents=True, exist_ok=True)
    stamp = f"{found.path}|{found.meta.get('created', '')}|{found.meta.get('size', '')}"
    key = hashlib.sha256(stamp.encode()).hexdigest()[:24]
    tarball = cache / f"{key}.tar"
    if not found.meta.get("created") or not tarball.exists():  # a bare directory may change
        store.export(str(found.path), tarball, force=True)
    return tarball


KEEP_COPIES = 3
"""The `ray-<hash>` rootfs copies a node keeps: the one in use and the most recently used others
(a rootfs that changed leaves its old copy behind; a run that alternates two finds both)."""
_IN_USE: list[int] = []
"""Descriptors of the `.ray-<hash>.use` files this process holds shared: a copy a live worker
uses is never removed."""


def unpack_rootfs(parcel: RootfsParcel, get: Any) -> str:
    """The path of the parcel's tree on this node, imported once and kept in this node's store
    (with the KEEP_COPIES - 1 others used last; older copies no worker uses are removed)."""
    store = RootfsStore()
    store.root.mkdir(parents=True, exist_ok=True)
    with _locked(store, parcel.name, fcntl.LOCK_EX) as got:  # two workers on one node import it once
        assert got
        path = _found_or_imported(store, parcel, get)
        use = os.open(store.root / f".{parcel.name}.use", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(use, fcntl.LOCK_SH)  # taken under the import lock: a pruner waits for both
        os.utime(use)  # the copy's last use, for the pruner's order
        _IN_USE.append(use)
    _prune(store)
    return path


def _found_or_imported(store: RootfsStore, parcel: RootfsParcel, get: Any) -> str:
    try:
        found = store.resolve(parcel.name)
        if found.meta.get("sha256") == parcel.digest:
            return str(found.path)
    except RootfsNotFound:
        pass
    with tempfile.TemporaryDirectory(prefix=".ray-in-", dir=store.root) as tmp:
        tarball = Path(parcel.path) if parcel.path else Path(tmp) / "rootfs.tar"
        if not parcel.path:
            tarball.write_bytes(get(parcel.ref))
        found = store.import_tar(parcel.name, tarball, force=True)
    if found.meta.get("sha256") != parcel.digest:
        store.remove(parcel.name)
        raise RootfsError(f"the rootfs {parcel.label!r} arrived changed (sha256 "
                          f"{found.meta.get('sha256')}, not {parcel.digest}). Fix: give "
                          "--rootfs-dir a folder no one else writes, or leave it out")
    return str(found.path)


def _prune(store: RootfsStore) -> None:
    """Remove the `ray-*` copies past the KEEP_COPIES used last, each only if no worker uses it
    and no worker is importing it (both locks taken without waiting, else it is left)."""
    def last_use(name: str) -> float:
        try:
            return os.stat(store.root / f".{name}.use").st_mtime
        except OSError:
            return 0.0
    copies = sorted((r.name for r in store.list() if r.name.startswith("ray-")), key=last_use, reverse=True)
    for name in copies[KEEP_COPIES:]:
        with _locked(store, name, fcntl.LOCK_EX | fcntl.LOCK_NB) as importing_free:
            if not importing_free:
                continue
            use = os.open(store.root / f".{name}.use", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(use, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live worker runs episodes on it
            finally:
                os.close(use)  # (our exclusive lock goes with it; the import lock still holds)
            try:
                store.remove(name)
            except (RootfsError, OSError):
                continue  # removed by another pruner meanwhile, or not ours to remove


@contextlib.contextmanager
def _locked(store: RootfsStore, name: str, how: int) -> Iterator[bool]:
    """The import lock of the copy `name`; yields False when LOCK_NB found it taken."""
    with open(store.root / f".{name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, how)
        except BlockingIOError:
            yield False
            return
        yield True


def pack_task(task: Task) -> tuple[Task, bytes | None]:
    """The task without host folders, and those folders as one tar (None when it has none)."""
    if task.input_dir is None and task.documents_dir is None:
        return task, None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, folder in (("input", task.input_dir), ("documents", task.documents_dir)):
            if folder is not None:
                tar.add(str(folder), arcname=name)
    return replace(task, input_dir=None, documents_dir=None), buffer.getvalue()


def unpack_task(task: Task, folders: bytes | None, into: Path) -> Task:
    """The task with its folders unpacked under `into` (the tar's `data` filter: no links out)."""
    if folders is None:
        return task
    with tarfile.open(fileobj=io.BytesIO(folders)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:  # Pythons before 3.10.12 and 3.11.4 have no filters: plain files and folders only
            tar.extractall(into, members=[m for m in tar.getmembers() if _plain_member(m)])
    found = {name: into / name if (into / name).is_dir() else None for name in ("input", "documents")}
    return replace(task, input_dir=found["input"], documents_dir=found["documents"])


def _plain_member(member: tarfile.TarInfo) -> bool:
    parts = PurePosixPath(member.name).parts
    return (member.isfile() or member.isdir()) and bool(parts) and not member.name.startswith("/") \
        and ".." not in parts


def pack_folder(folder: Path) -> dict[str, bytes]:
    """An episode's folder (trajectory.json, answer.txt, ...) as relative path -> bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def unpack_folder(files: dict[str, bytes], folder: Path) -> None:
    """Write an episode's folder where the driver keeps it, replacing what a cut run left."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, data in files.items():
        parts = PurePosixPath(name).parts
        if not parts or name.startswith("/") or ".." in parts:
            continue  # our workers never send such names; a confused one must not write outside
        target = folder.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
