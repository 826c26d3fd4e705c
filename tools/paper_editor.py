"""`str_replace_editor` as llm-in-sandbox 0.2.0 answers it (the paper flavour).

Its editor is a few shell lines through the runtime (one stream, stdout and stderr together)
and string work in Python: `view` of a directory lists .py and .rst files two levels deep,
`view` of a file refuses any but .py and .rst, `create` writes over whatever is there, and a
file is written with `echo`, so each write ends it with one more newline than it was given.
Its quirks are the model's world, so they are kept; the replies are the package's words, as
its models read them.
"""
from __future__ import annotations

import re
from typing import Any

from tools.paper_shell import PackageCommands

_PLAIN_PATH = re.compile(r"/[A-Za-z0-9._+@%,=-][A-Za-z0-9._+@%,=/-]*")
"""An absolute path the shell reads as it is: no space, quote, glob, `$`, `~` or the like."""
_ECHO_OPTION = re.compile(r"-[neE]+")
AROUND = 4  # lines shown on each side of an edit
MAX_SHOWN = 10_000  # characters of a view or a listing before it is clipped
CLIPPED = ("<response clipped><NOTE>To save on context only part of this file has been shown to "
           "you. You should retry this tool after you have searched inside the file with `grep -n` "
           "in order to find the line numbers of what you are looking for.</NOTE>")


def _clip(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + CLIPPED


def _numbered(text: str, first: int) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(text.split("\n"), first))


def _shown(text: str, what: str, first: int = 1) -> str:
    return (f"Here's the result of running `cat -n` on {what}:\n"
            f"{_numbered(_clip(text).expandtabs(), first)}\n")


def _quoted(text: str) -> str:
    """`text` inside single quotes for the shell (each quote closed, escaped, reopened)."""
    return "'" + text.replace("'", "'\"'\"'") + "'"


class PackageEditor:
    """The package's editor over `commands`; `run` returns the text after its frame line."""

    def __init__(self, commands: PackageCommands):
        self.commands = commands

    def _sh(self, line: str) -> tuple[str, str]:
        ran = self.commands.run(line, apart=False)
        return ran.stdout, ran.status

    def run(self, args: dict[str, Any]) -> str:
        command, path = args.get("command", ""), args.get("path", "")
        if not command or not path:
            return "Error: command and path are required."
        action = {"view": self._view, "create": self._create, "str_replace": self._replace,
                  "insert": self._insert}.get(command)
        return action(path, args) if action else f"Unknown command: {command}"

    def _view(self, path: str, args: dict) -> str:
        kind = self._sh(f"test -d {path} && echo 'dir' || (test -f {path} && echo 'file' || "
                        "echo 'notfound')")[0].strip()
        if kind == "dir":
            listing = self._sh(f"find {path} -maxdepth 2 -not -path '*/.*' \\( -type d -o -name "
                               "'*.py' -o -name '*.rst' \\) | head -100")[0]
            if not listing:
                return f"(empty directory: {path})"
            return f"Here's the files and directories up to 2 levels deep in {path}, excluding hidden:\n{listing}"
        if kind != "file":
            return f"Error: Path not found: {path}"
        if not path.endswith((".py", ".rst")):
            return ("ERROR: Viewing non-Python files is disallowed for saving context. "
                    f"File '{path}' is not a .py or .rst file.")
        text = self._sh(f"cat {path}")[0]
        if not text:
            return f"(empty file: {path})"
        lines = text.expandtabs().split("\n")
        first, last = 1, len(lines)
        span = args.get("view_range")
        if span and len(span) == 2:
            first, last = span
            if not 1 <= first <= len(lines):
                return (f"Error: Invalid view_range {span}: start line must be in "
                        f"[1, {len(lines)}]")
            if last != -1 and not first <= last <= len(lines):
                return (f"Error: Invalid view_range {span}: end must be >= start and <= "
                        f"{len(lines)}, or -1 to view until end.")
            last = len(lines) if last == -1 else last
        body = _numbered("\n".join(lines[first - 1:last]), first)
        return _clip(f"Here's the result of running `cat -n` on {path}:\n{body}")

    def _create(self, path: str, args: dict) -> str:
        text = str(args.get("file_text", ""))
        if not self._wrote(path, text):
            output, status = self._sh(f"mkdir -p $(dirname {path}) && echo {_quoted(text)} > {path}")
            if "Error" in status:
                return f"Error creating file: {output}"
        return (f"File created at {path}. {_shown(text, path)}Review the file and make sure that "
                "it is as expected. Edit the file if necessary.")

    def _wrote(self, path: str, text: str) -> bool:
        """What `mkdir -p $(dirname P) && echo 'TEXT' > P` does, done from the host when the shell
        would read P as it is and `echo` would print TEXT and a newline (no option-like TEXT,
        no NUL, within one argument's size); False, having changed nothing, when that is not
        so or the write fails, for the shell line to do it and word any error as bash does.
        It spares three processes per `create` (bench throughput; see tools/paper_shell.py)."""
        if not _PLAIN_PATH.fullmatch(path) or "\0" in text or _ECHO_OPTION.fullmatch(text) \
                or len(text) > 100_000:
            return False
        try:
            self.commands.sandbox.write_file(path, (text + "\n").encode())
        except OSError:
            return False
        return True

    def _replace(self, path: str, args: dict) -> str:
        old = args.get("old_str", "")
        if not old:
            return "Error: old_str is required for str_replace."
        text = self._sh(f"cat {path}")[0]
        if not text:
            return f"Error: Could not read file {path}"
        text, old = text.expandtabs(), old.expandtabs()
        new = args.get("new_str") or ""
        new = new.expandtabs() if new else ""
        found = text.count(old)
        if found == 0:
            return f"Error: No occurrences of old_str found in {path} for replacement."
        if found > 1:
            return (f"Error: Multiple occurrences ({found}) of old_str found in {path}. Please "
                    "ensure it is unique before using str_replace.")
        at = text.split(old)[0].count("\n")
        edited = text.replace(old, new, 1)
        if "Error" in self._sh(f"echo {_quoted(edited)} > {path}")[1]:
            return f"Error writing file: {path}"
        start = max(0, at - AROUND)
        snippet = "\n".join(edited.split("\n")[start:at + AROUND + new.count("\n") + 1])
        return (f"The file {path} has been edited. {_shown(snippet, f'a snippet of {path}', start + 1)}"
                "Review the changes and make sure they are as expected. Edit the file again if necessary.")

    def _insert(self, path: str, args: dict) -> str:
        after, new = args.get("insert_line", 0), args.get("new_str", "")
        if not new:
            return "Error: new_str is required for insert."
        text = self._sh(f"cat {path}")[0]
        text = text.expandtabs() if text else ""
        lines = text.split("\n") if text else []
        if after < 0 or after > len(lines):
            return f"Error: Invalid insert_line {after}. Must be in [0, {len(lines)}]."
        added = new.expandtabs().split("\n")
        edited = "\n".join(lines[:after] + added + lines[after:])
        if "Error" in self._sh(f"echo {_quoted(edited)} > {path}")[1]:
            return f"Error writing file: {path}"
        snippet = "\n".join(lines[max(0, after - AROUND):after] + added + lines[after:after + AROUND])
        return (f"The file {path} has been edited. "
                f"{_shown(snippet, 'a snippet of the edited file', max(1, after - AROUND + 1))}"
                "Review the changes and make sure they are as expected (correct indentation, no "
                "duplicate lines, etc). Edit the file again if necessary.")
