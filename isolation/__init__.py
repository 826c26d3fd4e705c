"""Rootless sandboxes: bubblewrap namespaces over a read-only root, no daemon, no root."""
from .spec import ExecResult, Limits, SandboxError, SandboxSpec

__all__ = ["Sandbox", "SandboxSpec", "Limits", "ExecResult", "SandboxError", "NotARegularFile"]
_LAZY = {"Sandbox": "sandbox", "NotARegularFile": "inroot"}
"""Loaded when first asked for: `from isolation import SandboxSpec` (a CLI's flags, the app's
first screen) does not pay for the sandbox's own imports (about 80 ms of CPU)."""


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module  # noqa: PLC0415

        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
