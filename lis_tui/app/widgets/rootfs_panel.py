"""The setup screen's rootfs part: the offer (what, size, time), then the build's progress.

The build itself belongs to the app (`LisApp.rootfs_job`), so it goes on when the setup screen
closes; this panel only draws the job's state, redrawn by the app on each progress message.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from lis_tui.app.widgets.plain import plain


class RootfsPanel(Vertical):
    """Offer, progress or result of building the recommended rootfs."""

    def __init__(self, job: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job

    def compose(self) -> ComposeResult:
        yield Static(id="rootfs-text")
        with Horizontal(classes="buttons"):
            yield Button("Build it (ctrl+b)", id="build", compact=True, variant="primary")

    def on_mount(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        job, offer = self.job, self.job.offer
        self.query_one("#build", Button).display = job.state in ("offered", "failed")
        text = Text.assemble(("Recommended sandbox rootfs: ", "bold"), offer.about, ".\n")
        if job.state == "offered":
            text.append(f"{offer.size}, {offer.time}. Optional: skip it now, F4 offers it again "
                        f"(or run `{offer.command}`).", style="dim")
        elif job.state == "building":
            text.append(f"⠿ building… ({job.lines} lines so far; it goes on if you close this)\n",
                        style="bold")
            text.append_text(plain(job.last_line[-200:], style="dim"))
        elif job.state == "built":
            text.append_text(Text.assemble(("✔ built ", "bold green"), plain(job.built),
                                           "; new sandboxes use it."))
        else:
            text.append_text(Text.assemble(("✘ the build failed: ", "bold red"),
                                           plain(job.error[-400:]),
                                           f"\nBuild it (ctrl+b) tries again; `lis-tui doctor` "
                                           f"checks what a build needs."))
        self.query_one("#rootfs-text", Static).update(text)
