"""Transcript blocks other than tool calls: the task, the model's words, the answer, notices.

Everything here may be the model's words (a replayed task too): shown through `plain`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Collapsible, Static

from lis_tui.app.widgets.plain import as_printed, plain
from tools.terminal_text import safe_terminal_text

if TYPE_CHECKING:  # Markdown loads markdown_it and pygments: with the first reply, not the first frame
    from markdown_it import MarkdownIt


TASK_LINES = 12
"""A task longer than this (a pasted log) shows its first lines and how many more it has."""


class TaskBlock(Static):
    """What the person asked (a task or a follow-up); a long one folded."""

    def __init__(self, task: str, follow_up: bool = False) -> None:
        title = "Follow-up" if follow_up else "Task"
        lines = task.split("\n")
        more = len(lines) - (TASK_LINES - 2) if len(lines) > TASK_LINES else 0
        shown = "\n".join(lines[:-more]) if more else task
        super().__init__(Text.assemble((f"▶ {title}\n", "bold"), plain(shown),
                                       (f"\n… {more} more lines, sent whole" if more else "",
                                        "dim")))


class StepLabel(Static):
    """A dim divider naming the step."""

    def __init__(self, step: int) -> None:
        super().__init__(f"── step {step} ──")


class ModelText(Vertical):
    """The model's words: streamed as plain text, then drawn as Markdown; reasoning collapsed."""

    def __init__(self) -> None:
        super().__init__(classes="model-text")
        self.streamed = {"text": "", "reasoning": ""}
        self.final: tuple[str, str] | None = None
        self._ready = False

    def compose(self):
        yield Collapsible(Static("", classes="reasoning-text"), title="reasoning",
                          collapsed=True, classes="reasoning hidden")
        yield Static("", classes="live")

    def on_mount(self) -> None:
        # After a refresh: the Collapsible's own content (the reasoning's Static) may not be
        # mounted yet when this widget is, and a query for it then fails
        self.call_after_refresh(self._start)

    def _start(self) -> None:
        self._ready = True
        self._draw()

    def add_delta(self, kind: str, text: str) -> None:
        if kind == "reset":
            self.streamed = {"text": "", "reasoning": ""}
        elif kind in self.streamed:
            self.streamed[kind] += text
        self._draw()

    def finish(self, text: str, reasoning: str) -> None:
        """The whole reply: the live text gives way to Markdown."""
        self.final = (text, reasoning)
        self._draw()

    def _draw(self) -> None:
        if not self._ready:
            return  # on_mount draws what came meanwhile
        text, reasoning = self.final or (self.streamed["text"], self.streamed["reasoning"])
        self.query_one(".reasoning", Collapsible).set_class(not reasoning.strip(), "hidden")
        self.query_one(".reasoning-text", Static).update(plain(reasoning))
        live = self.query_one(".live", Static)
        if self.final is None:
            live.update(plain(text))
            return
        live.display = False
        if text.strip() and not self.query(".model-markdown"):
            from textual.widgets import Markdown  # noqa: PLC0415 (see the top)

            # Markdown makes no markup of it; a click on the model's link opens nothing.
            self.mount(Markdown(safe_terminal_text(text), classes="model-markdown",
                                open_links=False, parser_factory=as_written))


def as_written() -> MarkdownIt:
    """Markdown that keeps the model's characters: HTML (`<b>`), entities (`&lt;`) and backslash
    escapes (LaTeX's `\\(`) are shown as written, not acted on; emphasis, lists, code and
    tables still are."""
    from markdown_it import MarkdownIt  # noqa: PLC0415 (see the top)

    return MarkdownIt("gfm-like").disable(["html_inline", "html_block", "entity", "escape"])


class AnswerBlock(Static):
    """The submitted answer, shown as the output box shows a command's output (`as_printed`);
    when that leaves escapes out, a line says the file keeps them."""

    def __init__(self, answer: str, note: str = "") -> None:
        body = answer or f"(no answer{': ' + note if note else ''})"
        shown = as_printed(body)
        kept = shown.plain != plain(body.replace("\r\n", "\n")).plain
        ends = "" if shown.plain.endswith("\n") else "\n"
        super().__init__(Text.assemble(("✔ Answer\n", "bold"), shown, (
            f"{ends}(answer.txt holds terminal escapes: shown as a terminal shows them)" if kept else "",
            "dim italic")))


class NoticeBlock(Static):
    """A line about the run itself: stopped, failed, a retry of the model server."""

    def __init__(self, text: str, severity: str = "information") -> None:
        super().__init__(plain(text), classes=f"notice {severity}")
