"""Text the model or the sandbox made, the way every TUI widget shows it: control characters
visible (`tools.terminal_text.safe_terminal_text`) and never read as markup.

Textual reads a plain `str` given to `Static`, `Label`, `Option` or `notify` as markup, so
`[@click=app.quit]x[/]` in a file name would become a live action. A `rich.text.Text` is never
parsed, and `notify` is told `markup=False`.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.text import Text

from tools.terminal_text import safe_terminal_text, terminal_view


def plain(text: Any, style: str = "") -> Text:
    """`text` as a Rich Text: shown as it is written, controls as visible escapes."""
    return Text(safe_terminal_text(str(text)), style=style)


def as_printed(text: Any, style: str = "") -> Text:
    """What a program printed or wrote (a command's output, the answer file) as a terminal would
    show it: colours, titles and redraws done rather than shown as `\\x1b[...`, the rest as `plain`.
    The output box and the Answer box both use it, so the same bytes read the same in each."""
    return Text(terminal_view(str(text)), style=style)


def notify_plain(widget: Any, message: str, *, title: str = "", **kwargs: Any) -> None:
    """`widget.notify(...)` for a message (or title) that may hold the model's words."""
    widget.notify(safe_terminal_text(message), title=safe_terminal_text(title), markup=False,
                  **kwargs)


class PathLine:
    """`mark path` on one line, as `plain` shows it: a path longer than the line loses its start
    (`+ …/screens/review.py`), never its name; wrapped, it left a lone mark on a line of its own.
    `str()` is the whole label."""

    def __init__(self, path: str, mark: str = "", style: str = "") -> None:
        self.path, self.mark, self.style = safe_terminal_text(path), mark, style

    def __str__(self) -> str:
        return f"{self.mark} {self.path}" if self.mark else self.path

    def __rich_console__(self, console: Any, options: Any) -> Any:
        lead = f"{self.mark} " if self.mark else ""
        yield Text.assemble((lead, self.style), left_clipped(self.path, options.max_width - len(lead)),
                            no_wrap=True, overflow="crop")

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement  # noqa: PLC0415

        whole = cell_len(str(self))
        return Measurement(min(whole, len(self.mark) + 2), whole)


def left_clipped(text: str, width: int) -> str:
    """`text`, or its end after a `…` when it is wider than `width` cells: from a `/` where the
    end fits (`…/nested/name.py`), else as much of the last part as fits."""
    if cell_len(text) <= width:
        return text
    parts = text.split("/")
    for i in range(1, len(parts)):
        end = "…/" + "/".join(parts[i:])
        if cell_len(end) <= width and parts[i:] != [""]:
            return end
    kept = ""
    for char in reversed(text):
        if cell_len(char + kept) > max(width - 1, 0):
            break
        kept = char + kept
    return "…" + kept
