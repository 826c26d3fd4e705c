"""Tool observations as the paper's harness words them (`agent.observation = "paper"`).

llm-in-sandbox 0.2.0, whose format its RL models were trained on, answers each tool call with:

    Exit code: 0                               (non-zero: "Error: Exit code N"; a timeout: -1)
    Execution output of \\[execute_bash]:
    \\[STDOUT]
    ...stdout...
    \\[STDERR]                                  (only when there is any)
    ...stderr...

each stream cut to its first and last 40 lines past 80, the editor's answer after an
`Execution output of \\[str_replace_editor]:` line, `submit` answered `<<< Finished >>>`, and
`Steps Remaining: N` added to the newest message before every model call, and a reply that
called no tool answered with `PAPER_NUDGE` as a user message. The backslashes
before the brackets are in what its model reads (they escape Rich markup in its console), so
they are here too. The words of our tools' answers stay ours; only this frame is the paper's.
"""
from __future__ import annotations

from typing import Any

from tools import ToolResult

KEEP_LINES = 40  # lines kept at each end of a long stream
PAPER_NUDGE = ("\nYou forgot to use a function call in your response. \nYOU MUST USE A FUNCTION "
               "CALL IN EACH RESPONSE.\n\nIMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.\n")
"""The user message the harness sends after a reply that called no tool (its words, as its
models read them)."""
_DIVIDER = "-" * 50


def paper_observation(tool: str, result: ToolResult, bound: int) -> str:
    """One tool call's answer, framed as the paper's harness frames it; each part at most about
    `bound` characters (our own cut, on top of the paper's line cut)."""
    if tool == "submit" and result.submitted:
        return "<<< Finished >>>"
    if tool != "execute_bash" or result.exit_code is None and not result.timed_out:
        return f"Execution output of \\[{tool}]:\n{_cut(result.output, bound)}"
    parts = [f"Exit code: {_exit(result)}", "Execution output of \\[execute_bash]:",
             f"\\[STDOUT]\n{_cut(result.output, bound)}"]
    if (result.stderr or "").strip():
        parts.append(f"\\[STDERR]\n{_cut(result.stderr or '', bound)}")
    return "\n".join(parts)


def paper_not_run(tool: str) -> str:
    """The harness's answer to a call whose arguments are JSON but not an object: it runs
    nothing and frames no output (a `submit` so called still finishes)."""
    if tool in ("submit", "finish"):
        return "<<< Finished >>>"
    if tool in ("execute_bash", "bash"):
        return f"Exit code: 0\nExecution output of \\[{tool}]:\n"
    return f"Execution output of \\[{tool}]:\n"


def steps_remaining(remaining: int) -> str:
    """The line added to the newest message before a model call."""
    if remaining > 0:
        return f"Steps Remaining: {remaining}"
    return "You have reached the maximum number of steps. Please submit your answer NOW."


def _exit(result: ToolResult) -> str:
    if result.timed_out or result.exit_code is None:
        return "-1"
    return "0" if result.exit_code == 0 else f"Error: Exit code {result.exit_code}"


def _cut(text: str, bound: int) -> str:
    """The paper's cut (first and last KEEP_LINES lines of a longer text), then ours."""
    lines = text.splitlines()
    if len(lines) > 2 * KEEP_LINES:
        text = "\n".join([*lines[:KEEP_LINES], _DIVIDER,
                          "<Observation truncated in middle for saving context>", _DIVIDER,
                          *lines[-KEEP_LINES:]])
    if len(text) > bound:
        half = bound // 2
        text = (f"{text[:half]}\n[... {len(text) - 2 * half:,} characters cut by lis-tui ...]\n"
                f"{text[-half:]}")
    return text


_KNOWN = {"role", "content", "tool_calls", "function_call", "audio", "annotations", "refusal"}
"""Fields of the server's message that litellm reads as its own; the rest it keeps aside."""


def paper_assistant_message(reply: Any) -> dict:
    """The assistant turn as the package sends it back: litellm's reading of the server's message
    (`model_dump(exclude_none=True)`): no `content` when it was null, the reasoning re-sent as
    `reasoning_content`, and what litellm does not know (`refusal`, a `reasoning` field, ...)
    under `provider_specific_fields`, which goes to the server too."""
    sent = _server_message(reply.raw)
    message: dict[str, Any] = {"role": "assistant"}
    if sent.get("content") is not None:
        message["content"] = sent["content"]
    elif reply.text:  # a text format read the calls out of the text: keep what is left
        message["content"] = reply.text
    if reply.tool_calls:
        message["tool_calls"] = [{"function": {"arguments": c.arguments, "name": c.name},
                                  "id": c.id, "type": "function"} for c in reply.tool_calls]
    aside = {"refusal": sent.get("refusal"),
             **{k: v for k, v in sent.items() if k not in _KNOWN}}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
        aside.setdefault("reasoning_content", reply.reasoning)
    message["provider_specific_fields"] = aside
    return message


def _server_message(raw: Any) -> dict:
    try:
        completion = raw.to_dict() if hasattr(raw, "to_dict") else raw
        message = completion["choices"][0]["message"]
    except (AttributeError, KeyError, IndexError, TypeError):
        return {}
    return message if isinstance(message, dict) else {}


def paper_prompt_tokens(messages: list[dict]) -> int:
    """The package's count of the next prompt, checked against its trajectory limit before each
    call (litellm's `token_counter` on the messages alone, no tool schemas): 3 a message, every
    text field of it (role and content included) and its calls' arguments, 1 more for a
    `name`, and 3 for the reply. Each text is counted by `lis_tui.model.tokens` (tiktoken where it is
    installed, else about 4 characters a token); litellm counts with tiktoken's cl100k_base
    for a model it does not know, so the two stop within a step or so of each other."""
    from lis_tui.model.tokens import count  # noqa: PLC0415 (paper runs only)

    total = 3
    for message in messages:
        total += 3
        for key, value in message.items():
            if key == "tool_calls" and isinstance(value, list):
                total += sum(count(str((c.get("function") or {}).get("arguments", [])))
                             for c in value if isinstance(c, dict))
            elif isinstance(value, str):
                total += count(value) + (key == "name")
    return total
