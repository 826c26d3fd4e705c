"""The work saved as it happens: after each step that ran a command or an edit, the run folder's
`files/` (a copy of the output folder) and, with a workspace, `changes.patch` are brought up to
date, so a closed terminal, SIGKILL or an OOM kill loses at most the step in flight. The
sandbox's writable layers are memory: nothing else keeps them.

The save runs in a thread of its own while the model is asked for the next step, and the next
tool call waits for it: no command of the model runs while it reads the sandbox's files, and a
step costs no more than before unless the model answers faster than the save. Its cost follows
what the sandbox changed (the patch is made from the writable layer; isolation.changes.gitpatch
looks at the host only for the paths it saves), not the size of the project.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from lis_tui.agent.events import StepFinished, ToolRecord, ToolStarted
from lis_tui.agent.loop import decode_arguments
from lis_tui.agent.trajectory import export_output

log = logging.getLogger(__name__)


class WorkSaver:
    """A listener that saves the run's work after each step that may have changed files; `save()`
    is the same save, at once (the run's end, a close)."""

    enabled = True
    """False turns the per-step save off (benchmarks/workspace_save.py measures what it costs)."""

    def __init__(self, sandbox: Any, run_dir: Path) -> None:
        self.sandbox, self.run_dir = sandbox, run_dir
        self._cond = threading.Condition()
        self._wanted = self._busy = self._closed = False

    def on_event(self, event: Any) -> None:
        if isinstance(event, StepFinished):
            if self.enabled and any(_may_change_files(tool) for tool in event.record.tool_calls):
                self._ask()
        elif isinstance(event, ToolStarted):
            self.wait()

    def wait(self) -> None:
        """Until no save is under way."""
        with self._cond:
            while self._busy:
                self._cond.wait()

    def close(self) -> None:
        """No more saves after a step; waits for the one under way (the caller saves a last time)."""
        with self._cond:
            self._closed = True
        self.wait()

    def save(self, final: bool = True) -> dict:
        """Bring the run folder up to date now: {"files": [...], "skipped": [...]} of the output
        folder's copy, and with a workspace "changes" (lis_tui.runs.changes.SavedChanges). `final`:
        the run's last save (the changes' held-back rules and the new commits too)."""
        from lis_tui.runs.changes import save_changes  # noqa: PLC0415 (the patch code: only with a workspace)

        sandbox = self.sandbox
        found = export_output(sandbox, self.run_dir / "files", sandbox.spec.places.output) \
            if sandbox.readable else {}
        if sandbox.spec.workspace is not None:  # whatever the run's end: the model's work is never lost
            found["changes"] = save_changes(sandbox, self.run_dir, final=final)
        return found

    def _ask(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._wanted = True
            if self._busy:
                return  # the save under way goes once more when it is done
            self._busy = True
        threading.Thread(target=self._work, daemon=True, name="lis-save").start()

    def _work(self) -> None:
        while True:
            with self._cond:
                if not self._wanted or self._closed:
                    self._busy = False
                    self._cond.notify_all()
                    return
                self._wanted = False
            try:
                changes = self.save(final=False).get("changes")
                if changes is not None and changes.error:
                    log.warning("saving the run's changes after a step: %s", changes.error)
            except Exception:  # a bug: the run goes on, the run's end saves again
                log.exception("saving the run's work after a step failed")


def _may_change_files(tool: ToolRecord) -> bool:
    """A tool call that ran and may have changed a file: a command, an edit (not a view), not submit."""
    if tool.approval == "skipped" or tool.name in ("submit", "finish"):
        return False
    if tool.name == "str_replace_editor":
        return (decode_arguments(tool.arguments) or {}).get("command") != "view"
    return True
