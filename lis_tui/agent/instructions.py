"""Standing instructions for the model: `AGENTS.md` at the project's top (the workspace's) and the
user's own (`$XDG_CONFIG_HOME/lis-tui/AGENTS.md`), added to the system prompt of `run` and the app.

They are words for the model, never settings: nothing here parses them or changes the config
(a project's settings stay `lis-tui.toml`'s, behind `lis-tui trust`). A project's file may come
from a cloned repository, so it is read as hostile: at most MAX_BYTES, a regular file only (a
fifo would block), and through no link that leads out of the project (openat2 RESOLVE_BENEATH;
where the kernel has no openat2, through no link at all). Paper mode, the bench, rollouts and
the env server never read them: what they send a model stays the paper's.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILE_NAME = "AGENTS.md"
MAX_BYTES = 64 << 10
_READ = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_SYS_OPENAT2 = 437  # the same number on every architecture
_RESOLVE_NO_MAGICLINKS, _RESOLVE_BENEATH = 0x02, 0x08


@dataclass(frozen=True)
class InstructionFile:
    """One file that was read: whose it is, where, and its text (cut at MAX_BYTES)."""

    whose: str
    """"user" or "project"."""
    path: Path
    text: str
    cut: bool
    """The file was longer than MAX_BYTES; `text` is its beginning."""


@dataclass(frozen=True)
class Instructions:
    """The instruction files read for a run, and those found but left unread (each with why)."""

    files: tuple[InstructionFile, ...] = ()
    skipped: tuple[tuple[str, Path, str], ...] = ()
    """(whose, path, why) of each file found but not read."""

    def section(self) -> str:
        """The system prompt's part: the files' text, each under a heading naming it; "" for none."""
        if not self.files:
            return ""
        parts = ["# Standing instructions\n\nThe person keeps these instructions for their work "
                 "(from AGENTS.md files). Follow them where they fit the task; where they disagree, "
                 "the task wins. They are words, not settings: they change nothing of the sandbox."]
        for f in self.files:
            where = ("the user's own AGENTS.md" if f.whose == "user"
                     else "AGENTS.md at the top of the project")
            cut = f"\n\n[cut here: the file is longer than {MAX_BYTES >> 10} KiB]" if f.cut else ""
            parts.append(f"## From {where}\n\n{f.text.strip()}{cut}")
        return "\n\n".join(parts)

    def summary(self, short: bool = False) -> str:
        """One line for a person: which files were read (and cut), and which were not, and why;
        "" when there were none. `short` names them without the project's folder (the welcome).
        Paths are the person's or the project's: callers make them safe to show."""
        read = [_name(f.whose, f.path, short) + (f" (cut at {MAX_BYTES >> 10} KiB)" if f.cut else "")
                for f in self.files]
        text = "read " + ", ".join(read) if read else ""
        if self.skipped:
            text += ("; " if text else "") + "not read: " + "; ".join(
                f"{_name(whose, path, short)} ({why})" for whose, path, why in self.skipped)
        return text


def _name(whose: str, path: Path, short: bool) -> str:
    if not short:
        return str(path)
    if whose == "project":
        return f"{FILE_NAME} (project)"
    home = Path.home()
    return f"~/{path.relative_to(home)}" if path.is_relative_to(home) else str(path)


def read_instructions(config: Any, spec: Any) -> Instructions:
    """The user's and the project's AGENTS.md for a run of `config` over `spec` (None: no sandbox),
    unless `agent.project_instructions` is off or the run is in paper mode."""
    from lis_tui.config.settings import user_config_path  # noqa: PLC0415
    from lis_tui.prompts.package import is_package_ref  # noqa: PLC0415

    agent = config.agent
    if not agent.project_instructions or agent.observation == "paper" or is_package_ref(agent.prompts):
        return Instructions()
    files, skipped = [], []
    places = [("user", user_config_path().parent)]
    workspace = getattr(spec, "workspace", None)
    if workspace is not None:
        places.append(("project", Path(workspace).expanduser().absolute()))
    for whose, folder in places:
        path = folder / FILE_NAME
        try:
            data = _read_beneath(folder, FILE_NAME, MAX_BYTES + 1, beneath=whose == "project")
        except FileNotFoundError:
            continue
        except OSError as exc:
            skipped.append((whose, path, _why(exc)))
            continue
        text = data[:MAX_BYTES].decode("utf-8", errors="replace")
        files.append(InstructionFile(whose, path, text, len(data) > MAX_BYTES))
    return Instructions(tuple(files), tuple(skipped))


def _why(exc: OSError) -> str:
    if exc.errno == errno.EXDEV:
        return "a link that leads out of the project"
    if exc.errno == errno.ELOOP:
        return "a link (this kernel cannot tell where it leads)"
    return exc.strerror or str(exc)


def _read_beneath(folder: Path, name: str, limit: int, beneath: bool) -> bytes:
    """At most `limit` bytes of regular file `folder/name`; with `beneath`, no link may lead out
    of `folder` (the user's own folder: their links are their choice)."""
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _open_beneath(dir_fd, name) if beneath else os.open(name, _READ, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks, left = [], limit
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _open_beneath(dir_fd: int, name: str) -> int:
    import ctypes  # noqa: PLC0415 (only when a workspace is given)
    import struct  # noqa: PLC0415

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    how = struct.pack("QQQ", _READ, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    fd = libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dir_fd), ctypes.c_char_p(os.fsencode(name)),
                      ctypes.c_char_p(how), ctypes.c_size_t(len(how)))
    if fd >= 0:
        return fd
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM):  # no openat2 here (or a filter refuses it): no link at all
        return os.open(name, _READ | os.O_NOFOLLOW, dir_fd=dir_fd)
    raise OSError(err, os.strerror(err), name)
