"""The paper flavour of the toolbox: llm-in-sandbox 0.2.0's three tools as its agent runs them
(`bench paper:SUITE` and any run with the paper's observation format).

Each call is answered with the whole text the package's model reads (`ToolResult.framed`):
its frame around a command's stdout and stderr, its editor's replies, `<<< Finished >>>` for
`submit`, and its words for an unknown tool or a command left empty (those two unframed, as
there). Commands run as tools.paper_shell says; the editor is tools.paper_editor. At start the
working directory becomes a git repository, as the package's runtime makes it.
"""
from __future__ import annotations

import copy
import json
import shlex
from typing import Any

from tools import TOOL_SCHEMAS, ToolResult, Toolbox, loads_model_json
from tools.paper_editor import PackageEditor
from tools.paper_shell import PACKAGE_TIMEOUT, PackageCommands, Ran

KEEP_LINES = 40  # lines kept at each end of a stream longer than twice this
_DIVIDER = "-" * 50


_EDITOR = """\
View, create and edit files inside the sandbox.
* `view` of a .py or .rst file prints it with line numbers, like `cat -n` (other files: use \
`cat` through execute_bash); of a directory, it lists its directories and .py and .rst files up \
to 2 levels deep, hidden ones excluded.
* `create` writes `file_text` to `path`, over any file already there.
* `str_replace` replaces `old_str`, which must occur exactly once, with `new_str`.
* `insert` puts `new_str` after line `insert_line`.
* Long views are clipped and marked with `<response clipped>`.
"""
_BASH = """\
Run a bash command in a fresh shell in /testbed; returns its exit code, stdout and stderr.
* Nothing but files carries over between commands: `cd` and `export` in the command that needs them.
* A command may run for 120 seconds.
"""


def package_shaped_schemas() -> list[dict]:
    """The package's three tools with its parameters, described in lis-tui's words: what a
    paper run offers when the package's own schemas cannot be read (it is not installed)."""
    schemas = copy.deepcopy(TOOL_SCHEMAS)
    for schema in schemas:
        fn = schema["function"]
        props = fn["parameters"]["properties"]
        if fn["name"] == "execute_bash":
            props.pop("timeout", None)
            fn["description"] = _BASH
        elif fn["name"] == "str_replace_editor":
            props["command"]["enum"] = ["view", "create", "str_replace", "insert"]
            props["command"]["description"] = "What to do: `view`, `create`, `str_replace`, `insert`."
            fn["description"] = _EDITOR
    return schemas


def cut(text: str) -> str:
    """The package's cut of a long stream: its first and last KEEP_LINES lines."""
    lines = text.splitlines()
    if len(lines) <= 2 * KEEP_LINES:
        return text
    return "\n".join([*lines[:KEEP_LINES], _DIVIDER,
                      "<Observation truncated in middle for saving context>", _DIVIDER,
                      *lines[-KEEP_LINES:]])


def frame(ran: Ran) -> str:
    """A command's answer in the package's frame (its escaped brackets included)."""
    stdout, stderr = cut(ran.stdout), cut(ran.stderr)
    parts = [f"Exit code: {ran.status}", "Execution output of \\[execute_bash]:",
             f"\\[STDOUT]\n{stdout}" if stdout.strip() else "\\[STDOUT]\n"]
    if stderr.strip():
        parts.append(f"\\[STDERR]\n{stderr}")
    return "\n".join(parts)


class PaperToolbox(Toolbox):
    """`schemas`: the package's own (read from the installed package by the caller), else
    `package_shaped_schemas()`."""

    def __init__(self, sandbox: Any, shell: Any = None, schemas: list[dict] | None = None,
                 timeout: int = PACKAGE_TIMEOUT, cwd: str = "/testbed"):
        super().__init__(sandbox, shell=shell, editor=object())
        self._schemas = schemas or package_shaped_schemas()
        self._timeout, self._cwd = timeout, cwd
        self._commands: PackageCommands | None = None

    @property
    def schemas(self) -> list[dict]:
        return self._schemas

    @property
    def commands(self) -> PackageCommands:
        """The package's way of running commands, started (with its `git init`) on first use."""
        if self._commands is None:
            self._commands = PackageCommands(self.shell, self.sandbox, self._cwd, self._timeout)
            # its runtime's `cd /testbed && git init 2>/dev/null || true`, nothing of it shown
            self.shell.run(f"\\command git init -q -- {shlex.quote(self._cwd)} >/dev/null 2>&1")
        return self._commands

    def dispatch(self, name: str, arguments: str | dict | None) -> ToolResult:
        if name == "submit":
            return ToolResult("<<< Finished >>>", submitted=True, framed=True)
        try:
            args = arguments if isinstance(arguments, dict) else \
                loads_model_json(arguments) if arguments and arguments.strip() else {}
        except json.JSONDecodeError:
            args = None
        if not isinstance(args, dict):  # the agent answers these before they come here
            return ToolResult(f"Execution output of \\[{name}]:\n", framed=True, error=True)
        if name == "execute_bash":
            command = args.get("command", "")
            if not command:
                return ToolResult("Error: No command provided.", framed=True, error=True)
            ran = self.commands.run(command if isinstance(command, str) else str(command))
            return ToolResult(frame(ran), exit_code=ran.exit_code, timed_out=ran.timed_out,
                              framed=True)
        if name == "str_replace_editor":
            text = PackageEditor(self.commands).run(args)
            return ToolResult(f"Execution output of \\[str_replace_editor]:\n{text}", framed=True)
        return ToolResult(f"Unknown action: {name}", framed=True, error=True)
