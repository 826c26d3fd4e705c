"""What the model used the sandbox for, classified by command patterns as the paper does.

Three kinds: `computation` (running python, scripts, compilers, calculators), `file_management`
(looking at and arranging files: ls, cat, grep, find, the editor) and `external_resources`
(reaching outside: pip/apt install, curl, wget, git clone). A step counts for a kind when any of
its tool calls does; `CapabilityCounter` tallies a run from the agent's events.
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Iterable

from tools import loads_model_json

KINDS = ("computation", "file_management", "external_resources")

_COMPUTE = {"python", "python3", "python2", "node", "nodejs", "ruby", "perl", "php", "Rscript",
            "R", "julia", "lua", "java", "javac", "gcc", "g++", "cc", "clang", "make", "cargo",
            "rustc", "go", "bc", "dc", "expr", "awk", "gawk", "octave", "sage", "gp", "ipython",
            "pytest", "sh", "bash", "zsh", "factor", "seq", "numfmt", "sqlite3", "jq"}
_FILES = {"ls", "cat", "head", "tail", "less", "more", "find", "grep", "egrep", "rg", "wc", "tree",
          "du", "df", "file", "stat", "cp", "mv", "rm", "mkdir", "rmdir", "touch", "ln", "sed",
          "sort", "uniq", "cut", "diff", "tar", "unzip", "zip", "gzip", "gunzip", "xxd", "od",
          "nl", "tr", "tee", "chmod", "realpath", "basename", "dirname", "column", "iconv",
          "pdftotext", "readlink"}
_FETCH = {"curl", "wget", "apt", "apt-get", "aptitude", "conda", "mamba", "npm", "yarn", "pnpm",
          "gem", "ssh", "scp", "rsync", "huggingface-cli", "ping", "nc", "dig", "nslookup"}
_FETCH_ARGS = {("pip", "install"), ("pip3", "install"), ("pip", "download"),
               ("git", "clone"), ("git", "pull"), ("git", "fetch"), ("uv", "pip"), ("uv", "add"),
               ("cargo", "install"), ("go", "get"), ("go", "install")}
_FETCH_IN_CODE = re.compile(r"\b(requests\.(get|post)|urllib\.request|urlopen|httpx\.|"
                            r"socket\.create_connection|pip\s+install|snapshot_download|"
                            r"load_dataset)\b")
_SEPARATORS = re.compile(r"\|\||&&|[;|&\n()]|\$\(|`")
_PREFIXES = {"sudo", "time", "nohup", "env", "exec", "command", "builtin", "then", "do", "else",
             "!", "{", "if", "while", "until", "xargs", "nice"}
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1[^\n]*\n(.*?)\n\s*\2\s*(?:\n|$)", re.DOTALL)


def classify(name: str, arguments: Any) -> set[str]:
    """The kinds one tool call counts as (maybe none: `submit`, `echo hi`)."""
    args = _decoded(arguments)
    if name == "str_replace_editor":
        kinds = {"file_management"}
        if args.get("command") in ("create", "str_replace", "insert") and \
                _FETCH_IN_CODE.search(str(args.get("file_text") or args.get("new_str") or "")):
            kinds.add("external_resources")
        return kinds
    if name != "execute_bash":
        return set()
    return classify_command(str(args.get("command") or ""))


def classify_command(command: str) -> set[str]:
    """The kinds a shell command line counts as."""
    kinds: set[str] = set()
    bodies = [m.group(3) for m in _HEREDOC.finditer(command)]
    if any(_FETCH_IN_CODE.search(b) for b in bodies):
        kinds.add("external_resources")
    script = _HEREDOC.sub(lambda m: m.group(0).split("\n", 1)[0] + "\n", command)
    for segment in _SEPARATORS.split(script):
        kinds |= _segment_kinds(segment)
    if re.search(r"\$\(\(|\blet\s", script):
        kinds.add("computation")
    if re.search(r"(python3?|node|perl|ruby)\s+(-c|-e)\s", script) and _FETCH_IN_CODE.search(script):
        kinds.add("external_resources")
    return kinds


def _segment_kinds(segment: str) -> set[str]:
    words = _words(segment)
    while words and (words[0] in _PREFIXES or "=" in words[0].split("/")[0]
                     or words[0] in ("timeout", "-k") or _is_number(words[0])):
        words = words[1:]
    if not words:
        return set()
    program = words[0].rsplit("/", 1)[-1]
    second = words[1] if len(words) > 1 else ""
    if (program, second) in _FETCH_ARGS or program in _FETCH:
        return {"external_resources"}
    if program in ("pip", "pip3") or (program in ("python", "python3") and "pip" in words[1:3]
                                      and "install" in words):
        return {"external_resources"} if "install" in words else set()
    if program in _COMPUTE or words[0].startswith("./") or re.search(r"\.(py|sh|js|rb|pl)$", program):
        return {"computation"}
    if program in _FILES:
        return {"file_management"}
    return set()


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=True)
    except ValueError:  # an unbalanced quote: split on blanks
        return segment.split()


def _is_number(word: str) -> bool:
    return bool(re.fullmatch(r"\d+[smhd]?", word))


def _decoded(arguments: Any) -> dict:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = loads_model_json(arguments or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def step_kinds(tool_calls: Iterable[Any]) -> set[str]:
    """The kinds one step counts as: the union over its tool calls (records or dicts)."""
    kinds: set[str] = set()
    for call in tool_calls:
        name = call["name"] if isinstance(call, dict) else call.name
        arguments = call["arguments"] if isinstance(call, dict) else call.arguments
        kinds |= classify(name, arguments)
    return kinds


class CapabilityCounter:
    """An event listener counting the steps that used each kind."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(KINDS, 0)
        self.steps = 0

    def on_event(self, event: Any) -> None:
        from lis_tui.agent.events import StepFinished  # noqa: PLC0415

        if isinstance(event, StepFinished):
            self.steps += 1
            for kind in step_kinds(event.record.tool_calls):
                self.counts[kind] += 1
