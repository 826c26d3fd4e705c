"""How to install one of lis-tui's optional extras, as a command that works here.

lis-tui is on no package index, so `pip install 'lis-tui[paper]'` finds nothing, and a system pip
refuses by PEP 668. The command names the Python that runs lis-tui (its venv's pip is allowed)
and where lis-tui was installed from: the checkout (`pip install -e 'CHECKOUT[paper]'`, which reads
pyproject's extras as they are now), else the extra's own packages by name."""
from __future__ import annotations

import json
import shlex
import sys
import urllib.parse
from importlib import metadata


def install_hint(extra: str) -> str:
    """A shell command that installs `extra` (paper, mcp, tls, ...) into this lis-tui's Python."""
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    try:
        dist = metadata.distribution("lis-tui")
    except metadata.PackageNotFoundError:  # run from a checkout on PYTHONPATH
        return f"{pip} -e '.[{extra}]' (in the lis-tui checkout; or ./install.sh --dev)"
    source = json.loads(dist.read_text("direct_url.json") or "{}")
    url = source.get("url", "")
    if url.startswith("file://") and "dir_info" in source:
        where = urllib.parse.unquote(url[len("file://"):])
        editable = "-e " if source["dir_info"].get("editable") else ""
        return f"{pip} {editable}{shlex.quote(f'{where}[{extra}]')}"
    marker = f'extra == "{extra}"'
    wanted = [r.split(";")[0].strip() for r in dist.requires or [] if marker in r]
    return f"{pip} {' '.join(shlex.quote(r) for r in wanted)}" if wanted else f"{pip} 'lis-tui[{extra}]'"
