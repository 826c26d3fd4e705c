"""Rootless sandboxes: bubblewrap namespaces over a read-only root, no daemon, no root.

Packages by concern: sandbox/ (the `Sandbox` users hold, its concerns one module each),
limits/ (what a sandbox may use of the host), host/ (host-side work on trees a sandbox made),
changes/ (what comes back from a workspace), spawn/ (commands started inside), net/ (the egress
proxy), rootfs/ (the store of root filesystems); beside them spec, layout, bwrap, idmap, output,
records, sessions, session_layers, doctor, extras.

May import: the standard library, and an optional extra's library only where its feature is
used. Never tools, lis_tui, textual or openai: this package works alone.
"""
from .spec import ExecResult, Limits, SandboxError, SandboxSpec

__all__ = ["Sandbox", "SandboxSpec", "Limits", "ExecResult", "SandboxError", "NotARegularFile", "warm_up"]
_LAZY = {"Sandbox": "sandbox", "NotARegularFile": "host.inroot"}
"""Loaded when first asked for: `from isolation import SandboxSpec` (a CLI's flags, the app's
first screen) does not pay for the sandbox's own imports (about 80 ms of CPU)."""


def warm_up() -> None:
    """Do now what this process's first sandbox start would do first: set up its cgroup subtree
    and start the spawn helper, whose own interpreter's start (about 10 ms) then overlaps the
    caller's work until that start (`lis-tui exec` importing the sandbox and reading its config)."""
    import contextlib  # noqa: PLC0415 (the package's top stays light: see _LAZY)

    from . import spawn  # noqa: PLC0415
    from .limits import cgroup  # noqa: PLC0415

    cgroup.delegation()  # first: the helper must start in the subtree (cgroup.establish)
    with contextlib.suppress(OSError):  # a process limit, say: the start meets it again and says so
        spawn.start_helper()


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module  # noqa: PLC0415

        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
