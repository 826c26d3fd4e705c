"""Errors of the rootfs store; each message says how to fix what went wrong."""
from __future__ import annotations

from ..spec import SandboxError


class RootfsError(SandboxError):
    """A rootfs could not be built, imported, pulled, found or removed."""


class RootfsNotFound(RootfsError, LookupError):
    """No rootfs of that name exists."""


class RootfsExists(RootfsError):
    """A rootfs (or file) of that name exists and `force` was not given."""


class UnsafeArchive(RootfsError):
    """A tarball member would land outside the target or write through a link."""
