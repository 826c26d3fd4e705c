"""What the model may do in a sandbox: results, errors, the OpenAI tool schemas, and dispatch.

The tool and parameter names are the LLM-in-Sandbox paper's, so models trained for it work
unchanged. This package imports `isolation` only (never `lis_tui`, `textual` or `openai`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any, Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolResult:
    """What one tool call produced; `output` is the text the model reads."""

    output: str
    exit_code: int | None = None
    """Exit status of a shell command; None for tools that are not commands."""
    timed_out: bool = False
    """The command ran past its timeout and was interrupted."""
    truncated: bool = False
    """`output` was clipped to keep the model's context small."""
    error: bool = False
    """The call was a mistake (bad arguments, missing file, ...); `output` says what to fix."""
    submitted: bool = False
    """The model called `submit`: the episode ends."""
    stderr: str | None = None
    """A command's stderr when the shell keeps it apart (`output` is then its stdout); else None."""
    framed: bool = False
    """`output` is the whole answer the model reads, already in its harness's frame (the paper
    flavour, tools.paper): the agent sends it as it is."""


class ToolError(Exception):
    """A mistake the model made; the message is shown to it as the tool's answer."""


class CommandRunner(Protocol):
    """What `execute_bash` needs: `tools.shell.Shell` or anything shaped like it."""

    def run(self, command: str, timeout: float | None = None) -> ToolResult: ...


EDITOR_COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")

_EDITOR_DESCRIPTION = """\
View, create and edit text files inside the sandbox.
* Edits are remembered between calls, so `undo_edit` can revert the last change to a file.
* `view` on a file prints it with line numbers, like `cat -n`; on a directory it lists the \
files and directories up to 2 levels deep, hidden ones excluded.
* Paths are absolute, e.g. `/testbed/main.py`.
* `create` makes a new file; it refuses a path that already exists.
* `insert` adds `new_str` as whole lines after line `insert_line` (0 puts them at the top).
* Long output is cut and marked with `<response clipped>`; use `grep -n` and `view_range` then.
* Files are edited byte for byte: tabs, line endings and the final newline stay as they are.

Using `str_replace`:
* `old_str` must match the file EXACTLY, whitespace and indentation included, and must occur \
exactly once; add surrounding lines to make it unique.
* `new_str` is what replaces `old_str` (leave it out to delete `old_str`).
"""

_BASH_DESCRIPTION = """\
Run a bash command in the sandbox's persistent shell and return its output and exit code.
* The working directory, variables and background processes carry over between calls.
* Commands read no input: answer prompts with flags such as `-y`, or pipe the answer in.
* A command that runs too long is interrupted; start servers in the background with `&`.
* Long output is cut to its beginning and end; the full output is saved in a file you can grep.
"""

_SUBMIT_DESCRIPTION = """\
Finish the task. Call it once everything asked for is done and saved in the output directory \
(the answer file, or the files the task asks for). Takes no parameters.
"""


def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    parameters = {"type": "object", "properties": properties, "required": required}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


TOOL_SCHEMAS: list[dict] = [
    _function(
        "str_replace_editor",
        _EDITOR_DESCRIPTION,
        {
            "command": {
                "type": "string",
                "enum": list(EDITOR_COMMANDS),
                "description": "What to do: " + ", ".join(f"`{c}`" for c in EDITOR_COMMANDS) + ".",
            },
            "path": {
                "type": "string",
                "description": "Absolute path of the file or directory, e.g. `/testbed/main.py`.",
            },
            "file_text": {
                "type": "string",
                "description": "For `create`: the whole content of the new file.",
            },
            "old_str": {
                "type": "string",
                "description": "For `str_replace`: the exact text to replace; it must occur once.",
            },
            "new_str": {
                "type": "string",
                "description": "For `str_replace`: the replacement (empty if left out). "
                "For `insert`: the text to insert (required).",
            },
            "insert_line": {
                "type": "integer",
                "description": "For `insert`: `new_str` goes AFTER this line (0: at the top).",
            },
            "view_range": {
                "type": "array",
                "items": {"type": "integer"},
                "description": "For `view` of a file: `[start, end]`, 1-based and inclusive; "
                "`[start, -1]` shows from `start` to the end. Leave out to see the whole file.",
            },
        },
        ["command", "path"],
    ),
    _function(
        "execute_bash",
        _BASH_DESCRIPTION,
        {
            "command": {
                "type": "string",
                "description": "The bash command to run, e.g. `python3 solve.py`. May span lines.",
            },
            "timeout": {
                "type": "integer",
                "description": "Optional. Seconds to let the command run before it is "
                "interrupted; the session's default applies when left out.",
            },
        },
        ["command"],
    ),
    _function("submit", _SUBMIT_DESCRIPTION, {}, []),
]

_SCHEMAS_BY_NAME = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}


def _json_type(value: Any) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    names = {str: "string", int: "integer", float: "number", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def _matches(value: Any, schema: dict) -> bool:
    kind = schema.get("type")
    if kind == "array":
        return isinstance(value, list) and all(_matches(v, schema["items"]) for v in value)
    # bool is an int subclass in Python, but `true` is no line number
    return _json_type(value) == kind


def loads_model_json(text: str) -> Any:
    """`json.loads` for JSON a model wrote: nesting past the parser's recursion limit (a reply of
    100,000 `[`) is a JSONDecodeError like any other malformed JSON, answered to the model, not a
    RecursionError that ends the run."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text, 0) from None


def parse_arguments(tool: str, arguments: str | dict | None) -> dict:
    """Decode and check one tool call's arguments against its schema; raise ToolError."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        args: Any = {}
    elif isinstance(arguments, str):
        try:
            args = loads_model_json(arguments)
        except json.JSONDecodeError as e:
            raise ToolError(
                f"The arguments of `{tool}` are not valid JSON ({e.msg} at line {e.lineno}, "
                f"column {e.colno}). Send one JSON object, e.g. {_example(tool)}."
            ) from None
    else:
        args = arguments
    if not isinstance(args, dict):
        raise ToolError(
            f"The arguments of `{tool}` must be a JSON object, not {_json_type(args)}. "
            f"For example: {_example(tool)}."
        )
    schema = _SCHEMAS_BY_NAME[tool]
    # Models often send null for a parameter they mean to leave out.
    args = {k: v for k, v in args.items() if v is not None}
    for name in schema["required"]:
        if name not in args:
            raise ToolError(f"Missing required parameter `{name}` for `{tool}`.")
    for name, value in args.items():
        spec = schema["properties"].get(name)
        if spec is None:
            continue  # unknown extras are ignored, as the reference tools do
        if not _matches(value, spec):
            want = spec["type"] + (" of integers" if spec["type"] == "array" else "")
            raise ToolError(
                f"Parameter `{name}` of `{tool}` must be {_article(want)}, "
                f"got {_json_type(value)} {json.dumps(value)[:80]}."
            )
        if "enum" in spec and value not in spec["enum"]:
            allowed = ", ".join(spec["enum"])
            raise ToolError(f"Parameter `{name}` of `{tool}` must be one of: {allowed}.")
    return {k: v for k, v in args.items() if k in schema["properties"]}


def _article(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _example(tool: str) -> str:
    examples = {
        "execute_bash": {"command": "ls -la /testbed"},
        "str_replace_editor": {"command": "view", "path": "/testbed"},
        "submit": {},
    }
    return json.dumps(examples[tool])


class Toolbox:
    """The three tools of one sandbox, behind one `dispatch` that never raises."""

    def __init__(self, sandbox: Any, shell: CommandRunner | None = None, editor: Any = None,
                 network_notes: Any = None):
        from .editor import Editor  # here, not at the top: editor imports this module

        self.sandbox = sandbox
        self.editor = editor if editor is not None else Editor(sandbox)
        self._shell = shell
        self.network_notes = network_notes
        """A tools.network_notes.NetworkNotes: what the network refused, said in each command's
        result; None says nothing (the bench and paper mode: what the paper's harness sends)."""

    @property
    def shell(self) -> CommandRunner:
        """The persistent shell, started on first use (a bare `submit` needs none)."""
        if self._shell is None:
            from .shell import Shell

            self._shell = Shell(self.sandbox)
        return self._shell

    @property
    def schemas(self) -> list[dict]:
        """The OpenAI `tools` list for these tools."""
        return TOOL_SCHEMAS

    def dispatch(self, name: str, arguments: str | dict | None) -> ToolResult:
        """Run one tool call; mistakes and failures come back as ToolResult(error=True)."""
        try:
            if name not in _SCHEMAS_BY_NAME:
                known = ", ".join(f"`{n}`" for n in _SCHEMAS_BY_NAME)
                raise ToolError(f"Unknown tool `{name}`. The tools are: {known}.")
            return self._call(name, parse_arguments(name, arguments))
        except ToolError as e:
            return ToolResult(output=str(e), error=True)
        except Exception as e:  # the loop must go on; the log keeps the traceback
            log.exception("tool %s failed", name)
            text = f"The tool `{name}` failed: {type(e).__name__}: {e}"
            return ToolResult(output=text, error=True)

    def _call(self, name: str, args: dict) -> ToolResult:
        if name == "submit":
            return ToolResult(output="Submitted.", submitted=True)
        if name == "execute_bash":
            timeout = args.get("timeout")
            if timeout is not None and timeout <= 0:
                raise ToolError("Parameter `timeout` must be a positive number of seconds.")
            return self._noted(self.shell.run(args["command"], timeout=timeout))
        return self.editor.run(**args)

    def _noted(self, result: ToolResult) -> ToolResult:
        """The command's result with what the network refused meanwhile (without a proxy, the
        network is off: its output may show a name that did not resolve)."""
        if self.network_notes is None:
            return result
        off = getattr(self.sandbox, "network", None) is None
        said = self.network_notes.take(f"{result.output}\n{result.stderr or ''}", off)
        return replace(result, output=f"{result.output.rstrip()}\n\n{said}".lstrip()) if said else result

    def interrupt(self) -> None:
        """Stop the running command, from any thread; a shell not started yet is not started by this."""
        if self._shell is not None and hasattr(self._shell, "interrupt"):
            self._shell.interrupt()

    def close(self) -> None:
        """Stop the shell if one was started; the sandbox is the caller's to close."""
        if self._shell is not None and hasattr(self._shell, "close"):
            self._shell.close()


__all__ = [
    "EDITOR_COMMANDS",
    "TOOL_SCHEMAS",
    "CommandRunner",
    "ToolError",
    "ToolResult",
    "Toolbox",
    "parse_arguments",
]
