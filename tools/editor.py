"""`str_replace_editor`: view, create, str_replace, insert and undo_edit, inside a sandbox.

It behaves like Anthropic's reference editor (computer-use-demo `tools/edit.py`), which the
models we serve were trained on: the same commands, `cat -n` numbering, snippets around each
edit, and the same wording of the messages a model learns to act on. Where we differ, on purpose:
files are edited byte for byte (no tab expansion, no added or dropped final newline, CRLF kept);
a file's line count is what `cat -n` shows (no phantom line after the final newline); binary,
non-UTF-8, over-size and special files are refused; undoing a `create` removes the file.

Every file is read and written through the sandbox's `read_file` and `write_file`, which resolve
paths as the sandbox does (symlinks and `..` stay inside it) and start no process; a directory
listing and the rare `stat` run inside it.
"""

from __future__ import annotations

import posixpath
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from isolation import NotARegularFile, SandboxError
from isolation.spec import places_of

from . import ToolError, ToolResult
from .terminal_text import safe_terminal_text

CLIPPED_MARKER = (
    "<response clipped><NOTE>Only part of the output is shown, to save context. Find what you "
    "need with `grep -n` and look at those lines with `view_range`.</NOTE>"
)
_IO_ERRORS = (OSError, SandboxError)

@dataclass(frozen=True)
class EditorConfig:
    """Limits of the editor."""

    max_file_bytes: int = 4 * 1024 * 1024
    """Files larger than this are refused (the model should grep or sed them instead)."""
    max_output_chars: int = 16_000
    """Views and snippets longer than this are clipped, with CLIPPED_MARKER after them."""
    snippet_lines: int = 4
    """Lines of context shown above and below an edit."""
    history_depth: int = 32
    """Earlier versions kept per file for `undo_edit`; bounds memory over a long episode."""
    workdir: str = ""
    """Used to suggest an absolute path when the model gives a relative one; "": where the model
    works in the sandbox (`spec.places.working`)."""


class Editor:
    """The `str_replace_editor` tool over one sandbox; remembers edits for `undo_edit`."""

    def __init__(self, sandbox: Any, config: EditorConfig | None = None):
        self.sandbox = sandbox
        self.config = config or EditorConfig()
        # path -> earlier versions, oldest first; None means "did not exist"
        self._history: dict[str, deque[str | None]] = {}

    def run(
        self,
        command: str,
        path: str,
        file_text: str | None = None,
        old_str: str | None = None,
        new_str: str | None = None,
        insert_line: int | None = None,
        view_range: list[int] | None = None,
    ) -> ToolResult:
        """Carry out one `str_replace_editor` call; raise ToolError for the model's mistakes."""
        path = self._absolute(path)
        if command == "view":
            return self.view(path, view_range)
        if command == "create":
            if file_text is None:
                raise ToolError("Parameter `file_text` is required for command: create")
            return self.create(path, file_text)
        if command == "str_replace":
            if old_str is None:
                raise ToolError("Parameter `old_str` is required for command: str_replace")
            return self.str_replace(path, old_str, new_str)
        if command == "insert":
            if insert_line is None:
                raise ToolError("Parameter `insert_line` is required for command: insert")
            if new_str is None:
                raise ToolError("Parameter `new_str` is required for command: insert")
            return self.insert(path, insert_line, new_str)
        if command == "undo_edit":
            return self.undo_edit(path)
        raise ToolError(
            f"Unrecognized command {command}. The allowed commands for the str_replace_editor "
            "tool are: view, create, str_replace, insert, undo_edit"
        )

    # -- the five commands -------------------------------------------------------------

    def view(self, path: str, view_range: list[int] | None = None) -> ToolResult:
        """Numbered lines of a file (all, or `view_range`), or a directory's tree."""
        kind, content = self._probe(path)
        if kind == "missing":
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        if kind == "directory":
            if view_range:
                raise ToolError(
                    "The `view_range` parameter is not allowed when `path` points to a directory."
                )
            return self._list_directory(path)
        text = self._text(path, kind, content)
        lines = _display_lines(text)
        first, note = 1, _crlf_note(text, path)
        if view_range:
            first, last = _check_view_range(view_range, len(lines), path)
            if last > len(lines):  # clamped: the model meant "to the end", and gets it
                note += f"(Note: {path} has {len(lines)} lines; shown up to the last.)\n"
                last = len(lines)
            lines = lines[first - 1 :] if last == -1 else lines[first - 1 : last]
        if not text:
            return ToolResult(output=f"The file {path} is empty.")
        return self._numbered_output(lines, path, first, note=note)

    def create(self, path: str, file_text: str) -> ToolResult:
        """Write a new file; an existing path is refused."""
        try:
            self._write(path, file_text, exclusive=True)
        except FileExistsError:
            raise ToolError(
                f"File already exists at: {path}. Cannot overwrite files using command `create`."
            ) from None
        self._remember(path, None)
        return ToolResult(output=f"File created successfully at: {path}")

    def str_replace(self, path: str, old_str: str, new_str: str | None) -> ToolResult:
        """Replace the one occurrence of `old_str` with `new_str` (empty when None)."""
        if old_str == "":
            raise ToolError(
                "Parameter `old_str` must not be empty: it has to match text in the file "
                "exactly once. To add text without replacing any, use `insert`."
            )
        text = self._read_file(path)
        spans = _find(text, old_str)
        starts = [start for start, _ in spans]
        if not starts:
            raise ToolError(
                f"No replacement was performed, old_str `{old_str}` did not appear verbatim "
                f"in {path}."
            )
        if len(starts) > 1:
            raise ToolError(
                f"No replacement was performed. Multiple occurrences of old_str `{old_str}` "
                f"in lines {_line_numbers(text, starts)}. Please ensure it is unique"
            )
        pos, end = spans[0]
        new = _with_endings(new_str or "", text[pos:end])
        new_text = text[:pos] + new + text[end:]
        self._write(path, new_text)
        self._remember(path, text)
        return self._edited(path, new_text, pos, pos + len(new), f"a snippet of {path}")

    def insert(self, path: str, insert_line: int, new_str: str) -> ToolResult:
        """Insert `new_str` after line `insert_line` (0 = at the top)."""
        text = self._read_file(path)
        lines = _display_lines(text)
        if insert_line < 0 or insert_line > len(lines):
            raise ToolError(
                f"Invalid `insert_line` parameter: {insert_line}. It should be within the range "
                f"of lines of the file: {[0, len(lines)]}"
            )
        new_text, first, last = _insert_text(text, lines, insert_line, new_str)
        self._write(path, new_text)
        self._remember(path, text)
        return self._edited(path, new_text, first, last, "a snippet of the edited file")

    def undo_edit(self, path: str) -> ToolResult:
        """Put back the version of `path` from before the last edit made through this editor."""
        history = self._history.get(path)
        if not history:
            raise ToolError(f"No edit history found for {path}.")
        text = history.pop()
        if text is None:
            self._remove(path)
            return ToolResult(
                output=f"Last edit to {path} undone successfully. The file did not exist before "
                "it was created, so it has been removed."
            )
        self._write(path, text)  # made again if the shell removed it since
        shown = self._numbered_output(_display_lines(text), path, 1, note=_crlf_note(text, path))
        return ToolResult(
            output=f"Last edit to {path} undone successfully. {shown.output}",
            truncated=shown.truncated,
        )

    # -- output --------------------------------------------------------------------------

    def _numbered_output(
        self, lines: list[str], what: str, first: int, note: str = ""
    ) -> ToolResult:
        # Number only what can be shown. A numbered line takes 8 characters or more, so these
        # lines always overflow the limit when some are left out, and _clip marks the cut.
        shown = lines[: self.config.max_output_chars // 8 + 2]
        # A raw CR (a mixed-ending file), ESC or the like must not act on a terminal: `\x0d`.
        numbered = "\n".join(f"{i:6}\t{safe_terminal_text(s)}" for i, s in enumerate(shown, first))
        body, clipped = self._clip(numbered)
        header = f"Here's the result of running `cat -n` on {what}:\n"
        return ToolResult(output=header + body + "\n" + note, truncated=clipped)

    def _edited(self, path: str, new_text: str, first: int, last: int, what: str) -> ToolResult:
        """The reply to an edit: the lines holding offsets `first`..`last`, with context."""
        snippet, number = _snippet(new_text, first, last, self.config.snippet_lines)
        shown = self._numbered_output(snippet, what, number)
        review = "Review the changes and make sure they are as expected"
        if what.endswith("edited file"):  # the reference's wording for insert
            review += " (correct indentation, no duplicate lines, etc)"
        output = (
            f"The file {path} has been edited. {shown.output}{review}. "
            "Edit the file again if necessary."
        )
        return ToolResult(output=output, truncated=shown.truncated)

    def _clip(self, text: str) -> tuple[str, bool]:
        """Cut `text` at a line end before the output limit and mark the cut."""
        limit = self.config.max_output_chars
        if len(text) <= limit:
            return text, False
        cut = text.rfind("\n", 0, limit)
        return text[: cut if cut > 0 else limit] + "\n" + CLIPPED_MARKER, True

    def _list_directory(self, path: str) -> ToolResult:
        # -mindepth 1 keeps a hidden `path` itself from pruning everything under it
        argv = ["find", path, "-mindepth", "1", "-maxdepth", "2"]
        argv += ["-name", ".*", "-prune", "-o", "-print"]
        r = self.sandbox.exec(argv, timeout=60)
        found = sorted(r.stdout.splitlines(), key=lambda p: p.split("/"))
        if r.exit_code != 0 and not found:
            raise ToolError(f"Could not list {path}: {r.stderr.strip()}")
        body, clipped = self._clip("\n".join([path, *found]))
        output = (
            f"Here's the files and directories up to 2 levels deep in {path}, "
            f"excluding hidden items:\n{body}\n"
        )
        if r.exit_code != 0:  # partial listing, e.g. an unreadable subdirectory
            output += f"\n{r.stderr.strip()}\n"
        return ToolResult(output=output, truncated=clipped)

    # -- files, through the sandbox -----------------------------------------------------

    def _absolute(self, path: str) -> str:
        if "\0" in path:
            raise ToolError(f"The path {path!r} contains a NUL character; no file has such a name.")
        if not path.startswith("/"):
            workdir = self.config.workdir or places_of(getattr(self.sandbox, "spec", None)).working
            guess = posixpath.normpath(posixpath.join(workdir, path))
            raise ToolError(
                f"The path {path} is not an absolute path, it should start with `/`. "
                f"Maybe you meant {guess}?"
            )
        # normalized, so that /testbed/./a.py and /testbed/a.py share one undo history
        return posixpath.normpath(path)

    def _probe(self, path: str) -> tuple[str, bytes]:
        """What `path` is ("file", "directory", "other", "missing") and a file's first
        max_file_bytes + 1 bytes."""
        try:
            return "file", self.sandbox.read_file(path, limit=self.config.max_file_bytes + 1)
        except FileNotFoundError:
            return "missing", b""
        except IsADirectoryError:
            return "directory", b""
        except NotARegularFile:
            return "other", b""
        except _IO_ERRORS as e:
            raise ToolError(f"Ran into an error while trying to read {path}: {_reason(e)}") from None

    def _read_file(self, path: str) -> str:
        """The text of a file to edit; directories and the like refused."""
        kind, content = self._probe(path)
        if kind == "missing":
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        if kind == "directory":
            raise ToolError(
                f"The path {path} is a directory and only the `view` command can be used on "
                "directories"
            )
        return self._text(path, kind, content)

    def _text(self, path: str, kind: str, content: bytes) -> str:
        """`content` checked to be the whole file as text, or a ToolError saying why not."""
        if kind != "file":  # not read: a fifo or a device could block forever
            what = self._stat(path, "%F") or "special file"
            raise ToolError(f"The path {path} is a {what}, not a regular file.")
        if len(content) > self.config.max_file_bytes:
            raise self._too_big(path)
        if b"\0" in content:
            raise ToolError(
                f"The file {path} looks binary (it contains NUL bytes); the editor only handles "
                f"text. Inspect it with `execute_bash`, e.g. `file {path}` or `xxd {path} | head`."
            )
        try:
            return content.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ToolError(
                f"The file {path} is not UTF-8 text (bad byte at offset {e.start}); the editor "
                f"only handles UTF-8. Inspect it with `execute_bash`, e.g. `file {path}`, or "
                "convert it with `iconv`."
            ) from None

    def _too_big(self, path: str) -> ToolError:
        size, limit = int(self._stat(path, "%s") or 0), self.config.max_file_bytes
        return ToolError(
            f"The file {path} is {size:,} bytes, over the editor's limit of {limit:,}. "
            f"Look at it with `execute_bash` instead, e.g. `grep -n WORD {path}` or "
            f"`sed -n '100,200p' {path}`."
        )

    def _stat(self, path: str, fmt: str) -> str:
        """One `stat` field (links followed), for the rare messages that need one; "" if none."""
        return self.sandbox.exec(["stat", "-L", "-c", fmt, "--", path], timeout=60).stdout.strip()

    def _write(self, path: str, text: str, exclusive: bool = False) -> None:
        """Put `text` in `path`, in place: an existing file keeps its mode. Missing directories
        are made; `exclusive` raises FileExistsError if anything is at `path`."""
        # a lone surrogate from JSON cannot be UTF-8; "?" beats refusing the whole edit
        data = text.encode("utf-8", errors="replace")
        try:
            self.sandbox.write_file(path, data, exclusive=exclusive)
        except FileExistsError:
            raise
        except _IO_ERRORS as e:
            raise ToolError(f"Ran into an error while trying to write to {path}: {_reason(e)}") from None

    def _remove(self, path: str) -> None:
        r = self.sandbox.exec(["rm", "-f", "--", path], timeout=60)
        if r.exit_code != 0:
            raise ToolError(f"Could not remove {path}: {r.stderr.strip()}")

    def _remember(self, path: str, text: str | None) -> None:
        history = self._history.setdefault(path, deque(maxlen=self.config.history_depth))
        history.append(text)


# -- text helpers (pure) ------------------------------------------------------------------


def _reason(error: Exception) -> str:
    """"Permission denied" rather than "[Errno 13] Permission denied: '/x'"."""
    return getattr(error, "strerror", None) or str(error)


def _is_crlf(text: str) -> bool:
    """Every line ends in CRLF (mixed files are shown and matched as they are)."""
    if "\r" not in text:  # most files: one quick scan instead of two counts
        return False
    crlf = text.count("\r\n")
    return crlf > 0 and crlf == text.count("\n")


def _display_lines(text: str, start: int = 0, end: int | None = None) -> list[str]:
    """The lines `cat -n` would number in text[start:end] (whole lines), without line ends."""
    end = len(text) if end is None else end
    lines = text[start:end].split("\n")
    if end == len(text) and (not text or text.endswith("\n")):
        lines.pop()  # the final newline ends the last line; it does not start another
    if _is_crlf(text):
        lines = [s[:-1] if s.endswith("\r") else s for s in lines]
    return lines


def _snippet(text: str, first: int, last: int, context: int) -> tuple[list[str], int]:
    """Lines from `context` above the one holding offset `first` to `context` below the one
    holding offset `last`, and the number of the first; without splitting the whole file."""
    start = first
    for _ in range(context + 1):
        start = text.rfind("\n", 0, start)
        if start == -1:
            break
    start += 1  # just after a newline, or 0
    end = last - 1
    for _ in range(context + 1):
        end = text.find("\n", end + 1)
        if end == -1:
            end = len(text)
            break
    return _display_lines(text, start, end), text.count("\n", 0, start) + 1


def _crlf_note(text: str, path: str) -> str:
    if not _is_crlf(text):
        return ""
    return (
        f"(Note: {path} has CRLF (Windows) line ends. They are not shown above and are kept on "
        "edits; write plain newlines in `old_str` and `new_str`.)\n"
    )


def _to_crlf(s: str) -> str:
    return re.sub(r"(?<!\r)\n", "\r\n", s)


def _find(text: str, old: str) -> list[tuple[int, int]]:
    """Spans of `old` in `text`: verbatim, or else with each `\\n` in it matching `\\n` or `\\r\\n`
    (the view shows lines without their ends, so the model writes plain newlines)."""
    starts = _occurrences(text, old)
    if starts or "\n" not in old or "\r\n" not in text:
        return [(start, start + len(old)) for start in starts]
    pattern = re.compile("\r?\n".join(map(re.escape, re.split(r"(?<!\r)\n", old))))
    return [match.span() for match in pattern.finditer(text)]


def _with_endings(new: str, replaced: str) -> str:
    """`new` with each plain `\\n` in the line end the replaced text had at that place (the
    last one past its count), so a file keeps the endings it had."""
    ends = re.findall(r"\r?\n", replaced)
    if "\r\n" not in ends:
        return new
    pieces = re.split(r"(?<!\r)\n", new)
    return pieces[0] + "".join(ends[min(i, len(ends) - 1)] + piece for i, piece in enumerate(pieces[1:]))


def _occurrences(text: str, old: str) -> list[int]:
    """Start offsets of the non-overlapping occurrences of `old`, as str.count counts them."""
    starts, pos = [], text.find(old)
    while pos != -1:
        starts.append(pos)
        pos = text.find(old, pos + len(old))
    return starts


def _line_numbers(text: str, starts: list[int], most: int = 100) -> str:
    """The 1-based lines where the occurrences begin, each once, as `[3, 7]`; at most `most`."""
    numbers, line, prev = [], 1, 0
    for pos in starts:
        line += text.count("\n", prev, pos)
        prev = pos
        if not numbers or numbers[-1] != line:
            numbers.append(line)
    if len(numbers) <= most:
        return str(numbers)
    return str(numbers[:most])[:-1] + f", ... and {len(numbers) - most} more]"


def _check_view_range(view_range: list[int], n_lines: int, path: str) -> tuple[int, int]:
    if len(view_range) != 2 or not all(type(i) is int for i in view_range):
        raise ToolError("Invalid `view_range`. It should be a list of two integers.")
    first, last = view_range
    if n_lines == 0:
        raise ToolError(f"Invalid `view_range`: {view_range}. The file {path} is empty.")
    if first < 1 or first > n_lines:
        raise ToolError(
            f"Invalid `view_range`: {view_range}. Its first element `{first}` should be within "
            f"the range of lines of the file: {[1, n_lines]}"
        )
    if last != -1 and last < first:
        raise ToolError(
            f"Invalid `view_range`: {view_range}. Its second element `{last}` should be larger "
            f"or equal than its first `{first}`"
        )
    return first, last


def _insert_text(text: str, lines: list[str], after: int, new_str: str) -> tuple[str, int, int]:
    """`text` with `new_str` as whole lines after line `after`, in the file's own line ends;
    and the offsets of the first and last character inserted."""
    eol = "\r\n" if _is_crlf(text) else "\n"
    if eol == "\r\n":
        new_str = _to_crlf(new_str)
    if after == len(lines) and text and not text.endswith("\n"):
        # after an unterminated last line: end it, and leave the file as unterminated as it was
        new_text = text + eol + new_str
        return new_text, len(text) + len(eol), max(len(text) + len(eol), len(new_text) - 1)
    block = new_str if new_str.endswith("\n") else new_str + eol
    # every line before `after` is terminated, so offsets add up from the (display) lines
    offset = sum(map(len, lines[:after])) + after * len(eol)
    return text[:offset] + block + text[offset:], offset, offset + len(block) - 1
