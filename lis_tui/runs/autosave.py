"""The work saved as it happens: after each step that ran a command or an edit, the run folder's
`files/` (a copy of the output folder) and, with a workspace, `changes.patch` are brought up to
date, so a closed terminal, SIGKILL or an OOM kill loses at most the step in flight. The
sandbox's writable layers are memory: nothing else keeps them.

The save runs in a thread of its own while the model is asked for the next step, and the next
tool call waits for the part that reads the sandbox (not for the disk's part: syncing and renaming
the files), so no command of the model runs while it reads, and a step costs no more than before
unless the model answers faster than that read. Its cost follows what the sandbox changed (the
patch is made from the writable layer; isolation.changes.gitpatch looks at the host only for the
paths it saves), not the size of the project; the output folder is copied again only when
something in it changed (Sandbox.tree_stamp).
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from isolation import SandboxError
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
        self._wanted = self._busy = self._reading = self._closed = False
        self._output: int | None = None
        """The output folder's Sandbox.tree_stamp when files/ was last copied."""

    def on_event(self, event: Any) -> None:
        if isinstance(event, StepFinished):
            if self.enabled and any(_may_change_files(tool) for tool in event.record.tool_calls):
                self._ask()
        elif isinstance(event, ToolStarted):
            self.wait(reading=True)

    def wait(self, reading: bool = False) -> None:
        """Until no save is under way (`reading`: until none is reading the sandbox)."""
        with self._cond:
            while self._reading if reading else self._busy:
                self._cond.wait()

    def close(self) -> None:
        """No more saves after a step; waits for the one under way (the caller saves a last time)."""
        with self._cond:
            self._closed = True
        self.wait()

    def save(self, final: bool = True) -> dict:
        """Bring the run folder up to date now: {"files": [...], "skipped": [...]} of the output
        folder's copy (none when it did not change since the last, but for a `final` save), and with
        a workspace "changes" (lis_tui.runs.changes.SavedChanges). `final`: the run's last save (the
        changes' held-back rules and the new commits too)."""
        from lis_tui.runs.changes import save_changes  # noqa: PLC0415 (the patch code: only with a workspace)

        sandbox, found = self.sandbox, {}
        try:
            if sandbox.readable:
                found = self._copy_output(final)
            if sandbox.spec.workspace is not None:  # whatever the run's end: the model's work is never lost
                found["changes"] = save_changes(sandbox, self.run_dir, final=final, read=self._read)
        finally:
            self._read()
        return found

    def _copy_output(self, final: bool) -> dict:
        output = self.sandbox.spec.places.output
        try:
            now = self.sandbox.tree_stamp(output)
        except (OSError, SandboxError):
            now = None  # copied, and export_output says why it could not be
        if not final and now is not None and now == self._output and (self.run_dir / "files").is_dir():
            return {}
        self._output = now
        return export_output(self.sandbox, self.run_dir / "files", output)

    def _read(self) -> None:
        """Nothing more is read from the sandbox in this save: a tool call may run."""
        with self._cond:
            if self._reading:
                self._reading = False
                self._cond.notify_all()

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
                self._wanted, self._reading = False, True
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
