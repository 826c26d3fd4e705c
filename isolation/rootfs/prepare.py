"""Make an unpacked tree fit for a single-uid sandbox, and read what is installed in it.

Inside a sandbox only uid 0 exists (it is the invoking user), so apt must not drop to `_apt`,
and pip should install system-wide as the paper's Docker image lets it. The tree is untrusted:
everything goes through SafeRoot, so a planted `etc -> /etc` cannot send a write to the host.
"""
from __future__ import annotations

from .errors import RootfsError
from .safe import SafeRoot

APT_CONF = ("etc", "apt", "apt.conf.d", "99lis-tui-sandbox")
PIP_CONF = ("etc", "pip.conf")
_APT_TEXT = b"""// Written by lis-tui: inside a sandbox only uid 0 exists, so apt must not switch to _apt.
APT::Sandbox::User "root";
"""
_PIP_TEXT = b"""# Written by lis-tui: the sandbox is disposable, so pip installs system-wide as root.
[global]
break-system-packages = true
root-user-action = ignore
"""
_SHELLS = (("bin", "sh"), ("usr", "bin", "sh"))


def prepare(root: SafeRoot, label: str) -> list[str]:
    """Check the tree is a root filesystem and adjust it; returns what was changed."""
    if not any(root.lexists(shell) for shell in _SHELLS):
        raise RootfsError(f"{label} has no /bin/sh, so it is not a root filesystem a sandbox can run. "
                          "Fix: import a whole system (docker export, an ubuntu-base tarball)")
    changes = []
    if root.lexists(APT_CONF[:2]):
        root.write_file(APT_CONF, _APT_TEXT)
        changes.append("/" + "/".join(APT_CONF))
    if not root.lexists(PIP_CONF):
        root.write_file(PIP_CONF, _PIP_TEXT)
        changes.append("/" + "/".join(PIP_CONF))
    root.make_dir(("testbed",))
    changes.append("/testbed")
    return changes


def installed_packages(root: SafeRoot) -> dict[str, str] | None:
    """Package name -> version from dpkg's status file; None where there is no dpkg."""
    data = root.read_file(("var", "lib", "dpkg", "status"))
    if data is None:
        return None
    packages = {}
    for stanza in data.decode(errors="replace").split("\n\n"):
        fields = dict(_fields(stanza))
        if fields.get("Status", "").endswith(" installed") and "Package" in fields:
            packages[fields["Package"]] = fields.get("Version", "")
    return dict(sorted(packages.items()))


def _fields(stanza: str):
    for line in stanza.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith((" ", "\t")):
            yield key, value.strip()
