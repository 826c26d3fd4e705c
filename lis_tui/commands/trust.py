"""`lis-tui trust`: say yes to a folder's lis-tui.toml (or take the yes back, or list them)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

WHY = """\
Why: lis-tui reads ./lis-tui.toml from the folder it starts in, and a sandbox over that folder can
write one: applying the sandbox's changes (the review screen, MCP's apply_changes) puts it on the
host. Read blindly, it could send your API key to a server of the sandbox's choosing (base_url,
api_key_env, [network.credentials]) or widen the next sandbox (network.mode = "on",
nested_userns, disk = "none"). So a folder's file is used only after you have read it and run
`lis-tui trust DIR`, which records its real path and the sha256 of its bytes under
$XDG_STATE_HOME/lis-tui/trusted.json. A new file, one changed since, or the same file in another
folder is ignored whole, with one line on stderr naming it and this command. Your own
~/.config/lis-tui/config.toml needs no trust. A parent folder's lis-tui.toml is never read.
(direnv allow, VS Code's workspace trust and git's safe.directory work the same way.)"""


def add_parsers(sub) -> None:
    p = sub.add_parser("trust", help="use a folder's lis-tui.toml (it may come from a sandbox)",
                       description="Trust DIR/lis-tui.toml as it is now: lis-tui reads it from then on, "
                                   "until its bytes change or it moves.",
                       epilog=WHY, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", nargs="?", default=".", metavar="DIR",
                   help="the folder whose lis-tui.toml to trust (default: this one)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--revoke", action="store_true", help="stop trusting DIR's lis-tui.toml")
    what.add_argument("--list", action="store_true", help="list the trusted files and whether each is unchanged")
    p.set_defaults(func=cmd_trust)


def cmd_trust(args: argparse.Namespace) -> int:
    from lis_tui.config import trust  # noqa: PLC0415
    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    given = Path(args.dir)
    if given.name == trust.PROJECT_FILE and not given.is_dir():  # `lis-tui trust ./lis-tui.toml`
        given = given.parent
    directory = Path(os.path.realpath(given))  # what is recorded, and what messages name
    if args.list:
        lines = _listing(trust)
    elif args.revoke:
        real = trust.revoke(directory)
        lines = [f"no longer trusted: {real}" if real else
                 f"{os.path.join(os.path.realpath(directory), trust.PROJECT_FILE)} was not trusted"]
    else:
        lines = _trust(trust, directory)
    for line in lines:
        print(safe_terminal_text(line))
    return 0


def _trust(trust, directory: Path) -> list[str]:
    from lis_tui.config.settings import file_settings  # noqa: PLC0415

    before = trust.check(directory)
    read: list = []  # a file lis-tui could not use is not trusted: its error is shown instead
    found = trust.trust(directory, validate=lambda f: read.append(file_settings(f.path, f.text)))
    settings = read[0]
    store = trust.store_path()
    if before is not None and before.trusted:
        head = [f"already trusted: {found.real}", f"  sha256 {found.sha256}"]
    else:
        head = [f"trusted: {found.real}", f"  sha256 {found.sha256}", f"  recorded in {store}"]
    sets = [f"  {key} = {_value(settings, key)}" for key, source in settings.sources.items()
            if source == str(found.path)]
    return head + (["it sets:"] + sets if sets else ["it sets nothing"]) + [
        "lis-tui reads it from now on; if it changes, it is ignored until you trust it again "
        f"(lis-tui trust --revoke {os.path.dirname(found.real)} takes this back)."]


def _value(settings, dotted: str) -> str:
    from lis_tui.config.settings import toml_value  # noqa: PLC0415

    parts = dotted.split(".")
    if parts[0] == "models":
        return toml_value(settings.profiles[parts[1]][parts[2]])
    return toml_value(getattr(getattr(settings, parts[0]), parts[1]))


def _listing(trust) -> list[str]:
    records = trust.read_store()
    if not records:
        return [f"nothing trusted yet ({trust.store_path()})"]
    lines = []
    for real, record in sorted(records.items()):
        found = trust.check(os.path.dirname(real))
        now = "missing" if found is None else "unchanged" if found.trusted and found.real == real \
            else found.why()
        lines.append(f"{real}  sha256 {record['sha256'][:12]}  {record.get('trusted_at', '')}  {now}")
    return lines
