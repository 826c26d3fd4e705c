"""What a run leaves behind: `trajectory.json` (rewritten after every step), `answer.txt`, `files/`.

The format is described in docs/trajectory.md. `TrajectoryWriter` is an event listener, so the
agent knows nothing about files; the file is replaced atomically (write, then rename), so a
reader or a crash never sees half of it.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from isolation import SandboxError
from isolation.host.walk import RefusedPaths, files_below
from lis_tui.agent.events import (NetworkAnswered, NetworkRefused, ResumeNote, RunFinished, RunStarted, RunUsage,
                                  StepFinished, StepRecord, ToolFormatChanged)

FORMAT = "lis-tui-trajectory/1"


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


class TrajectoryWriter:
    """Builds trajectory.json from the agent's events and saves it after every step."""

    def __init__(self, path: Path | str, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self.usage = RunUsage()
        self.doc: dict[str, Any] = {
            "format": FORMAT, "created": now_iso(), **header, "updated": None,
            "finish_reason": None, "message": "", "answer": None, "answer_note": "",
            "totals": {},
        }
        self.steps = _Encoded()
        self.messages = _Encoded()
        self._live_messages: list[dict] = []
        self._lock = threading.Lock()

    def on_event(self, event: Any) -> None:
        if isinstance(event, RunStarted):
            self.doc.update(task=event.task, mode=event.mode, tools=event.tools,
                            tool_format=event.tool_format)
            self._live_messages = event.messages  # the agent only appends to it
        elif isinstance(event, ToolFormatChanged):
            self.doc.update(tool_format=event.new, tool_format_switch={
                "step": event.step, "from": event.old, "to": event.new, "reason": event.reason})
            self.messages = _Encoded()  # the system prompt may have gained the format's notes
        elif isinstance(event, StepFinished):
            self.usage.add(event.record)
            self.steps.append(step_dict(event.record))
            self._live_messages = event.messages
        elif isinstance(event, RunFinished):
            self.doc.update(finish_reason=event.reason, message=event.message,
                            answer=event.answer, answer_note=event.answer_note,
                            duration=round(event.duration, 3))
        elif isinstance(event, ResumeNote):
            self.doc["resumed_sandbox"] = event.text
        elif isinstance(event, NetworkRefused):  # from the proxy's thread, while a save may run
            with self._lock:
                self.doc.setdefault("network_refusals", []).append(
                    {"time": now_iso(), "host": event.host, "port": event.port, "by": event.by,
                     "text": event.text})
        elif isinstance(event, NetworkAnswered):  # the proxy's thread too
            answered = {"time": now_iso(), "host": event.host, "port": event.port, "answer": event.answer,
                        "by": event.by}
            for key in ("address", "saved", "not_saved"):
                if getattr(event, key):
                    answered[key] = getattr(event, key)
            with self._lock:
                self.doc.setdefault("network_answers", []).append(answered)
        else:
            return
        self.save()

    def update(self, **fields: Any) -> None:
        """Set top-level fields (e.g. `files`) and save."""
        self.doc.update(fields)
        self.save()

    def save(self) -> None:
        """Write the file; steps and messages are encoded once each, so a save costs little more
        than writing the bytes, however long the run."""
        with self._lock:
            self.messages.extend_to(self._live_messages)
            self.doc["updated"] = now_iso()
            self.doc["totals"] = {**vars(self.usage), "steps": len(self.steps),
                                  "tool_calls": self.steps.tool_calls}
            # One top-level key a line; json's C encoder only runs without indent.
            head = "".join(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n"
                           for k, v in self.doc.items())
            write_atomic(self.path, f'{{\n{head} "steps": {self.steps.text()},\n'
                                    f' "messages": {self.messages.text()}\n}}\n')


class _Encoded:
    """A JSON list kept as its items' encodings, one item a line; items never change once added."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.tool_calls = 0

    def __len__(self) -> int:
        return len(self.parts)

    def append(self, item: dict) -> None:
        self.parts.append(json.dumps(item, ensure_ascii=False))
        self.tool_calls += len(item.get("tool_calls") or [])

    def extend_to(self, items: list[dict]) -> None:
        """Encode what `items` has beyond what was encoded (agents only append to messages)."""
        if len(items) < len(self.parts):  # a shortened conversation: start over
            self.parts = []
        for item in items[len(self.parts):]:
            self.parts.append(json.dumps(item, ensure_ascii=False))

    def text(self) -> str:
        return "[\n  " + ",\n  ".join(self.parts) + "\n ]" if self.parts else "[]"

    def compact(self) -> str:
        """The list as `json.dumps(items, ensure_ascii=False)` writes it, from the encodings."""
        return "[" + ", ".join(self.parts) + "]"


def step_dict(step: StepRecord) -> dict[str, Any]:
    """One step as JSON; built by hand, as dataclasses.asdict is slow enough to show per step."""
    usage = step.usage
    return {
        "step": step.step, "started": round(step.started, 3), "duration": round(step.duration, 6),
        "model_duration": round(step.model_duration, 6), "text": step.text,
        "reasoning": step.reasoning, "finish_reason": step.finish_reason, "nudged": step.nudged,
        "stopped": step.stopped,
        "usage": {"prompt_tokens": usage.prompt_tokens if usage else None,
                  "completion_tokens": usage.completion_tokens if usage else None,
                  "cached_tokens": usage.cached_tokens if usage else None,
                  "estimated": bool(usage and usage.estimated),
                  "environment_tokens": step.environment_tokens},
        "tool_calls": [{**vars(t), "duration": round(t.duration, 6)} for t in step.tool_calls],
    }


def write_atomic(path: Path, text: str) -> None:
    # No fsync: it guards against power loss, not against our own crash, and costs a few ms a step.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)
    os.replace(tmp, path)


# -- files/: a copy of /testbed/output ------------------------------------------------------------

def export_output(sandbox: Any, dest: Path, source: str = "/testbed/output",
                  cap: int | None = None) -> dict[str, list[str]]:
    """Copy `source` out of the sandbox into `dest`: directories and regular files only, holes kept,
    at most `cap` bytes of data (default: the sandbox's export cap, `Limits.export_bytes()`); what
    would pass it is listed as skipped. `Sandbox.export` does the copy (read from the host without
    following a link, no fifo opened); links are skipped here. The copy is made beside `dest` and
    takes its place once whole, so a run saved again after each step (lis_tui.runs.autosave) never
    leaves half a copy, nor a file the sandbox has removed since; one that fails leaves `dest` as it was.
    Returns {"files": [...], "skipped": ["name (why)", ...]}."""
    fresh, old = dest.with_name(f".{dest.name}.new"), dest.with_name(f".{dest.name}.old")
    for leftover in (fresh, old):  # a save a crash cut short
        shutil.rmtree(leftover, ignore_errors=True)
    skipped: list[str] = []
    try:
        sandbox.export(source, fresh, links=False, limit=cap)
    except RefusedPaths as exc:
        skipped = exc.refused
    except (SandboxError, OSError) as exc:
        shutil.rmtree(fresh, ignore_errors=True)
        return {"files": files_below(dest) if dest.is_dir() else [], "skipped": [f"{source} ({exc})"]}
    if dest.is_dir():
        os.rename(dest, old)
        os.rename(fresh, dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(fresh, dest)
    return {"files": files_below(dest), "skipped": skipped}
