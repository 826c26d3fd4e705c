"""How tool calls travel between the agent and the model: `agent.tool_format`.

- native: the OpenAI `tools` field and `tool_calls` in the reply (the paper's way);
- hermes: the schemas in the system prompt inside `<tools>`, calls written as `<tool_call>`
  blocks, results sent back as `<tool_response>` blocks in a user turn (what Qwen's and Hermes'
  chat templates render a tool message as, so the model sees what it was trained on);
- json: the same, with calls written as a fenced JSON block;
- bash: mini-swe-agent's way for the weakest models: one fenced bash block a reply runs in the
  persistent shell; `submit` and `str_replace_editor` are written as shell commands;
- auto: native until the server refuses `tools` (400) or the model writes a call as text (a
  `<tool_call>` or JSON call at once, bash blocks twice), then the text format it used
  (docs/tool-formats.md).

Replies in text formats are read by the same parser as `env serve` (`lis_tui.model.textcalls`). The
conversation keeps the model's text as it wrote it and the results as the model read them, so a
recorded episode is exactly what the model saw and produced. The agent calls one format object
(`read`, `assistant_message`, `results`); nothing else in the loop knows which format is in use.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from typing import Callable

from lis_tui.model.reply import ModelReply, ToolCall
from lis_tui.model.textcalls import FENCED, text_tool_calls
from tools import EDITOR_COMMANDS

FORMATS = ("auto", "native", "hermes", "json", "bash")
# {output_dir} is filled in by the agent (prompts.render): the sandbox's own (spec.places).
ANSWER = "{output_dir}/answer.txt"
NUDGE = ("Your reply called no tool. Work on the task with `execute_bash` or `str_replace_editor`; "
         f"once the answer is in {ANSWER} (or the files the task asks for are in {{output_dir}}), "
         "call `submit`.")


class NativeFormat:
    """OpenAI tool calls: the request carries `tools`, results are `tool` messages."""

    name = "native"
    nudge = NUDGE

    def request_tools(self, schemas: list[dict] | None) -> list[dict] | None:
        return schemas

    def system_note(self, schemas: list[dict]) -> str:
        return ""

    def read(self, reply: ModelReply, prefix: str) -> ModelReply:
        return reply

    def assistant_message(self, reply: ModelReply) -> dict:
        return reply.to_message()

    def results(self, answered: list[tuple[ToolCall, str]]) -> list[dict]:
        return [{"role": "tool", "tool_call_id": call.id, "content": text} for call, text in answered]


class _TextFormat:
    """Calls written in the reply's text; no `tools` in the request; results in a user turn."""

    name = ""
    nudge = ""

    def request_tools(self, schemas: list[dict] | None) -> list[dict] | None:
        return None

    def read(self, reply: ModelReply, prefix: str) -> ModelReply:
        if reply.tool_calls:  # a server that parsed the calls itself: keep them in the text's words
            return replace(reply, text=reply.text or _written(reply.tool_calls))
        calls, error = text_tool_calls(reply.text, prefix)
        return replace(reply, tool_calls=calls, format_error=error)

    def assistant_message(self, reply: ModelReply) -> dict:
        return {"role": "assistant", "content": reply.text}

    def results(self, answered: list[tuple[ToolCall, str]]) -> list[dict]:
        if not answered:
            return []
        return [{"role": "user", "content": "\n".join(self._result(c, t) for c, t in answered)}]

    def _result(self, call: ToolCall, text: str) -> str:
        raise NotImplementedError


class HermesFormat(_TextFormat):
    name = "hermes"
    nudge = (NUDGE + " Write each call as <tool_call>\n{\"name\": \"execute_bash\", \"arguments\": "
             "{\"command\": \"ls /testbed\"}}\n</tool_call>")

    def system_note(self, schemas: list[dict]) -> str:
        listed = "\n".join(json.dumps(s, ensure_ascii=False) for s in schemas)
        return ("# Tools\n\nYou may call one or more functions to do the task. Their signatures are "
                f"inside <tools></tools> XML tags:\n<tools>\n{listed}\n</tools>\n\nFor each call, "
                "write a JSON object with the function's name and arguments inside "
                "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                "\"arguments\": <args-json-object>}\n</tool_call>\nThe results come back inside "
                "<tool_response></tool_response> tags.")

    def _result(self, call: ToolCall, text: str) -> str:
        return f"<tool_response>\n{text}\n</tool_response>"


class JsonFormat(_TextFormat):
    name = "json"
    nudge = (NUDGE + ' Write a call as a fenced block:\n```json\n{"name": "execute_bash", '
             '"arguments": {"command": "ls /testbed"}}\n```')

    def system_note(self, schemas: list[dict]) -> str:
        tools = "\n".join(f"- {s['function']['name']}: {s['function']['description'].strip()}\n"
                          f"  arguments (JSON Schema): {json.dumps(s['function']['parameters'])}"
                          for s in schemas)
        return ("# Tools\n\nCall a tool by writing a fenced JSON block holding one object, or a "
                "list of objects that run in order:\n```json\n{\"name\": \"execute_bash\", "
                "\"arguments\": {\"command\": \"ls /testbed\"}}\n```\nEach result comes back "
                f"in the next message, headed with the tool's name.\nThe tools:\n{tools}")

    def _result(self, call: ToolCall, text: str) -> str:
        return f"Result of {call.name} ({call.id}):\n{text}"


BASH_NOTE = """\
# How to act

You have no function-calling tools. Act by writing exactly one fenced bash block in each reply:
```bash
ls /testbed
```
It runs in a persistent bash shell in the sandbox (the working directory, variables and \
background jobs carry over), and its output comes back in the next message. Only the first \
block of a reply runs; commands read no input.
Two more commands, each alone in its block (`submit` may also be a block's last line):
- `str_replace_editor COMMAND PATH [--file_text TEXT] [--old_str OLD] [--new_str NEW] \
[--insert_line N] [--view_range FIRST LAST]`: the file editor; COMMAND is view, create, \
str_replace, insert or undo_edit; quote the texts as in bash.
- `submit`: finish, once the answer is in {output_dir}/answer.txt (or the files the task \
asks for are in {output_dir})."""
BASH_LANGS = ("bash", "sh", "shell")
EDITOR_FLAGS = {"--file_text": "file_text", "--old_str": "old_str", "--new_str": "new_str",
                "--insert_line": "insert_line", "--view_range": "view_range"}


class BashFormat(_TextFormat):
    name = "bash"
    nudge = ("Your reply had no ```bash block, so nothing ran. Write one fenced ```bash block "
             f"with the next command; once the answer is in {ANSWER}, write `submit` in a block.")

    def __init__(self) -> None:
        self._note = ""

    def system_note(self, schemas: list[dict]) -> str:
        return BASH_NOTE

    def read(self, reply: ModelReply, prefix: str) -> ModelReply:
        blocks = bash_blocks(reply.text)
        self._note = ""
        if not blocks:
            return replace(reply, tool_calls=[], format_error="")
        if len(blocks) > 1:
            self._note = (f"\n[Your reply had {len(blocks)} bash blocks; only the first ran. "
                          "Write one block per reply.]")
        try:
            calls = bash_calls(blocks[0], prefix)
        except ValueError as exc:
            return replace(reply, tool_calls=[], format_error=f"Nothing ran: {exc}. {BASH_NOTE}")
        return replace(reply, tool_calls=calls, format_error="")

    def results(self, answered: list[tuple[ToolCall, str]]) -> list[dict]:
        note, self._note = self._note, ""
        if not answered:
            return []
        return [{"role": "user", "content": "\n".join(t for _, t in answered) + note}]


def bash_blocks(text: str) -> list[str]:
    """The bodies of the fenced bash (sh, shell) blocks in `text`, in order."""
    return [body for lang, body in FENCED.findall(text) if lang.lower() in BASH_LANGS]


def bash_calls(block: str, prefix: str) -> list[ToolCall]:
    """The tool calls one bash block stands for: the editor or `submit` when written as commands."""
    body = block.strip()
    lines = body.splitlines()
    if lines and lines[-1].strip() == "submit":
        rest = "\n".join(lines[:-1]).strip()
        calls = bash_calls(rest, prefix) if rest else []
        return calls + [ToolCall(f"{prefix}_{len(calls)}", "submit", "{}")]
    if body.split(None, 1)[:1] == ["str_replace_editor"]:
        return [ToolCall(f"{prefix}_0", "str_replace_editor", json.dumps(editor_arguments(body)))]
    return [ToolCall(f"{prefix}_0", "execute_bash", json.dumps({"command": body}, ensure_ascii=False))]


def editor_arguments(command: str) -> dict:
    """`str_replace_editor view /testbed/a.py --view_range 1 20` as the editor's JSON arguments."""
    try:
        words = shlex.split(command)[1:]
    except ValueError as exc:
        raise ValueError(f"the str_replace_editor command could not be split into words ({exc})") from None
    if len(words) < 2 or words[0] not in EDITOR_COMMANDS:
        raise ValueError("write `str_replace_editor COMMAND PATH [--flag VALUE ...]` with COMMAND "
                         f"one of {', '.join(EDITOR_COMMANDS)}")
    args: dict = {"command": words[0], "path": words[1]}
    rest = words[2:]
    while rest:
        flag = rest.pop(0)
        key = EDITOR_FLAGS.get(flag.split("=", 1)[0])
        if key is None:
            raise ValueError(f"str_replace_editor has no flag {flag[:40]!r}; the flags are "
                             f"{', '.join(EDITOR_FLAGS)}")
        value = flag.split("=", 1)[1] if "=" in flag else (rest.pop(0) if rest else None)
        if value is None:
            raise ValueError(f"{flag} needs a value")
        if key == "view_range":
            value = [value] + ([rest.pop(0)] if rest and "=" not in flag else [])
        args[key] = _number(value) if key == "insert_line" else \
            [_number(v) for v in value] if key == "view_range" else value
    return args


def _number(text: str) -> int | str:
    return int(text) if re.fullmatch(r"-?\d{1,9}", text) else text  # the editor says what is wrong


def _written(calls: list[ToolCall]) -> str:
    return "\n".join(f'<tool_call>\n{{"name": {json.dumps(c.name)}, "arguments": {c.arguments or "{}"}}}'
                     "\n</tool_call>" for c in calls)


TEXT_FORMATS: dict[str, Callable[[], _TextFormat]] = {
    "hermes": HermesFormat, "json": JsonFormat, "bash": BashFormat}


class AutoFormat:
    """Native until the server refuses `tools`, the model writes a call that a text format reads
    (hermes, json: that reply's calls run) or writes bash blocks twice; then the text format it
    used, for the rest of the run. `on_switch(format, reason, replied)` is told once; `replied`:
    the model had answered the request that the switch came from."""

    def __init__(self, on_switch: Callable[[object, str, bool], None]) -> None:
        self.current: object = NativeFormat()
        self.on_switch = on_switch
        self.accepted = False  # a request with `tools` has succeeded: a 400 is about something else
        self.text_replies = 0

    @property
    def name(self) -> str:
        return self.current.name

    @property
    def nudge(self) -> str:
        return self.current.nudge

    @property
    def switched(self) -> bool:
        return not isinstance(self.current, NativeFormat)

    def request_tools(self, schemas: list[dict] | None) -> list[dict] | None:
        return self.current.request_tools(schemas)

    def system_note(self, schemas: list[dict]) -> str:
        return self.current.system_note(schemas)

    def assistant_message(self, reply: ModelReply) -> dict:
        return self.current.assistant_message(reply)

    def results(self, answered: list[tuple[ToolCall, str]]) -> list[dict]:
        return self.current.results(answered)

    def read(self, reply: ModelReply, prefix: str) -> ModelReply:
        if self.switched:
            return self.current.read(reply, prefix)
        self.accepted = True
        if reply.tool_calls:
            return reply
        kind = written_format(reply.text)
        if kind is None:
            return reply
        self.text_replies += 1
        if kind in ("hermes", "json") and text_tool_calls(reply.text, prefix)[0]:
            # A readable call is an unmistakable one: answering "you called no tool" would be
            # false, and a small model that believes its command ran goes astray. It runs now.
            self._switch(kind, f"the model wrote a tool call as {kind} text; it runs, and the "
                               "run goes on in that format", replied=True)
        elif self.text_replies < 2:  # a bash block may be an example in prose: twice to switch
            return reply
        else:
            self._switch(kind, f"the model wrote its tool calls as {kind} text twice", replied=True)
        return self.current.read(reply, prefix)

    def refused(self, status: int | None, message: str = "") -> bool:
        """Whether a failed request is the server refusing `tools` (a 400, or an error that names
        them: llama.cpp without --jinja answers 500); if so, switch to hermes."""
        if self.switched or self.accepted or status is None:
            return False
        text = message.lower()
        about_tools = "tool" in text or "function" in text
        # A 400 that names another cause (the context length, max_tokens) is not about `tools`.
        other_cause = any(word in text for word in ("context", "too long", "max_tokens", "token"))
        if not about_tools and (status != 400 or other_cause):
            return False
        self._switch("hermes", f"the model server answered {status} to a request with `tools`",
                     replied=False)
        return True

    def _switch(self, kind: str, reason: str, replied: bool) -> None:
        self.current = TEXT_FORMATS[kind]()
        self.on_switch(self.current, reason, replied)


def written_format(text: str) -> str | None:
    """Which text format `text` writes tool calls in, if any (hermes, json, then bash)."""
    if "<tool_call>" in text:
        return "hermes"
    calls, error = text_tool_calls(text)
    if calls or error:
        return "json"
    return "bash" if bash_blocks(text) else None


def make_format(name: str, on_switch: Callable[[object, str, bool], None]) -> object:
    """The format object for `agent.tool_format`."""
    if name == "auto":
        return AutoFormat(on_switch)
    if name == "native":
        return NativeFormat()
    if name not in TEXT_FORMATS:
        raise ValueError(f"unknown agent.tool_format {name!r}; use one of {', '.join(FORMATS)}")
    return TEXT_FORMATS[name]()
