"""The system prompt's `{environment_note}`: what this sandbox's rootfs offers, in a few sentences,
so the model does not spend steps finding out that apt is missing or numpy is already there."""
from __future__ import annotations

import logging

from isolation import SandboxError
from isolation.rootfs.facts import RootfsFacts, rootfs_facts

log = logging.getLogger(__name__)


def environment_note(rootfs: str) -> str:
    """The note for the rootfs a SandboxSpec names; '' when it cannot be read (the sandbox's own
    start then says why)."""
    try:
        facts = rootfs_facts(rootfs)
    except (OSError, SandboxError, LookupError) as exc:
        log.info("no environment note for rootfs %r: %s", rootfs, exc)
        return ""
    return describe(facts, host=rootfs == "host")


def describe(facts: RootfsFacts, host: bool) -> str:
    """The note's words for `facts`; `host`: the host's own system, read-only, as the rootfs."""
    system = facts.system or "Linux"
    parts = [f"What is installed: {system}" + (" (the user's own system, read-only)." if host else
                                                 "; you are root.")]
    if facts.python:
        have = f"Python {facts.python}" + (" with pip" if facts.pip else " without pip")
        have += f"; already installed: {', '.join(facts.packages)}." if facts.packages else "."
        parts.append(have)
    if facts.python and facts.pip:
        where = "they go to /root/.local, or into a venv you make" if host else "system-wide"
        uv = ", and so does `uv pip install X`" if facts.uv else ""
        parts.append(f"`pip install X` and `python3 -m pip install X` work ({where}){uv}.")
    if host:
        parts.append("There is no apt here: system packages cannot be installed, so do not try apt-get.")
        if facts.node:
            parts.append("`npm install -g` installs into /root/.local.")
    elif facts.apt:
        missing = [] if facts.python else ["python3", "python3-pip"]
        missing += ["python3-pip"] if facts.python and not facts.pip else []
        parts.append("System packages install with `apt-get update && apt-get install -y X`"
                     + (f" (Python is not there yet: `apt-get install -y {' '.join(missing)}`)." if missing else "."))
    else:
        parts.append("There is no apt: use what is installed.")
    if not facts.python:
        parts.insert(1, "No Python is installed.")
    return " ".join(parts)
