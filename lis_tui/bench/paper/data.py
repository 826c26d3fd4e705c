"""Rows in the paper's published schema from a JSON/JSONL/Parquet file or folder, or the
user's Hugging Face cache (`hf:NAME:CONFIG[:SPLIT]`)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from isolation.extras import install_hint
from lis_tui.bench.tasks import TaskError

SUFFIXES = (".json", ".jsonl", ".parquet")
HF_HINT = ("download it once where there is network (python -c \"import datasets; "
           "datasets.load_dataset('{name}', '{config}')\"), or use `huggingface-cli download "
           "--repo-type dataset {name}` and give the Parquet folder instead")


def load_rows(data: str) -> tuple[list[dict[str, Any]], Path | None, str]:
    """(rows, folder relative paths are taken from (None for hf: rows, which have none), label for
    messages)."""
    if data.startswith("hf:"):
        return _hf_rows(data), None, data
    path = Path(data).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES)
        if not files:
            raise TaskError(f"{path}: no .json, .jsonl or .parquet files in this folder")
        return [row for f in files for row in _file_rows(f)], path, str(path)
    if not path.is_file():
        raise TaskError(f"no data file or folder {data!r}; give a .json/.jsonl/.parquet file, a "
                        "folder of them, or hf:NAME:CONFIG[:SPLIT]")
    return _file_rows(path), path.parent, str(path)


def _file_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # noqa: PLC0415 (optional: the [paper] extra)
        except ImportError:
            raise TaskError(f"{path}: reading Parquet needs pyarrow; run: "
                            f"{install_hint('paper')}") from None
        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        data = json.loads(text)
    except ValueError as exc:
        raise TaskError(f"{path}: not valid JSON ({exc})") from None
    rows = data.get("tasks") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise TaskError(f"{path}: expected a JSON list of rows")
    return rows


def _hf_rows(spec: str) -> list[dict[str, Any]]:
    parts = spec[3:].split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise TaskError(f"{spec!r}: write hf:NAME:CONFIG or hf:NAME:CONFIG:SPLIT, e.g. "
                        "hf:daixuancheng/llm-in-sandbox-bench:chem:test")
    name, config, split = parts[0], parts[1], parts[2] if len(parts) == 3 else "test"
    try:
        import datasets  # noqa: PLC0415 (optional: the [hf] extra)
    except ImportError:
        raise TaskError(f"{spec}: reading the Hugging Face cache needs `datasets`; run: "
                        f"{install_hint('hf')}, or give a local Parquet/JSON file") from None
    # The cache only: a bench must not download behind the user's back.
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        return list(datasets.load_dataset(name, config, split=split))
    except Exception as exc:  # noqa: BLE001 (datasets raises many kinds when the cache is empty)
        hint = HF_HINT.format(name=name, config=config)
        raise TaskError(f"{spec}: not in the Hugging Face cache ({type(exc).__name__}: "
                        f"{str(exc)[:200]}); {hint}") from None
