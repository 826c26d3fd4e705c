"""A saved `trajectory.json` read back as the events the agent sent, so a replay is drawn by the
same code as a live run (`lis-tui replay`)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Iterator

from lis_tui.agent.loop import decode_arguments
from lis_tui.agent.events import (
    Compacted, Event, ModelReply, RunFinished, RunStarted, RunUsage, StepFinished, StepRecord, StepStarted,
    ToolFinished, ToolRecord, ToolStarted,
)
from lis_tui.model.client import ToolCall, Usage
from lis_tui.runs.store import WHOLE_LIMIT, open_run_file


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
                         "trajectory.json (runs are kept under $XDG_DATA_HOME/lis-tui/runs/; "
                         "lis-tui runs lists them all)") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:  # "Expecting value: line 1" says nothing
        kind = "UTF-8" if isinstance(exc, UnicodeDecodeError) else "JSON"
        raise ValueError(f"cannot read {path} as a trajectory: it is not {kind}, so not one of "
                         "lis-tui's; give a run's id from `lis-tui runs`, its directory or its "
                         "trajectory.json") from None
    except (OSError, RecursionError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise ValueError(f"{path} is not a lis-tui trajectory (no \"steps\" list)")
    return doc


def replay_events(doc: dict[str, Any]) -> Iterator[Event]:
    """The run's events in order: RunStarted, each step's reply and tools, RunFinished. A field
    of the wrong type (the file may come from anywhere, a sandbox included) is read as empty."""
    tools = doc.get("tools")
    yield RunStarted(str(doc.get("task", "")), str(doc.get("mode", "sandbox")), [],
                     [t for t in tools if isinstance(t, dict)] if isinstance(tools, list) else [])
    usage, last = RunUsage(), 0
    follow_ups = iter(doc.get("follow_ups") if isinstance(doc.get("follow_ups"), list) else [])
    compacted = _compactions(doc.get("compactions"))
    for done, raw in enumerate(doc["steps"]):
        step = _step(raw if isinstance(raw, dict) else {})
        if step.step <= last:  # steps count from 1 again: a follow-up started here
            yield RunStarted(str(next(follow_ups, "(follow-up)")), str(doc.get("mode", "")), [], [])
        last = step.step
        yield from compacted.pop(done, [])
        yield StepStarted(step.step)
        calls = [ToolCall(t.id, t.name, t.arguments) for t in step.tool_calls]
        yield ModelReply(step.step, step.text, step.reasoning, calls, step.usage,
                         step.model_duration)
        for index, (call, tool) in enumerate(zip(calls, step.tool_calls)):
            yield ToolStarted(step.step, index, call, decode_arguments(call.arguments))
            yield ToolFinished(step.step, index, tool)
        usage.add(step)
        yield StepFinished(step.step, step, [])
    for events in compacted.values():  # in a step that did not finish
        yield from events
    if doc.get("finish_reason"):
        yield RunFinished(str(doc["finish_reason"]), _text(doc.get("answer")), len(doc["steps"]), usage,
                          _number(doc.get("duration"), 0.0), _text(doc.get("message")),
                          _text(doc.get("answer_note")))


def _compactions(raw: Any) -> dict[int, list[Compacted]]:
    """The compactions recorded, as events, by the number of steps done before each."""
    found: dict[int, list[Compacted]] = {}
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, dict):
            continue
        tokens = entry.get("tokens") if isinstance(entry.get("tokens"), list) and len(entry["tokens"]) == 2 else [0, 0]
        event = Compacted(_number(entry.get("step"), 0), _text(entry.get("reason")),
                          _number(entry.get("summarized"), 0), _number(tokens[0], 0), _number(tokens[1], 0),
                          _number(entry.get("limit"), 0), [])
        found.setdefault(_number(entry.get("steps_done"), 0), []).append(event)
    return found


def _step(raw: dict[str, Any]) -> StepRecord:
    usage = raw.get("usage") if isinstance(raw.get("usage"), dict) else {}
    tokens = Usage(_number(usage.get("prompt_tokens"), 0), _number(usage.get("completion_tokens"), 0),
                   _number(usage.get("cached_tokens"), 0), bool(usage.get("estimated"))) \
        if usage.get("prompt_tokens") is not None else None
    calls = raw.get("tool_calls") if isinstance(raw.get("tool_calls"), list) else []
    reason = raw.get("finish_reason")
    return StepRecord(step=_number(raw.get("step"), 0), started=_number(raw.get("started"), 0.0),
                      duration=_number(raw.get("duration"), 0.0),
                      model_duration=_number(raw.get("model_duration"), 0.0),
                      text=_text(raw.get("text")), reasoning=_text(raw.get("reasoning")),
                      finish_reason=None if reason is None else str(reason), usage=tokens,
                      tool_calls=[_known(ToolRecord, t) for t in calls if isinstance(t, dict)],
                      nudged=bool(raw.get("nudged")))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _number(value: Any, default: int | float) -> Any:
    """`value` as the type of `default` when it is a number (not a bool), else `default`."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        try:
            return type(default)(value)
        except OverflowError:  # int(inf)
            return default
    return default


def _known(cls: type, data: dict[str, Any]) -> Any:
    """`cls(**data)` without the keys a newer or older format added, each value of its field's
    type (text as text, numbers as numbers), a missing required one empty."""
    values = {}
    for f in dataclasses.fields(cls):
        given, kind = data.get(f.name), str(f.type)
        if kind == "str" or (given is not None and kind == "str | None"):
            values[f.name] = _text(given)
        elif kind == "bool":
            values[f.name] = bool(given)
        elif kind in ("int", "float"):
            values[f.name] = _number(given, 0 if kind == "int" else 0.0)
        elif kind == "int | None":
            values[f.name] = _number(given, 0) if given is not None else None
    return cls(**values)
