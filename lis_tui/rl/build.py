"""Context items -> a bench task set, with the context as files in /testbed/documents or in the prompt.

    tasks, summary = build_tasks(read_items(path), BuildOptions(context="files", distractors=3))

Everything random (distractor choice, file order) comes from a generator seeded with `seed` and
the item's id, so a build is the same for the same seed whatever the order of other work, and
adding an item does not reshuffle the others.
"""
from __future__ import annotations

import random
import re
import statistics
from dataclasses import dataclass
from typing import Any

from lis_tui.rl.items import Document, Item

DOCUMENTS_DIR = "/testbed/documents"
CHARS_PER_TOKEN = 4  # the estimate used everywhere in lis-tui (environment tokens too)
_HEADING = re.compile(r"^(#{1,6} |[A-Z0-9][^\n]{0,80}\n[=-]{3,}$|(Chapter|Section|Part) \w+)",
                      re.MULTILINE)


@dataclass(frozen=True)
class BuildOptions:
    """How items become tasks."""

    context: str = "files"
    """"files": documents under /testbed/documents; "prompt": the same material in the prompt."""
    chunk_tokens: int = 2000
    """Documents longer than this (estimated tokens) are split into parts of about this size."""
    distractors: int = 0
    """Documents from other groups' items added to each task."""
    examples: int = 0
    """Earlier items of the same group shown with their answers."""
    index: bool = False
    """Also write documents/INDEX.md listing the files (files mode only)."""
    seed: int = 0
    reward: str = "normalized"
    """The reward of items that name none."""


def build_tasks(items: list[Item], options: BuildOptions) -> tuple[list[dict], dict[str, Any]]:
    """Task dicts in the bench's format, and the summary of what was built."""
    if options.context not in ("files", "prompt"):
        raise ValueError(f"--context {options.context!r}: use files or prompt")
    if options.chunk_tokens < 50:
        raise ValueError("--chunk-tokens must be at least 50: smaller parts split sentences apart")
    tasks = [_task(item, items, index, options) for index, item in enumerate(items)]
    return tasks, summarize(tasks, options)


def _task(item: Item, items: list[Item], index: int, options: BuildOptions) -> dict[str, Any]:
    rng = random.Random(f"{options.seed}:{item.id}")
    docs = list(item.documents) + _distractors(item, items, options.distractors, rng)
    rng.shuffle(docs)  # the relevant documents are not always first
    files = _files(docs, options.chunk_tokens)
    examples = _examples(item, items[:index], options.examples)
    if options.context == "files":
        documents = dict(files)
        if options.index:
            documents["INDEX.md"] = _index(files)
        statement = _files_statement(item, examples, len(files), options.index)
    else:
        documents = {}
        statement = _prompt_statement(item, examples, files)
    return {"id": item.id, "problem_statement": statement, "ground_truth": item.answer,
            "domain": item.domain, "reward": item.reward or options.reward,
            **({"documents": documents} if documents else {})}


def _distractors(item: Item, items: list[Item], count: int, rng: random.Random) -> list[Document]:
    if count <= 0:
        return []
    pool = [doc for other in items if other.group != item.group for doc in other.documents]
    unique = list(dict.fromkeys(pool))  # one document shared by several items counts once
    return rng.sample(unique, min(count, len(unique)))


def _examples(item: Item, earlier: list[Item], count: int) -> list[Item]:
    if count <= 0:
        return []
    same = [e for e in earlier if e.group == item.group]
    return same[-count:]


# -- files ---------------------------------------------------------------------------------------

def _files(docs: list[Document], chunk_tokens: int) -> list[tuple[str, str]]:
    """(name, text) in order: `03-title.txt`, or `03-title.part2of4.txt` for a split document;
    the number is the document's (shuffled) place, so names sort in reading order."""
    width = max(2, len(str(len(docs))))
    files = []
    for place, doc in enumerate(docs, 1):
        stem = f"{place:0{width}d}-{_slug(doc.title)}"
        parts = split_text(doc.text, chunk_tokens)
        if len(parts) == 1:
            files.append((f"{stem}.txt", parts[0]))
        else:
            digits = len(str(len(parts)))  # part02of12 sorts before part10of12
            files += [(f"{stem}.part{k:0{digits}d}of{len(parts)}.txt", part)
                      for k, part in enumerate(parts, 1)]
    return files


def split_text(text: str, chunk_tokens: int) -> list[str]:
    """Parts of about `chunk_tokens`, cut at section headings or paragraph breaks where possible."""
    limit = chunk_tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return [text]
    parts: list[str] = []
    current = ""
    for para in _paragraphs(text, limit):
        heading = bool(_HEADING.match(para))
        # A new section starts a new part once the current one is half full: parts follow sections.
        full = len(current) + len(para) + 2 > limit or (heading and len(current) >= limit // 2)
        if current and full:
            parts.append(current)
            current = ""
        current = f"{current}\n\n{para}" if current else para
    if current:
        parts.append(current)
    return parts


def _paragraphs(text: str, limit: int) -> list[str]:
    paras = [p.strip("\n") for p in re.split(r"\n\s*\n", text) if p.strip()]
    out = []
    for para in paras:
        while len(para) > limit:  # one huge paragraph: cut at the last sentence or space before the limit
            cut = para.rfind(". ", 0, limit) + 1
            if cut <= limit // 2:  # no sentence end in the second half: a space, else anywhere
                cut = para.rfind(" ", 0, limit)
                cut = cut if cut > limit // 2 else limit
            out.append(para[:cut].rstrip())
            para = para[cut:].lstrip()
        out.append(para)
    return out


def _slug(title: str) -> str:
    title = re.sub(r"\.(txt|md|text)$", "", title, flags=re.IGNORECASE)  # the file gets .txt
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:48].strip("-")
    return slug or "document"


def _index(files: list[tuple[str, str]]) -> str:
    lines = ["# Documents", "", "| file | first line | tokens (est.) |", "|---|---|---|"]
    for name, text in files:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")[:80]
        first = first.replace("|", "\\|")
        lines.append(f"| {name} | {first} | {len(text) // CHARS_PER_TOKEN} |")
    return "\n".join(lines) + "\n"


# -- prompts -------------------------------------------------------------------------------------

def _examples_text(examples: list[Item]) -> str:
    if not examples:
        return ""
    shown = "\n\n".join(f"Question: {e.question}\nAnswer: {_answer_text(e.answer)}" for e in examples)
    return f"Earlier questions about related material, with their answers:\n\n{shown}\n\n"


def _answer_text(answer: Any) -> str:
    return str(answer[0]) if isinstance(answer, list) and answer else str(answer)


def _files_statement(item: Item, examples: list[Item], count: int, index: bool) -> str:
    where = (f"The material for this question is in {DOCUMENTS_DIR} ({count} file"
             f"{'s' if count != 1 else ''}; not all of it is relevant"
             f"{', INDEX.md lists them' if index else ''}). Read what you need there.")
    return f"{where}\n\n{_examples_text(examples)}Question: {item.question}"


def _prompt_statement(item: Item, examples: list[Item], files: list[tuple[str, str]]) -> str:
    blocks = "\n\n".join(f'<document name="{name}">\n{text}\n</document>' for name, text in files)
    return (f"The material for this question follows (not all of it is relevant).\n\n{blocks}\n\n"
            f"{_examples_text(examples)}Question: {item.question}")


# -- summary -------------------------------------------------------------------------------------

def summarize(tasks: list[dict], options: BuildOptions) -> dict[str, Any]:
    """Tasks, files per task, bytes, and the estimated context tokens per task."""
    files = [len(t.get("documents", {})) for t in tasks]
    context = [sum(len(v) for v in t.get("documents", {}).values()) + len(t["problem_statement"])
               for t in tasks]
    tokens = [c // CHARS_PER_TOKEN for c in context]
    return {"tasks": len(tasks), "context": options.context,
            "files_per_task": {"min": min(files), "mean": round(statistics.mean(files), 1),
                               "max": max(files)},
            "bytes": sum(len(t["problem_statement"].encode()) + sum(
                len(v.encode()) for v in t.get("documents", {}).values()) for t in tasks),
            "tokens_per_task": {"min": min(tokens), "mean": round(statistics.mean(tokens)),
                                "max": max(tokens)}}


def summary_text(summary: dict[str, Any]) -> str:
    f, t = summary["files_per_task"], summary["tokens_per_task"]
    return (f"{summary['tasks']} tasks (context in {summary['context']}), files per task "
            f"{f['min']}-{f['max']} (mean {f['mean']}), {summary['bytes']:,} bytes, context "
            f"tokens per task (est.) {t['min']:,}-{t['max']:,} (mean {t['mean']:,})")
