"""Text the model or the sandbox made, the way every TUI widget shows it: control characters
visible (`tools.terminal_text.safe_terminal_text`) and never read as markup.

Textual reads a plain `str` given to `Static`, `Label`, `Option` or `notify` as markup, so
`[@click=app.quit]x[/]` in a file name would become a live action. A `rich.text.Text` is never
parsed, and `notify` is told `markup=False`.
"""

from __future__ import annotations

from typing import Any

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
