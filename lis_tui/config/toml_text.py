"""TOML text for the config: parse with line numbers in errors, find and set a key in place."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping


def toml_parser():
    """The TOML parser, imported when text is parsed: without a config file a command never loads it."""
    if sys.version_info >= (3, 11):
        import tomllib  # noqa: PLC0415 (see the docstring)
    else:  # pragma: no cover
        import tomli as tomllib  # noqa: PLC0415
    return tomllib


class ConfigError(Exception):
    """A setting that cannot be used; the message names the file, line, key and the fix."""

    def __init__(self, message: str, *, path: Path | str | None = None, line: int | None = None,
                 key: str | None = None):
        where = f"{path}:{line}: " if path and line else f"{path}: " if path else ""
        super().__init__(where + message)
        self.path, self.line, self.key = path, line, key


def parse_toml(text: str, path: Path | str) -> dict:
    """Parse TOML, turning a syntax error into a ConfigError with its line."""
    toml = toml_parser()
    try:
        return toml.loads(text)
    except toml.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        raise ConfigError(f"invalid TOML ({exc}); fix the syntax on that line "
                          "(strings need quotes, tables are [name])",
                          path=path, line=int(match.group(1)) if match else None) from None


_HEADER = re.compile(r"^\s*\[[^\[].*\]\s*(#.*)?$")


def _header_path(line: str) -> tuple[str, ...] | None:
    """The key path of a `[table]` header line, or None for any other line."""
    if not _HEADER.match(line):
        return None
    toml = toml_parser()
    try:
        data = toml.loads(line.strip())
    except toml.TOMLDecodeError:
        return None
    path = []
    while isinstance(data, dict) and len(data) == 1:
        key, data = next(iter(data.items()))
        path.append(key)
    return tuple(path)


def find_line(text: str, table: tuple[str, ...], key: str | None) -> int | None:
    """Best-effort 1-based line of `key` in `[table]` (or of the table itself)."""
    current: tuple[str, ...] = ()
    pattern = re.compile(rf"^\s*[\"']?{re.escape(key or '')}[\"']?\s*[=.]")
    for number, line in enumerate(text.splitlines(), 1):
        header = _header_path(line)
        if header is not None:
            current = header
            if not table and header[:1] == (key,):
                return number
        elif current == table and key and pattern.match(line):
            return number
    return None


def toml_value(value: Any) -> str:
    """A Python value as TOML (strings, numbers, booleans, lists, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{" + (f" {items} " if items else "") + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def set_toml_value(text: str, table: tuple[str, ...], key: str, value: Any) -> str:
    """Set `key` in `[table]` of TOML text, keeping comments and every other line."""
    lines = text.splitlines()
    new = f"{toml_key(key)} = {toml_value(value)}"
    start = next((i for i, line in enumerate(lines) if _header_path(line) == table), None)
    if start is None:
        gap = [""] if lines and lines[-1].strip() else []
        header = "[" + ".".join(toml_key(p) for p in table) + "]"
        return "\n".join(lines + gap + [header, new]) + "\n"
    end = next((i for i in range(start + 1, len(lines))
                if _header_path(lines[i]) or lines[i].lstrip().startswith("[[")), len(lines))
    pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
    for i in range(start + 1, end):
        if pattern.match(lines[i]):
            lines[i:_statement_end(lines, i, end)] = [new]
            return "\n".join(lines) + "\n"
    body = [i for i in range(start + 1, end) if lines[i].strip() and
            not lines[i].lstrip().startswith("#")]
    lines.insert((body[-1] if body else start) + 1, new)
    return "\n".join(lines) + "\n"


def _statement_end(lines: list[str], start: int, end: int) -> int:
    """One past the last line of the key/value statement at `start` (arrays may span lines)."""
    toml = toml_parser()
    for stop in range(start + 1, end + 1):
        try:
            toml.loads("\n".join(lines[start:stop]))
            return stop
        except toml.TOMLDecodeError:
            continue
    return start + 1


def user_config_path(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/lis-tui/config.toml` (default `~/.config/...`)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "lis-tui" / "config.toml"
