"""Which of the sandbox's limits a command most likely met, and how to change it: one line for the model.

The kernel says only ENOSPC, ENOMEM, EAGAIN or SIGXFSZ; the command's own words (as its tools
print them) and its exit status tell which limit of the sandbox's (isolation.spec.Limits) that was.
"""
from __future__ import annotations

import signal

from isolation.spec import Limits, tmpfs_sizes


def _size(n: int | None) -> str:
    return "no cap" if not n else f"{n / (1 << 30):g} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def limit_note(exit_code: int | None, output: str, limits: Limits) -> str:
    """A note naming the limit the command met and how to change it, or "" when none shows."""
    if exit_code == 128 + signal.SIGXFSZ or "File size limit exceeded" in output:
        return (f"A file reached the sandbox's largest file size ({_size(limits.file_size)}, Limits.file_size); "
                "write smaller pieces.")
    if "No space left on device" in output:
        memory = ", ".join(f"{path} {_size(n)}" for path, n in tmpfs_sizes(limits, host_root=True).items())
        return (f"A file system is full. In memory, each with a size: {memory}; put big files under /testbed "
                "(on disk), or ask the user to raise tmp_size in [sandbox] of the config.")
    if any(word in output for word in ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")):
        return (f"A process may use {_size(limits.memory)} of memory in this sandbox; use less, or ask the user "
                "to run with a larger --memory (memory in [sandbox] of the config).")
    if "fork: " in output and "Resource temporarily unavailable" in output or "can't start new thread" in output:
        return (f"The sandbox may hold {limits.processes} processes and threads at once (Limits.processes); "
                "end some before starting more.")
    if "Too many open files" in output:
        return f"A process may hold {limits.open_files} open files here (Limits.open_files); close some."
    return ""
