"""What the main screen shows before the first task: what to type, the keys, and the set-up the
task will run with (model, rootfs, network, where runs go). Gone once a task starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from isolation.spec import places_of
from lis_tui.app.widgets.status import short_path
from tools.terminal_text import safe_terminal_text

EXAMPLES = ("How many primes are below 100,000? Check it with a program.",
            "Write a Python script that prints the first 20 Fibonacci numbers, and run it.",
            "Install sympy and solve x**3 - 6x**2 + 11x - 6 = 0.  (needs the network: F2)")
PROJECT_EXAMPLES = ("Explain how this project is laid out and where it starts.",
                    "Run the project's tests and fix the first one that fails.",
                    "Add a --verbose flag to its command line, with a test.  (F6 shows the diff first)")
"""With a workspace the task is most often about the project: examples about it."""
KEYS = ("Enter start · Esc interrupt · F2 network · F3 approvals · F4 model & rootfs · "
        "F5 files · F6 review · F1 all keys · Ctrl+Q quit")


class Welcome(Static):
    """The empty state; `refresh_from(...)` redraws it after F2 or F4 changed something."""

    def __init__(self, conversation: Any, runs_dir: str, rootfs_job: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conversation, self.runs_dir, self.rootfs_job = conversation, runs_dir, rootfs_job
        self.check: Any = None
        """The model server's answer to the screen's check (a discover.ServerCheck); None before."""

    def on_mount(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        self.update(welcome_text(self.conversation, self.runs_dir, self.rootfs_job, self.check))


def welcome_text(conversation: Any, runs_dir: str, rootfs_job: Any = None, check: Any = None) -> Group:
    """The welcome: a line to start with, examples, the set-up, the keys."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    workspace = getattr(getattr(conversation, "spec", None), "workspace", None)
    for i, example in enumerate(PROJECT_EXAMPLES if workspace is not None else EXAMPLES):
        grid.add_row("For example" if i == 0 else "", Text(example, style="italic"))
    grid.add_row("", "")
    for name, value in setup_rows(conversation, runs_dir, rootfs_job, check):
        grid.add_row(name, value)
    grid.add_row("", "")
    grid.add_row("Keys", KEYS)
    intro = Text.assemble(("Type a task below and press Enter. ", "bold"),
                          ("The model works in a sandbox, a computer of its own: it runs commands, "
                           f"edits files and writes its answer to {places_of(getattr(conversation, 'spec', None)).answer}.",
                           "dim"), "\n")
    return Group(intro, grid)


def server_text(model: str, check: Any) -> Text:
    """After the model's URL: whether its server answered the check, or on a line of its own what
    is wrong and the fix. Names and errors come from the server: made safe, never markup."""
    if check is None:
        return Text("  asking it…", style="dim")
    if check.error:
        return Text.assemble("\n", ("✘ ", "bold red"), safe_terminal_text(check.error))
    if not check.models and not model:
        return Text.assemble("\n", ("✘ ", "bold red"), "it answers but lists no model: F4 sets a name")
    if model and check.models and model not in check.models:
        names = ", ".join(check.models[:3]) + (f" and {len(check.models) - 3} more" if len(check.models) > 3 else "")
        return Text.assemble("\n", ("⚠ ", "bold yellow"), safe_terminal_text(
            f"it answers, but does not list {model}; it serves {names}"))
    return Text.assemble("  ", ("✔ answers", "green"))


def _host_hint(rootfs_job: Any) -> str:
    """What F4 offers, only when it offers it; else the rootfs already there, if any."""
    if rootfs_job is not None and rootfs_job.wanted():
        return "   F4 builds the recommended Ubuntu rootfs"
    try:
        from isolation.rootfs import RootfsStore  # noqa: PLC0415

        stored = [r.name for r in RootfsStore().list() if r.kind != "host"]
    except Exception:  # no store, or an unreadable one: nothing to name
        stored = []
    if not stored:
        return ""
    return (f"   stored: {', '.join(stored[:4])}; lis-tui --rootfs NAME uses one, "
            "lis-tui rootfs default NAME makes it the default")


def setup_rows(conversation: Any, runs_dir: str, rootfs_job: Any = None,
               check: Any = None) -> list[tuple[str, Text]]:
    """Model (and whether its server answers), rootfs, network and runs, each with the key that
    changes it."""
    config, spec = conversation.config, conversation.spec
    first = f"{check.models[0]} (the server's first)" if check and check.models else "the server's first model"
    model = safe_terminal_text(conversation.model_name or first)
    url = safe_terminal_text(config.model.base_url or "?")
    server = server_text(config.model.model, check)
    hint = ("   F4 changes it", "dim")
    rows = [("Model", Text.assemble((model, "bold"), f" at {url}",
                                    *((hint, server) if "\n" in server.plain else (server, hint))))]
    read = getattr(conversation, "instructions", None)
    if read is not None and read.summary():  # names from the person's disk: made safe, never markup
        rows.append(("Instructions", Text.assemble(safe_terminal_text(read.summary(short=True)),
                                                   ("   --no-project-instructions: none", "dim"))))
    if spec is None:
        rows.append(("Sandbox", Text("none: mode llm, the model only answers in words")))
        return rows
    rootfs = safe_terminal_text(str(spec.rootfs or "host"))
    state = getattr(rootfs_job, "state", "offered")
    if rootfs == "host":
        hint = {"building": "   building the recommended rootfs (F4 shows how far)",
                "failed": "   the rootfs build failed (F4 says why)"}.get(state) \
            or _host_hint(rootfs_job)
        about = Text.assemble(("host", "bold"), " (this machine's system, read-only; pip install "
                              "works, apt does not)", (hint, "dim"))
    else:
        about = Text(rootfs, style="bold")
    net = conversation.network
    rows += [("Rootfs", about),
             ("Network", Text.assemble((net.upper(), "bold"), ("   F2: OFF → ASK → ON", "dim")))]
    if spec.workspace is not None:
        where = Path(spec.workspace).expanduser().resolve()
        at = "seen at its own path (and /testbed)" if spec.places.working != "/testbed" else "/testbed"
        rows.append(("Workspace", Text.assemble((safe_terminal_text(short_path(where)), "bold"),
                                                f" is {at}, copy-on-write: your copy changes only when you "
                                                "apply", ("   F6 reviews the changes", "dim"))))
    rows += project_config_rows(config)
    rows.append(("Runs go to", Text(short_path(runs_dir))))
    return rows


def project_config_rows(config: Any) -> list[tuple[str, Text]]:
    """A trusted ./lis-tui.toml in effect, and what it sets: it changes the run, so it is said."""
    by_file: dict[str, list[str]] = {}
    for dotted, source in config.sources.items():
        if source.endswith("lis-tui.toml") and "." in dotted:
            section, key = dotted.split(".", 1)
            value = "…" if key.endswith("api_key") else getattr(getattr(config, section, None), key, "?")
            by_file.setdefault(source, []).append(f"{dotted} = {value!r}")
    return [("Project config", Text.assemble((safe_terminal_text(short_path(path)), "bold"), " (trusted) sets ",
                                             safe_terminal_text(", ".join(sorted(keys)))))
            for path, keys in sorted(by_file.items())]
