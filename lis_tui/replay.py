"""A saved `trajectory.json` read back as the events the agent sent, so a replay is drawn by the
same code as a live run (`lis-tui replay`)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Iterator

from lis_tui.agent import decode_arguments
from lis_tui.events import (
    Event, ModelReply, RunFinished, RunStarted, RunUsage, StepFinished, StepRecord, StepStarted,
    ToolFinished, ToolRecord, ToolStarted,
)
from lis_tui.model import ToolCall, Usage
from lis_tui.runs import WHOLE_LIMIT, open_run_file


def load_trajectory(path: str | Path) -> dict[str, Any]:
    """The trajectory's JSON; ValueError with the fix when it cannot be used."""
    path = Path(path)
    if path.is_dir():
        path = path / "trajectory.json"
    try:
        with open_run_file(path, follow=True) as handle:
            if os.fstat(handle.fileno()).st_size > WHOLE_LIMIT:
                raise ValueError(f"{path} is larger than {WHOLE_LIMIT >> 20} MiB; a trajectory of "
                                 "lis-tui is far smaller, so this is not one")
            doc = json.loads(handle.read(WHOLE_LIMIT + 1))
    except FileNotFoundError:
        raise ValueError(f"{path} does not exist; give a run's directory or its "
                         "trajectory.json (lis-tui run saves under ./lis-output/, the app under "
                         "$XDG_STATE_HOME/lis-tui/runs/)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise ValueError(f"{path} is not a lis-tui trajectory (no \"steps\" list)")
    return doc


def replay_events(doc: dict[str, Any]) -> Iterator[Event]:
    """The run's events in order: RunStarted, each step's reply and tools, RunFinished."""
    yield RunStarted(str(doc.get("task", "")), str(doc.get("mode", "sandbox")), [],
                     list(doc.get("tools") or []))
    usage, last = RunUsage(), 0
    follow_ups = iter(doc.get("follow_ups") or [])
    for raw in doc["steps"]:
        step = _step(raw)
        if step.step <= last:  # steps count from 1 again: a follow-up started here
            yield RunStarted(str(next(follow_ups, "(follow-up)")), str(doc.get("mode", "")), [], [])
        last = step.step
        yield StepStarted(step.step)
        calls = [ToolCall(t.id, t.name, t.arguments) for t in step.tool_calls]
        yield ModelReply(step.step, step.text, step.reasoning, calls, step.usage,
                         step.model_duration)
        for index, (call, tool) in enumerate(zip(calls, step.tool_calls)):
            yield ToolStarted(step.step, index, call, decode_arguments(call.arguments))
            yield ToolFinished(step.step, index, tool)
        usage.add(step)
        yield StepFinished(step.step, step, [])
    if doc.get("finish_reason"):
        yield RunFinished(doc["finish_reason"], doc.get("answer") or "", len(doc["steps"]), usage,
                          float(doc.get("duration") or 0.0), doc.get("message") or "",
                          doc.get("answer_note") or "")


def _step(raw: dict[str, Any]) -> StepRecord:
    usage = raw.get("usage") or {}
    tokens = Usage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0,
                   usage.get("cached_tokens") or 0, bool(usage.get("estimated"))) if usage.get("prompt_tokens") is not None \
        else None
    return StepRecord(step=int(raw.get("step", 0)), started=float(raw.get("started") or 0.0),
                      duration=float(raw.get("duration") or 0.0),
                      model_duration=float(raw.get("model_duration") or 0.0),
                      text=raw.get("text") or "", reasoning=raw.get("reasoning") or "",
                      finish_reason=raw.get("finish_reason"), usage=tokens,
                      tool_calls=[_known(ToolRecord, t) for t in raw.get("tool_calls") or []],
                      nudged=bool(raw.get("nudged")))


def _known(cls: type, data: dict[str, Any]) -> Any:
    """`cls(**data)` without the keys a newer or older format added."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})
