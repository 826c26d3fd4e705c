"""What a run leaves behind: `trajectory.json` (rewritten after every step), `answer.txt`, `files/`.

The format is described in docs/trajectory.md. `TrajectoryWriter` is an event listener, so the
agent knows nothing about files; the file is replaced atomically (write, then rename), so a
reader or a crash never sees half of it. Its `messages` are every message ever sent, in order: a
compaction changes what the model is sent from then on, never the record (`compactions` says
where each happened, and `context_of` reads back what the model was sent last).
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
from lis_tui.agent.events import (Compacted, NetworkAnswered, NetworkRefused, ResumeNote, RunFinished, RunStarted,
                                  RunUsage, StepFinished, StepRecord, ToolFormatChanged)

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
        """Every message ever sent, in order (the log)."""
        self.compactions: list[dict] = []
        self._live: list[dict] = []
        """The agent's conversation (what it sends; it appends to it, and a compaction replaces it)."""
        self._where: list[int] = []
        """Where each message of `_live` logged so far is in the log."""
        self._lock = threading.Lock()

    def on_event(self, event: Any) -> None:
        if isinstance(event, RunStarted):
            self.doc.update(task=event.task, mode=event.mode, tools=event.tools,
                            tool_format=event.tool_format)
            self.follow(event.messages)
        elif isinstance(event, ToolFormatChanged):
            self.doc.update(tool_format=event.new, tool_format_switch={
                "step": event.step, "from": event.old, "to": event.new, "reason": event.reason})
            # the system prompt may have gained the format's notes (a new first message)
            with self._lock:
                if self._where and self._live:
                    self.messages.parts[self._where[0]] = json.dumps(self._live[0], ensure_ascii=False)
        elif isinstance(event, Compacted):
            self.follow(event.messages)
            self.compactions.append({
                "step": event.step, "steps_done": len(self.steps), "reason": event.reason,
                "summarized": event.summarized, "tokens": [event.before, event.after], "limit": event.limit,
                "sent": _spans(self._where), "from": len(self.messages)})
        elif isinstance(event, StepFinished):
            self.usage.add(event.record)
            self.steps.append(step_dict(event.record))
            self.follow(event.messages)
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

    def follow(self, messages: list[dict]) -> None:
        """Record `messages` as the agent's conversation from now on: what it holds of the one before
        (the same objects) keeps its place in the log; the rest (a follow-up, a summary) is logged."""
        if messages is self._live:
            return
        with self._lock:
            self._sync()
            old = self._live  # alive until the new list is mapped, so no id of it is reused meanwhile
            known = {id(m): at for m, at in zip(old, self._where)}
            self._live, self._where = messages, []
            for message in messages:
                at = known.get(id(message))
                if at is None:
                    at = len(self.messages)
                    self.messages.append(message)
                self._where.append(at)

    def _sync(self) -> None:
        """Log what the agent appended since."""
        for message in self._live[len(self._where):]:
            self._where.append(len(self.messages))
            self.messages.append(message)

    def update(self, **fields: Any) -> None:
        """Set top-level fields (e.g. `files`) and save."""
        self.doc.update(fields)
        self.save()

    def save(self) -> None:
        """Write the file; steps and messages are encoded once each, so a save costs little more
        than writing the bytes, however long the run."""
        with self._lock:
            self._sync()
            self.doc["updated"] = now_iso()
            self.doc["totals"] = {**vars(self.usage), "steps": len(self.steps),
                                  "tool_calls": self.steps.tool_calls}
            # One top-level key a line; json's C encoder only runs without indent.
            head = "".join(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n"
                           for k, v in self.doc.items())
            tail = f',\n "compactions": {json.dumps(self.compactions)}' if self.compactions else ""
            write_atomic(self.path, f'{{\n{head} "steps": {self.steps.text()},\n'
                                    f' "messages": {self.messages.text()}{tail}\n}}\n')


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

    def text(self) -> str:
        return "[\n  " + ",\n  ".join(self.parts) + "\n ]" if self.parts else "[]"

    def compact(self) -> str:
        """The list as `json.dumps(items, ensure_ascii=False)` writes it, from the encodings."""
        return "[" + ", ".join(self.parts) + "]"


def _spans(places: list[int]) -> list[list[int]]:
    """Places in the log as [start, end) runs: [0, 9, 5, 6, 7, 8] is [[0, 1], [9, 10], [5, 9]]."""
    spans: list[list[int]] = []
    for at in places:
        if spans and spans[-1][1] == at:
            spans[-1][1] += 1
        else:
            spans.append([at, at + 1])
    return spans


def context_of(doc: dict[str, Any]) -> list:
    """The conversation as the model was sent it last: `messages` after the last compaction's
    `sent` (those it kept, and its summary) and what was logged after it. ValueError when a
    compaction names places the log does not have."""
    messages, compactions = doc.get("messages"), doc.get("compactions")
    if not isinstance(messages, list) or not compactions:
        return messages if isinstance(messages, list) else []
    last = compactions[-1] if isinstance(compactions, list) else None
    try:
        spans, start = last["sent"], last["from"]
        kept = [messages[at] for a, b in spans for at in range(a, b) if 0 <= a < b <= len(messages)]
        if sum(b - a for a, b in spans) != len(kept) or not 0 <= start <= len(messages):
            raise ValueError
    except (TypeError, KeyError, ValueError):
        raise ValueError("its record of a compaction names messages it does not have") from None
    return kept + messages[start:]


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
