"""Compaction: a conversation's older steps become one summary, so that a long run goes on within
the model's context (lis-tui's own format; `LisShape` in lis_tui.agent.shapes decides when).

What the model is sent after a compaction:

    system      the prompt and the standing instructions (AGENTS.md), whole
    user        the task, whole; the summary of the steps taken out; and, when the request being
                worked on now was a follow-up among them, that request, whole
    ...         the latest steps, whole: each an assistant message and its results

The task and the summary share one user message so that the roles still alternate, as chat
templates such as Gemma's and Mistral's insist. lis-tui writes the summary itself: each step's
words and calls cut to a line, each result to its first characters (docs/running.md says why: it
is instant, costs no tokens and cannot fail). A later compaction reads the earlier summary back
out of that message and adds to it, dropping its oldest lines when it would grow past its share.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

START = ("[Earlier in this conversation, compacted by lis-tui to fit the model's context: your steps "
         "and tool calls cut to a line, each result to its start. Run a command again to see all of it.]")
END = "[End of the summary. The latest steps follow whole.]"
SAID, CALL, RESULT = 240, 240, 160
"""Characters kept of an assistant's words, of one call's arguments, of one result."""
_DROPPED = re.compile(r"^\((\d+) earlier lines left out\)$")


def tokens(messages: list[dict]) -> int:
    """About how many tokens `messages` take in a request: four characters of their JSON a token."""
    return sum(len(json.dumps(m, ensure_ascii=False)) + 2 for m in messages) // 4


@dataclass
class Compaction:
    """A compacted conversation: what to send from now on, and how much was taken out."""

    messages: list[dict]
    summarized: int
    """Messages taken out of what is sent (summarized)."""
    task_in_head: bool
    """The current task is now in the first user message (whole), not where it was."""


def compact(messages: list[dict], current: dict | None, room: int, fixed: int = 0) -> Compaction | None:
    """`messages` with their older steps summarized, taking about half of `room` tokens where the
    latest step allows (`fixed`: what the request adds, the tool schemas); None when there is no
    earlier step to take out. `current` is the message of the task being worked on now (kept whole)."""
    lead = 1 if messages and messages[0].get("role") == "system" else 0
    if len(messages) <= lead + 1:
        return None
    head, turns = messages[lead], _turns(messages[lead + 1:])
    task, lines, pinned = read_head(_text(head.get("content")))
    whole = pinned if current is head else current_text(current)  # the request kept whole
    base = fixed + tokens(messages[:lead]) + (len(task) + len(whole)) // 4
    cap = max(room // 4, 100)  # the summary's share of the room, in tokens
    start, tail = len(turns) - 1, tokens(turns[-1])  # the latest step stays whole, whatever its size
    while start > 0 and base + cap + tail + tokens(turns[start - 1]) <= room // 2:
        start -= 1  # and the ones before it while they fit in half the room
        tail += tokens(turns[start])
    if start == 0:
        return None
    taken = [m for turn in turns[:start] for m in turn]
    if current is not head and pinned:  # an earlier request, answered since: a line of the summary
        lines, pinned = [*lines, f"- earlier request: {_line(pinned, SAID)}"], ""
    if current is not None and any(m is current for m in taken):
        pinned = current_text(current)
    lines = _fit([*lines, *(line for m in taken if m is not current for line in _digest(m))], cap * 4)
    text = f"{task}\n\n{START}\n" + "\n".join(lines) + f"\n{END}" + (f"\n\n{pinned}" if pinned else "")
    kept = [m for turn in turns[start:] for m in turn]
    in_head = current is head or any(m is current for m in taken)
    return Compaction([*messages[:lead], {"role": "user", "content": text}, *kept], len(taken), in_head)


def read_head(content: str) -> tuple[str, list[str], str]:
    """The first user message read back: the task, an earlier summary's lines, the request that
    followed it (each empty when there is none)."""
    at = content.find(f"\n\n{START}\n")
    end = content.find(f"\n{END}", at)
    if at < 0 or end < 0:
        return content, [], ""
    lines = content[at + len(START) + 3:end].split("\n")
    return content[:at], [line for line in lines if line], content[end + len(END) + 1:].lstrip("\n")


def current_text(message: dict | None) -> str:
    return _text(message.get("content")) if message is not None else ""


def _turns(messages: list[dict]) -> list[list[dict]]:
    """The steps: each begins at an assistant message and holds the results and notes after it."""
    turns: list[list[dict]] = []
    for message in messages:
        if message.get("role") == "assistant" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def _digest(message: dict) -> list[str]:
    """One message as summary lines."""
    text = _text(message.get("content"))
    if message.get("role") != "assistant":
        return [f"  -> {_line(text, RESULT) or '(nothing)'}"]
    lines = [f"- you: {_line(text, SAID)}" if text.strip() else "- you:"]
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            lines.append(f"  called {function.get('name')} {_line(str(function.get('arguments', '')), CALL)}")
    return lines


def _fit(lines: list[str], budget: int) -> list[str]:
    """The newest lines that fit in `budget` characters, after a line saying how many were left out."""
    dropped = 0
    if lines and (seen := _DROPPED.match(lines[0])):
        dropped, lines = int(seen.group(1)), lines[1:]
    size = sum(len(line) + 1 for line in lines)
    cut = 0
    while cut < len(lines) and size > budget:
        size -= len(lines[cut]) + 1
        cut += 1
    return ([f"({dropped + cut} earlier lines left out)"] if dropped + cut else []) + lines[cut:]


def _line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else f"{flat[:limit]}… ({len(text):,} characters)"


def _text(content: Any) -> str:
    if isinstance(content, list):  # parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""
