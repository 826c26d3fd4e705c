"""One episode as a page of its own, `trajectory.html` beside its `trajectory.json`: the task, each
step's words, commands and their output, and the answer. report.html links each episode here, so
reading one needs a browser, not a JSON viewer; the raw JSON stays a link away.

Everything on the page is the model's or the sandbox's text: escaped, control characters visible.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lis_tui.bench.report.charts import _e, _outside, page
from lis_tui.runs.replay import load_trajectory

OUTPUT_SHOWN = 20_000
"""Characters of one text shown (a tool's output is about that long at most already)."""
_STYLE = ("<style>pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;padding:.5em;"
          "margin:.3em 0}.step{border-top:1px solid #ccc;margin-top:1em}.tool{margin-left:1em}</style>")


def write_episode_pages(records: list[dict[str, Any]], output: Path) -> dict[str, str]:
    """Write each episode's page beside its trajectory under `output`; returns, per trajectory
    path (as in results.jsonl), its page's path. One that cannot be read gets no page."""
    pages = {}
    for record in records:
        path = str(record.get("trajectory") or "")
        if not path.endswith(".json") or _outside(path):
            continue
        try:
            doc = load_trajectory(output / path)
        except ValueError:
            continue  # missing (a crashed episode) or not a trajectory: the JSON link says so
        target = path[:-len(".json")] + ".html"
        back = "../" * path.count("/") + "report.html"
        try:
            (output / target).write_text(episode_page(doc, Path(path).name, back), encoding="utf-8")
        except OSError:
            continue
        pages[path] = target
    return pages


def episode_page(doc: dict[str, Any], json_name: str, report: str) -> str:
    """The page of one trajectory: links back, the task, the steps, the end."""
    title = f"{_text(doc.get('id')) or 'episode'}: {_text(doc.get('mode'))}"
    links = f'<p><a href="{_e(report)}">report</a> · <a href="{_e(json_name)}">raw JSON</a></p>'
    end = (f"<h2>End: {_e(_text(doc.get('finish_reason')))}</h2>"
           + _block("message", doc.get("message")) + _block("answer", doc.get("answer"))
           + _block("answer note", doc.get("answer_note")))
    steps = "".join(_step(s) for s in doc.get("steps") or [] if isinstance(s, dict))
    body = links + _STYLE + "<h2>Task</h2>" + _pre(doc.get("task")) + steps + end
    return page(title, {}, "", body)


def _step(step: dict[str, Any]) -> str:
    parts = [f'<div class="step"><h3>Step {_e(_text(step.get("step")))}</h3>']
    if _text(step.get("reasoning")):
        parts.append(f"<details><summary>reasoning</summary>{_pre(step.get('reasoning'))}</details>")
    if _text(step.get("text")):
        parts.append(_pre(step.get("text")))
    for call in step.get("tool_calls") or []:
        if isinstance(call, dict):
            parts.append(_call(call))
    if step.get("nudged"):
        parts.append("<p>(no tool call: reminded to use one)</p>")
    return "".join(parts) + "</div>"


def _call(call: dict[str, Any]) -> str:
    name = _text(call.get("name"))
    arguments = _text(call.get("arguments"))
    try:
        decoded = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        decoded = None
    if name == "execute_bash" and isinstance(decoded, dict) and isinstance(decoded.get("command"), str):
        shown = decoded["command"]
    elif isinstance(decoded, dict):
        shown = json.dumps(decoded, indent=1, ensure_ascii=False)
    else:
        shown = arguments
    code = call.get("exit_code")
    result = f"exit {code}" if isinstance(code, int) else "error" if call.get("error") else "done"
    return (f'<div class="tool"><b>{_e(name)}</b> ({_e(result)})' + _pre(shown)
            + _pre(call.get("output")) + "</div>")


def _block(label: str, value: Any) -> str:
    return f"<p>{_e(label)}:</p>{_pre(value)}" if _text(value) else ""


def _pre(value: Any) -> str:
    text = _text(value)
    if len(text) > OUTPUT_SHOWN:
        text = text[:OUTPUT_SHOWN] + f"\n[... {len(text) - OUTPUT_SHOWN:,} more characters in the raw JSON]"
    return f"<pre>{_e(text)}</pre>"


def _text(value: Any) -> str:
    """A field as text; one of the wrong type (the file may have been edited) as nothing."""
    return value if isinstance(value, str) else str(value) if isinstance(value, (int, float)) else ""

