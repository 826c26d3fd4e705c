"""Rootless sandboxes: bubblewrap namespaces over a read-only root, no daemon, no root."""
from .inroot import NotARegularFile
from .sandbox import Sandbox
from .spec import ExecResult, Limits, SandboxError, SandboxSpec

__all__ = ["Sandbox", "SandboxSpec", "Limits", "ExecResult", "SandboxError", "NotARegularFile"]
