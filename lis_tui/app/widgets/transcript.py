"""The transcript: a live (or replayed) run drawn from the agent's events."""

from __future__ import annotations

import time
from typing import Any

from textual.binding import Binding
from textual.containers import VerticalScroll

from lis_tui.agent import events as ev
from lis_tui.app.widgets.blocks import AnswerBlock, ModelText, NoticeBlock, StepLabel, TaskBlock
from lis_tui.app.widgets.tool_block import OutputView, ToolBlock

STOPPED = {"cancelled": "Stopped: you interrupted the run. Type a follow-up to go on.",
           "max_steps": "Stopped: the step limit was reached.",
           "max_context": "Stopped: the context limit was reached.",
           "wall_time": "Stopped: the time limit was reached.",
           "no_action": "Stopped: the model kept replying without calling a tool."}
HOLD_SECONDS = 8.0
"""After the person scrolls away from the end, new output leaves the view where it is this long."""


class Transcript(VerticalScroll):
    """Turns each event into a block; keeps to the bottom (anchored: a block that grows later, a
    dialog's wait, Markdown drawn late) unless the person scrolled away in the last seconds."""

    can_focus = True
    # e: in a replay, where the prompt takes no text; else a letter goes to the prompt (the main
    # screen binds ctrl+o too, so that it works from the prompt)
    BINDINGS = [Binding("e,ctrl+o", "expand", "Expand output", show=False)]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tasks = 0
        self._reply: ModelText | None = None
        self._tools: dict[tuple[int, int], ToolBlock] = {}
        self.last_tool: ToolBlock | None = None
        self._scrolled_at: float | None = None
        """When the person last scrolled away from the end (None: not since the last task)."""

    def release_anchor(self) -> None:
        # Textual calls this for the person's scrolling (wheel, keys, scrollbar), never for ours.
        # The anchor goes too, not only "released": Textual takes a released anchor back whenever
        # the view is at its end, and Tab's focus change shrank the view as Home's (deferred)
        # scroll began, so every frame of that scroll was pinned back to the end (the CI's Tab,
        # Home, twice). show() anchors again once the person is at the end or HOLD_SECONDS passed.
        super().release_anchor()
        self.anchor(False)
        self._scrolled_at = time.monotonic()

    def follow(self) -> None:
        """Back to the end and following (a new task or follow-up): the person wants to see it."""
        self._scrolled_at = None
        self.anchor()

    def show(self, event: Any) -> None:
        """Draw one event from `lis_tui.agent.events`; unknown ones are ignored."""
        handler = getattr(self, f"_on_{type(event).__name__}", None)
        if handler is not None:
            handler(event)
            if not self._held():  # anchored from the first event on, not over the welcome
                self.anchor()

    def _held(self) -> bool:
        """The person scrolled away from the end a moment ago and is still away: stay there."""
        return (self._scrolled_at is not None and not self.is_vertical_scroll_end
                and time.monotonic() - self._scrolled_at < HOLD_SECONDS)

    def action_expand(self) -> None:
        """Show every command's whole output, or clip them all again when none is clipped."""
        views = list(self.query(OutputView))
        expand = any(view.clipped for view in views)
        for view in views:
            view.show_all(expand)

    def tool_block(self, step: int, index: int) -> ToolBlock | None:
        return self._tools.get((step, index))

    def _on_RunStarted(self, e: ev.RunStarted) -> None:
        self.tasks += 1
        self.mount(TaskBlock(e.task, follow_up=self.tasks > 1))

    def _on_StepStarted(self, e: ev.StepStarted) -> None:
        self.mount(StepLabel(e.step))
        self._reply = None

    def _on_ModelDelta(self, e: ev.ModelDelta) -> None:
        self._live_reply().add_delta(e.kind, e.text)

    def _on_ModelReply(self, e: ev.ModelReply) -> None:
        self._live_reply().finish(e.text, e.reasoning)
        self._reply = None

    def _on_ModelRetry(self, e: ev.ModelRetry) -> None:
        self.mount(NoticeBlock(f"Model server: {e.reason}; retry {e.attempt} in {e.delay:.1f}s",
                               "warning"))

    def _on_CredentialAdded(self, e: ev.CredentialAdded) -> None:
        self.mount(NoticeBlock(f"Network: {e.text}"))

    def _on_NetworkRefused(self, e: ev.NetworkRefused) -> None:
        self.mount(NoticeBlock(f"Network: {e.text}", "warning"))

    def _on_NetworkAnswered(self, e: ev.NetworkAnswered) -> None:
        # A question no one answered (withdrawn, timed out) is said by its refusal's line
        if e.by not in ("gone", "timeout", "error"):
            self.mount(NoticeBlock(f"Network: {e.text}"))

    def _on_ToolFormatChanged(self, e: ev.ToolFormatChanged) -> None:
        self.mount(NoticeBlock(f"Tool format: {e.old} -> {e.new} ({e.reason}; --tool-format "
                               f"{e.new} starts there)"))

    def _on_Compacted(self, e: ev.Compacted) -> None:
        self.mount(NoticeBlock(f"Context: {e.text}"))

    def _on_ToolStarted(self, e: ev.ToolStarted) -> None:
        block = ToolBlock(e.call.name, e.arguments, e.call.arguments)
        self._tools[(e.step, e.index)] = self.last_tool = block
        self.mount(block)

    def _on_ToolOutput(self, e: ev.ToolOutput) -> None:
        block = self._tools.get((e.step, e.index))
        if block is not None:
            block.add_output(e.text, e.seconds, e.skipped)

    def _on_ToolFinished(self, e: ev.ToolFinished) -> None:
        block = self._tools.pop((e.step, e.index), None)
        if block is not None:
            block.finish(e.record)

    def _on_RunFinished(self, e: ev.RunFinished) -> None:
        if e.reason == "submitted":
            self.mount(AnswerBlock(e.answer, e.answer_note))
        elif e.reason == "error":
            self.mount(NoticeBlock(f"The run failed: {e.message}", "error"))
        else:
            text = STOPPED.get(e.reason, f"Stopped: {e.reason}")
            detail = "" if e.message == e.reason else e.message
            self.mount(NoticeBlock(f"{text} {detail}".strip(), "warning"))

    def _live_reply(self) -> ModelText:
        if self._reply is None:
            self._reply = ModelText()
            self.mount(self._reply)
        return self._reply
