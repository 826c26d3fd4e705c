"""Task files: a JSON list (or {"reward": ..., "tasks": [...]}), JSONL, or a task directory.

Each task has the fields of the LLM-in-Sandbox package: `id`, `problem_statement`,
`ground_truth`, `input_files` (name -> content, placed in /testbed/input; a JSON object or, as in the published
files, a JSON string of one; null contents are skipped), and optionally
`domain`, `reward` and `documents_dir` (a host directory copied to /testbed/documents). Ours add
`documents` (name -> content, also in /testbed/documents) and `answer_file` (score this file of
/testbed/output instead of answer.txt).

Any other field (`qa_type`, `instruction_id_list`, ...) is kept in `Task.extra` for the scorer.

The directory form holds one folder per task: `task.toml` (the same fields) and an optional
`input/` (copied to /testbed/input) and `documents/` folder.

A task file is data (a downloaded data set, a file a sandbox wrote): the host folders it names
(`documents_dir`, `input_dir`) are given relative to its own folder and must stay inside it, or
inside the folder the person gave with --allow-dir, links resolved (`_host_dir`, the one check
for bench, rollout, paper rows and `env serve`). A task without a file (sent over HTTP, a row
from hf:) takes them from --allow-dir, and without it names none.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from lis_tui.bench.scoring.rewards import RewardError, parse_reward
from lis_tui.config.settings import ConfigError, parse_toml

SETS_DIR = Path(__file__).with_name("sets")
BUILTIN_SETS = ("demo", "smoke")
KNOWN_FIELDS = {"id", "problem_statement", "ground_truth", "input_files", "domain", "reward",
                "documents_dir", "documents", "answer_file", "input_dir"}


class TaskError(ValueError):
    """A task file that cannot be used; the message names the file, the task and the fix."""


@dataclass(frozen=True)
class Task:
    """One benchmark task."""

    id: str
    problem_statement: str
    ground_truth: Any = None
    """The expected answer: a string, a number, or a list of acceptable answers."""
    input_files: dict[str, str] = field(default_factory=dict)
    """File name (relative) -> text, placed in /testbed/input."""
    domain: str = "general"
    reward: Any = None
    """A reward name ("numeric"), "name:param" ("numeric:0.01") or a table {type = ...}."""
    documents_dir: Path | None = None
    """Host directory copied to /testbed/documents."""
    documents: dict[str, str] = field(default_factory=dict)
    """File name -> text, placed in /testbed/documents."""
    input_dir: Path | None = None
    """Host directory copied to /testbed/input (the task-directory form's `input/`)."""
    answer_file: str = "answer.txt"
    """The file under /testbed/output whose text is scored."""
    extra: dict[str, Any] = field(default_factory=dict)
    """The row's other fields (`qa_type`, `instruction_id_list`, ...), for the scorer."""
    layout: Any = None
    """A paper suite's directory layout (`lis_tui.bench.paper.Layout`); None for ours."""

    @property
    def has_files(self) -> bool:
        return bool(self.input_files or self.documents or self.input_dir or self.documents_dir)


def load_tasks(source: str | Path, default_reward: Any = None, allow: Path | None = None) -> list[Task]:
    """Tasks from a built-in set name, a .json / .jsonl file, or a task directory; their host
    folders inside the file's folder (a task folder's own, in the directory form) or `allow`."""
    path = resolve_source(source)
    if path.is_dir():
        tasks = _load_dir(path, allow)
    else:
        file_reward, items = _read_items(path)
        return tasks_from_items(items, path.parent, str(path), default_reward or file_reward, allow)
    return _finish(tasks, path, default_reward)


def tasks_from_items(items: list, base: Path | None, label: str, default_reward: Any,
                     allow: Path | None = None) -> list[Task]:
    """Tasks from rows already read (JSON objects). Their host folders are given relative to `base`
    (the task file's folder; None: `allow`) and stay inside it or `allow` (--allow-dir); with
    neither, a row may name none."""
    tasks = [_task(item, base, allow, f"{label}: task {n + 1}") for n, item in enumerate(items)]
    return _finish(tasks, label, default_reward)


def _finish(tasks: list[Task], path: Any, default_reward: Any) -> list[Task]:
    tasks = [t if t.reward is not None else _with_reward(t, default_reward) for t in tasks]
    for task in tasks:
        try:
            parse_reward(task.reward)
        except RewardError as exc:
            raise TaskError(f"{path}: task {task.id!r}: {exc}") from None
    _check_unique(tasks, path)
    return tasks


def resolve_source(source: str | Path) -> Path:
    """The file or directory behind `source`; a bare built-in name means the shipped set."""
    if str(source) in BUILTIN_SETS and not Path(source).exists():
        return SETS_DIR / f"{source}.jsonl"
    path = Path(source).expanduser()
    if not path.exists():
        raise TaskError(f"no task file or directory {str(source)!r}; give a .json/.jsonl file, a "
                        f"folder of task folders, or a built-in set ({', '.join(BUILTIN_SETS)})")
    return path


def _read_items(path: Path) -> tuple[Any, list]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return None, [_json(line, path, n + 1) for n, line in enumerate(text.splitlines())
                      if line.strip()]
    data = _json(text, path, None)
    if isinstance(data, dict) and isinstance(data.get("tasks"), list):
        return data.get("reward"), data["tasks"]
    if not isinstance(data, list):
        raise TaskError(f"{path}: expected a JSON list of tasks or {{\"tasks\": [...]}}; for one "
                        "task a line, name the file .jsonl")
    return None, data


def _json(text: str, path: Path, line: int | None) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        where = f"{path}:{line}" if line else str(path)
        raise TaskError(f"{where}: not valid JSON ({exc}); each line of a .jsonl file must be one "
                        "whole JSON object") from None


def _task(item: Any, base: Path | None, allow: Path | None, where: str) -> Task:
    if not isinstance(item, dict):
        raise TaskError(f"{where}: a task must be a JSON object, not {type(item).__name__}")
    if "id" not in item or "problem_statement" not in item:
        raise TaskError(f"{where}: `id` and `problem_statement` are required")
    where = f"{where} ({item['id']})"
    statement = item["problem_statement"]
    if not isinstance(statement, str) or not statement.strip():
        raise TaskError(f"{where}: `problem_statement` must be non-empty text")
    return Task(
        id=str(item["id"]), problem_statement=statement, ground_truth=item.get("ground_truth"),
        input_files=_files(item.get("input_files"), "input_files", where),
        documents=_files(item.get("documents"), "documents", where),
        domain=str(item.get("domain") or "general"), reward=item.get("reward"),
        documents_dir=_host_dir(item.get("documents_dir"), base, allow, "documents_dir", where),
        input_dir=_host_dir(item.get("input_dir"), base, allow, "input_dir", where),
        answer_file=_relative(item.get("answer_file") or "answer.txt", "answer_file", where),
        extra={k: v for k, v in item.items() if k not in KNOWN_FIELDS})


def _files(value: Any, name: str, where: str) -> dict[str, str]:
    if isinstance(value, str):  # the published Parquet/JSON rows hold the mapping as a string
        try:
            value = json.loads(value) if value.strip() else None
        except ValueError as exc:
            raise TaskError(f"{where}: `{name}` is a string but not JSON ({exc}); give an object "
                            "mapping file names to their text, or that object as a JSON string")
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, (str, type(None)))
                                              for v in value.values()):
        raise TaskError(f"{where}: `{name}` must map file names to their text")
    # null contents: the paper's harness skips them (a column union in the published files)
    return {_relative(k, name, where): v for k, v in value.items() if v is not None}


def _relative(name: str, field_name: str, where: str) -> str:
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or ".." in parts:
        raise TaskError(f"{where}: `{field_name}` name {name!r} must be a relative path without "
                        "`..`, e.g. data/table.csv")
    return str(PurePosixPath(*parts))


def _host_dir(value: Any, base: Path | None, allow: Path | None, name: str, where: str) -> Path | None:
    """The folder `value` names, given relative to `base` (else `allow`), its real path inside one of
    them. What a task file says is data: `~`, an absolute path, or `..` or a link out is refused."""
    if not value:
        return None
    text, base = str(value), base or allow
    if base is None:
        raise TaskError(f"{where}: `{name}` names a host folder, which a task without a task file (sent over "
                        "HTTP, a row from hf:) may not. Fix: send its files as `input_files` / `documents` (name -> "
                        "text), or give --allow-dir DIR, the folder it names one in")
    try:
        path = (base / text).resolve()
        inside = any(path.is_relative_to(root.resolve()) for root in (base, allow) if root is not None)
    except (OSError, ValueError, RuntimeError):  # a NUL, a link loop
        inside = False
    if text.startswith("~") or os.path.isabs(text) or not inside:
        raise TaskError(f"{where}: `{name}` is not inside the task file's folder or --allow-dir: a "
                        "task names its folders relative to its file's folder, with no ~, absolute path, nor `..` or "
                        "link out of it. Fix: move the folder into it, or give --allow-dir DIR, a folder holding it")
    if not path.is_dir():
        raise TaskError(f"{where}: `{name}` {text[:200]!r} is not a directory (relative paths are taken from the "
                        "task file's folder)")
    return path


def _load_dir(root: Path, allow: Path | None) -> list[Task]:
    folders = sorted(p for p in root.iterdir() if (p / "task.toml").is_file())
    if not folders:
        raise TaskError(f"{root}: no task folders found; each task is a folder with a task.toml "
                        "(and optionally input/ and documents/)")
    return [_dir_task(folder, allow) for folder in folders]


def _dir_task(folder: Path, allow: Path | None) -> Task:
    toml = folder / "task.toml"
    try:
        item = parse_toml(toml.read_text(encoding="utf-8"), toml)
    except ConfigError as exc:
        raise TaskError(str(exc)) from None
    item.setdefault("id", folder.name)
    for sub, key in (("input", "input_dir"), ("documents", "documents_dir")):
        if (folder / sub).is_dir():
            item.setdefault(key, sub)  # relative to the folder, as one written in task.toml
    return _task(item, folder, allow, str(toml))


def _with_reward(task: Task, reward: Any) -> Task:
    return replace(task, reward=reward or "normalized")


def _check_unique(tasks: list[Task], path: Any) -> None:
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise TaskError(f"{path}: task id {task.id!r} appears twice; ids must be unique "
                            "(results and --resume are keyed by them)")
        seen.add(task.id)
