"""The review screen: what the sandbox changed in the project (/testbed, or a workspace's own path), a
diff per file, and what to do with it: apply to the host workspace, export the output folder
(spec.places), or close (write nothing: the changes stay in the sandbox and the run's patch).
Held-back changes (what would configure or run something on the host: isolation.changes.heldback; links,
new executables) are listed apart, each with why, grouped by kind, and go only by name: one picked
with f, or a whole kind with k once its header is selected and its list shown."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from isolation import SandboxError
from isolation.changes.heldback import KINDS, held_kind
from isolation.host.walk import RefusedPaths
from isolation.spec import places_of
from isolation.changes.workspace import WorkspaceConflict
from lis_tui.runs.changes import ApplyRefused, branch_for, fetch_commits, save_bundle
from lis_tui.app.screens.confirm import ConfirmScreen
from lis_tui.app.widgets.plain import PathLine, notify_plain, plain
from lis_tui.app.widgets.status import short_path
from tools.terminal_text import safe_terminal_text

log = logging.getLogger(__name__)
MARKS = {"added": ("+", "green"), "modified": ("~", "yellow"), "deleted": ("-", "red"),
         "mode": ("x", "cyan"), "type": ("T", "magenta"), "host": ("=", "blue")}
"""A mark per kind; "host" is what the host made meanwhile where the sandbox deleted: kept, never applied."""
HELD_HEADER = "/held-back"
"""The id of the line that heads the held-back changes: never a change's path, which is relative."""
KIND = "/kind/"
"""The id of a kind's header is this and the kind (isolation.changes.heldback.KINDS)."""
COMMITS = "/commits"
"""The id of the one item for the model's new commits (with --git-writable), in place of .git/ entries."""


class ReviewScreen(Screen[None]):
    """Up/Down pick a file (its diff shows); a / f apply all / the file; k a held-back kind whose
    header is selected (its list shows); e export; Esc closes, and the changes stay."""

    CSS_PATH = "review.tcss"
    BINDINGS = [Binding("a", "apply_all", "Apply all"), Binding("f", "apply_file", "Apply file"),
                Binding("k", "apply_kind", "Apply kind", show=False),  # said where it applies: a kind's header
                Binding("e", "export", "Export"),
                Binding("r", "reload", "Reload", show=False),  # F1 says it: the footer's room goes to Close
                Binding("escape,f6", "close", "Close (changes kept)")]

    def __init__(self, conversation: Any) -> None:
        super().__init__()
        self.conversation = conversation
        self.sandbox = conversation.sandbox
        self.diffs: dict[str, str] = {}
        self.held: dict[str, str] = {}
        """{path: why} of the held-back changes listed."""
        self.kinds: dict[str, list[str]] = {}
        """{kind: paths} of the held-back changes, in the order listed."""
        self.shown: dict[str, tuple[str, ...]] = {}
        """{kind: paths} as last shown to the person under the kind's header: what k may apply."""
        self.reviewed: Any = None
        """The review listed (isolation.changes.workspace.Review): what a, f and k apply, byte for byte."""

    def compose(self) -> ComposeResult:
        yield Label(plain(self._title()), classes="title")
        with Horizontal(id="panes"):
            yield OptionList(id="change-list")
            with VerticalScroll(id="diff-box"):
                yield Static("", id="diff")
        yield Static("", id="notice")
        with Horizontal(id="export-row"):
            yield Label(f"Export {places_of(getattr(self.conversation, 'spec', None)).output} to ")
            yield Input(self._default_export(), placeholder="a folder on this machine",
                        id="export-dir")
        yield Footer(show_command_palette=False, compact=True)  # ctrl+p still opens it; the room goes to keys

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self.action_reload()

    # -- loading ----------------------------------------------------------------------------
    def action_reload(self) -> None:
        if self.sandbox is None:
            self._say("Nothing to review yet: the sandbox starts with the first task.")
            return
        self.load_changes()

    @work(thread=True, exclusive=True, exit_on_error=False, group="review-load")
    def load_changes(self) -> None:
        try:
            reviewed = self.sandbox.review()  # one walk: the list, and the diff from the same reads
            commits = self.sandbox.new_commits() if getattr(self.sandbox, "git_base", None) else 0
        except Exception as exc:  # the sandbox went away meanwhile: say so, keep the screen
            log.info("reading the changes failed", exc_info=True)
            self.app.call_from_thread(self._say, f"Could not read the changes: {exc}", "error")
            return
        changes = reviewed.changes
        if commits:  # they come home as one branch, not as the .git/ files that hold them
            changes = [c for c in changes if not c.path.startswith(".git/")]
        self.app.call_from_thread(self._show_changes, changes, split_diff(reviewed.diff, changes), commits, reviewed)

    def _show_changes(self, changes: list[Any], diffs: dict[str, str], commits: int = 0, reviewed: Any = None) -> None:
        self.reviewed = reviewed  # from now on what is shown is what apply writes
        self.diffs = diffs
        self.held = {c.path: c.held for c in changes if getattr(c, "held", "")}
        self.kinds = {kind: [p for p in self.held if held_kind(self.held[p]) == kind] for kind in KINDS}
        self.kinds = {kind: paths for kind, paths in self.kinds.items() if paths}
        self.shown = {}
        listing = self.query_one(OptionList)
        listing.clear_options()
        if commits:
            branch = branch_for(self.conversation.out) if getattr(self.conversation, "out", None) else "lis-tui/RUN"
            listing.add_option(Option(Text(f"⎇ {commits} new commit{'s' * (commits > 1)} -> branch {branch}"),
                                      id=COMMITS))
            self.diffs[COMMITS] = (f"The model's {commits} new commit(s). Press f to fetch them into a new branch "
                                   f"{branch} of the host repository: its objects and that branch only, never the "
                                   "sandbox's hooks, config or other refs; the work tree is not touched.")
        listing.add_options([Option(change_label(c), id=c.path) for c in changes if c.path not in self.held])
        if self.held:
            if listing.option_count:
                listing.add_option(None)
            listing.add_option(Option(Text("Held back: applied only when you pick one (f), or a kind (k)",
                                           style="bold"), id=HELD_HEADER, disabled=True))
            by_path = {c.path: c for c in changes}
            for kind, paths in self.kinds.items():
                listing.add_option(Option(Text(f"▸ {kind} ({len(paths)})", style="bold yellow"), id=KIND + kind))
                listing.add_options([Option(change_label(by_path[p]), id=p) for p in paths])
        if changes or commits:
            pickable = [i for i in range(listing.option_count) if not listing.get_option_at_index(i).disabled]
            listing.highlighted = next((i for i in pickable if not str(listing.get_option_at_index(i).id)
                                        .startswith(KIND)), pickable[0])
        else:
            where = places_of(getattr(self.sandbox, "spec", None)).working
            self.query_one("#diff", Static).update(plain(f"No changes under {where}."))

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        path = str(event.option.id)
        if path.startswith(KIND):
            self._show_kind(path[len(KIND):])
            return
        text = self.diffs.get(path) or "(no text difference to show)"
        shown: Any = Syntax(safe_terminal_text(text), "diff", theme="ansi_dark", background_color="default",
                            word_wrap=True)
        if path in self.held:
            why = Text.assemble(("Held back: ", "bold yellow"), plain(self.held[path]),
                                ". Press f to apply this one to the host.\n")
            shown = Group(why, shown)
        self.query_one("#diff", Static).update(shown)
        self.query_one("#diff-box").scroll_home(animate=False)

    def _show_kind(self, kind: str) -> None:
        """The kind's held-back changes, each with why: what k would apply, shown before it can."""
        paths = self.kinds.get(kind, [])
        lines = [Text.assemble((f"Held back: {kind}, {len(paths)} change(s). ", "bold yellow"),
                               "Read them; k applies all of them to the host (f one by one).\n")]
        lines += [Text.assemble(("• ", "yellow"), plain(p), " — ", plain(self.held[p])) for p in paths]
        self.shown[kind] = tuple(paths)
        self.query_one("#diff", Static).update(Group(*lines))
        self.query_one("#diff-box").scroll_home(animate=False)

    # -- applying ---------------------------------------------------------------------------
    def action_apply_all(self) -> None:
        self._apply(None)

    def action_apply_file(self) -> None:
        chosen = self._highlighted()
        if chosen is None:
            self._say("No file selected.", "warning")
        elif chosen.startswith(KIND):
            self._say("That is a kind's header: k applies all of it; pick one file for f.", "warning")
        elif chosen == COMMITS:
            self.fetch_commits()
        else:
            self._apply([chosen])

    def action_apply_kind(self) -> None:
        chosen = self._highlighted() or ""
        kind = chosen[len(KIND):] if chosen.startswith(KIND) else ""
        if not kind:
            self._say("Select a held-back kind's header (▸) first: it lists what k applies.", "warning")
        elif self.shown.get(kind) != tuple(self.kinds.get(kind, ())):
            self._say("The list changed since it was shown: read it again, then press k.", "warning")
        else:
            self._apply(list(self.shown[kind]))

    def _highlighted(self) -> str | None:
        listing = self.query_one(OptionList)
        if listing.highlighted is None or listing.get_option_at_index(listing.highlighted).disabled:
            return None
        return str(listing.get_option_at_index(listing.highlighted).id)

    def _apply(self, paths: list[str] | None) -> None:
        if self.sandbox is None:
            self._say("Nothing to apply yet: the sandbox starts with the first task.", "warning")
        elif getattr(self.sandbox.spec, "workspace", None) is None:
            self._say("This sandbox has no host workspace, so there is nothing to apply to (start "
                      "lis-tui with --workspace DIR for that). Press e to export /testbed/output "
                      "instead.", "warning")
        elif getattr(getattr(self.app, "main", None), "busy", False):
            self._say("A task is running: wait for it to finish (or Esc on the main screen to "
                      "interrupt it), then apply.", "warning")
        elif self.reviewed is None:  # apply writes what was shown, and nothing is shown yet
            self._say("The changes are not listed yet: wait for the list (r reloads it), then apply.", "warning")
        else:
            self.apply_changes(paths)

    @work(thread=True, exclusive=True, exit_on_error=False, group="review-write")
    def apply_changes(self, paths: list[str] | None, allow_outside_links: bool = False) -> None:
        try:
            applied = self.sandbox.apply(paths, allow_outside_links=allow_outside_links, reviewed=self.reviewed)
        except WorkspaceConflict as exc:  # nothing was written; the sandbox still has it all
            self.app.call_from_thread(self._say, f"Conflict: {exc}", "error")
            return
        except RefusedPaths as exc:
            self.app.call_from_thread(self._refused, paths, exc)
            return
        except (SandboxError, OSError) as exc:
            log.warning("apply failed", exc_info=True)
            self.app.call_from_thread(self._say, f"Could not apply: {exc}", "error")
            return
        where = self.sandbox.spec.workspace
        self.app.call_from_thread(self._say, f"Applied {len(applied)} change(s) to {where}.")
        self.app.call_from_thread(self.action_reload)

    @work(thread=True, exclusive=True, exit_on_error=False, group="review-write")
    def fetch_commits(self) -> None:
        """The sandbox's commits bundled inside, kept in the run folder, fetched into branch lis-tui/RUN."""
        out = self.conversation.out
        try:
            saved = save_bundle(self.sandbox, out)
            if saved is None:
                self.app.call_from_thread(self._say, "No new commits to fetch.", "warning")
                return
            tip = fetch_commits(out, Path(self.sandbox.spec.workspace).expanduser(), {"commits": saved})
        except (ApplyRefused, SandboxError, OSError) as exc:
            self.app.call_from_thread(self._say, f"Could not fetch the commits: {exc}", "error")
            return
        self.app.call_from_thread(self._say, f"Fetched {saved['count']} commit(s) into branch {branch_for(out)} "
                                  f"({tip[:12]}) of {self.sandbox.spec.workspace}.")

    def _refused(self, paths: list[str] | None, exc: RefusedPaths) -> None:
        """Say what was refused; a link named by the person that leaves the workspace is theirs to
        confirm (the sandbox made it: `sshkey -> ~/.ssh/id_rsa` is the classic)."""
        others = [line for line in exc.refused if not any(line.startswith(f"{p} (") for p in exc.held_back)]
        said = f"{exc.done}; refused {len(others)}:\n" + "\n".join(f"  {line}" for line in others) if others \
            else exc.done + "."
        if exc.held_back:
            said += (f"\nHeld back {len(exc.held_back)} (listed apart by kind, each with why): pick one and "
                     "press f, or select a kind's header, read it, and press k.")
        self._say(said, "warning")
        self.action_reload()
        asked = [p for p in exc.outside_links if paths is not None and p in {q.strip("/") for q in paths}]
        if asked:
            links = ", ".join(f"{p} -> {exc.outside_links[p]}" for p in asked)
            question = (f"The sandbox made {links}, which points outside the workspace. "
                        "Apply it to the host anyway?")
            self.app.push_screen(ConfirmScreen(question, "Apply the link", "Leave it"),
                                 lambda yes: self.apply_changes(asked, allow_outside_links=True) if yes else None)

    # -- exporting --------------------------------------------------------------------------
    def action_export(self) -> None:
        target = self.query_one("#export-dir", Input).value.strip()
        if self.sandbox is None:
            self._say("Nothing to export yet: the sandbox starts with the first task.", "warning")
        elif not target:
            self._say("Type a folder to export to in the box below (Tab gets there).", "warning")
        else:
            self.export_output(Path(target).expanduser())

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_export()

    @work(thread=True, exclusive=True, exit_on_error=False, group="review-write")
    def export_output(self, target: Path) -> None:
        output = self.sandbox.spec.places.output
        try:
            self.sandbox.export(output, target)
        except (SandboxError, OSError) as exc:
            log.warning("export failed", exc_info=True)
            self.app.call_from_thread(self._say, f"Could not export {output}: {exc}", "error")
            return
        self.app.call_from_thread(self._say, f"Exported {output} to {target}")

    # -- closing ----------------------------------------------------------------------------
    def action_close(self) -> None:
        """Close without writing anything; the changes stay in the sandbox (and the run's patch)."""
        self.dismiss(None)

    def _say(self, text: str, severity: str = "information") -> None:
        notice = self.query_one("#notice", Static)
        notice.update(plain(text))  # errors name the sandbox's files
        notice.set_class(severity == "error", "error")
        if severity == "error":  # the notice line may clip a long list of files; a toast won't
            notify_plain(self, text, severity="error", timeout=10)

    def _title(self) -> str:
        where = getattr(getattr(self.sandbox, "spec", None), "workspace", None)
        on = f"workspace {short_path(where, here=True)}" if where else "/testbed (no host workspace)"
        return f"Review changes · {on}"

    def _default_export(self) -> str:
        # Not out/files: closing the session exports there and will not overwrite files.
        out = getattr(self.conversation, "out", None)
        return str(out / "exported") if out is not None else ""


def change_label(change: Any) -> PathLine:
    """`+ path` with a kind marker that reads without colour too, on one line."""
    mark, colour = MARKS.get(change.kind, ("?", ""))
    return PathLine(change.path, mark, f"bold {colour}")


def split_diff(diff: str, changes: list[Any]) -> dict[str, str]:
    """The joint unified diff cut into one piece per changed path (it is written in that order)."""
    starts = {key: c.path for c in changes for key in _headers(c)}
    pieces: dict[str, list[str]] = {}
    current: list[str] | None = None
    lines = diff.splitlines(keepends=True)
    for i, line in enumerate(lines):
        key = line + (lines[i + 1] if line.startswith("--- ") and i + 1 < len(lines) else "")
        path = starts.get(key) or starts.get(line)
        if path is not None and path not in pieces:
            current = pieces[path] = []
        if current is not None:
            current.append(line)
    return {path: "".join(text) for path, text in pieces.items()}


def _headers(change: Any) -> tuple[str, ...]:
    """The line (or the ---/+++ pair) that may open `change` in `workspace.diff`'s output."""
    p = change.path
    if p.endswith("/") or change.kind in ("mode", "type") or change.detail:
        return (f"{change.kind}: {p} {change.detail}".rstrip() + "\n",)
    a = f"a/{p}" if change.kind != "added" else "/dev/null"
    b = f"b/{p}" if change.kind != "deleted" else "/dev/null"
    return f"--- {a}\n+++ {b}\n", f"Binary files a/{p} and b/{p} differ\n"
