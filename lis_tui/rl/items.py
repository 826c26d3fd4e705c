"""Context items, the input of `lis-tui tasks build`: read and checked, each error naming line and field.

Three row shapes are accepted, one JSON object a line:
- ours: `id`, `context` (text, or a list of `{title, text}` documents), `question`, `answer`,
  optional `domain`, `group`, `reward`;
- plain `{context, question, answer}` (the id is then the line number);
- the paper's `instruct_pretrain` rows: `id`, `problem_statement`, `ground_truth`,
  `input_files` (name -> text, or a list of {name|title, content|text}), `domain`, `qa_type`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lis_tui.bench.scoring.rewards import RewardError, parse_reward

OUR_FIELDS = {"id", "context", "question", "answer", "domain", "group", "reward"}
PAPER_FIELDS = {"id", "problem_statement", "ground_truth", "input_files", "domain", "qa_type",
                "reward", "group"}
# How the paper's reading questions are scored: a letter for single choice, the set of letters
# (compared after normalizing) for multiple choice, the normalized text for open-ended ones.
QA_REWARDS = {"single_choice": "choice", "single-choice": "choice",
              "multiple_choice": "normalized", "multiple-choice": "normalized",
              "open_ended": "normalized", "open-ended": "normalized"}


class ItemError(ValueError):
    """An input row that cannot be used; the message names the file, line and field."""


@dataclass(frozen=True)
class Document:
    title: str
    text: str


@dataclass(frozen=True)
class Item:
    """One question over its documents."""

    id: str
    documents: tuple[Document, ...]
    question: str
    answer: Any
    domain: str
    group: str
    """Items of one group share a source: never distractors for each other; examples for each other."""
    reward: Any
    line: int


def read_items(path: Path) -> list[Item]:
    """Every row of a JSONL file as an Item; the first bad row raises ItemError."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ItemError(f"cannot read {path}: {exc.strerror}; give a JSONL file of context items") from None
    items, seen = [], {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ItemError(f"{where}: not valid JSON ({exc}); one JSON object a line") from None
        item = parse_item(row, where, number)
        if item.id in seen:
            raise ItemError(f"{where}: field `id`: {item.id!r} is also on line {seen[item.id]}; "
                            "ids must be unique (task ids and --resume keys come from them)")
        seen[item.id] = number
        items.append(item)
    if not items:
        raise ItemError(f"{path}: no items; each line is one object with context, question, answer")
    return items


def parse_item(row: Any, where: str, line: int) -> Item:
    if not isinstance(row, dict):
        raise ItemError(f"{where}: a row must be a JSON object, not {type(row).__name__}")
    paper = "problem_statement" in row
    known = PAPER_FIELDS if paper else OUR_FIELDS
    unknown = sorted(set(row) - known)
    if unknown:
        raise ItemError(f"{where}: unknown field(s) {', '.join(unknown)}; the fields are "
                        f"{', '.join(sorted(known))}")
    if paper:
        question, answer = row["problem_statement"], row.get("ground_truth")
        documents = _paper_files(row.get("input_files"), where)
        reward = row.get("reward") or QA_REWARDS.get(str(row.get("qa_type") or ""), None)
        answer_field = "ground_truth"
    else:
        for name in ("context", "question", "answer"):
            if name not in row:
                raise ItemError(f"{where}: field `{name}` is missing; each row needs context, "
                                "question and answer")
        question, answer, reward = row["question"], row["answer"], row.get("reward")
        documents = _context(row["context"], where)
        answer_field = "answer"
    if not isinstance(question, str) or not question.strip():
        raise ItemError(f"{where}: field `{'problem_statement' if paper else 'question'}` must be "
                        "non-empty text")
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        raise ItemError(f"{where}: field `{answer_field}` must be a non-empty answer (text, a "
                        "number, or a list of acceptable answers)")
    _check_reward(reward, where)
    item_id = str(row.get("id") if row.get("id") is not None else f"item-{line}")
    domain = str(row.get("domain") or "general")
    return Item(item_id, documents, question, answer, domain, str(row.get("group") or domain),
                reward, line)


def _context(value: Any, where: str) -> tuple[Document, ...]:
    if isinstance(value, str):
        if not value.strip():
            raise ItemError(f"{where}: field `context` is empty; give the text the question is about")
        return (Document("context", value),)
    if not isinstance(value, list) or not value:
        raise ItemError(f"{where}: field `context` must be text or a non-empty list of "
                        '{"title": ..., "text": ...} documents')
    docs = []
    for n, doc in enumerate(value):
        if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
            raise ItemError(f"{where}: field `context[{n}]` must be an object with a `text` string "
                            "(and optionally a `title`)")
        docs.append(Document(str(doc.get("title") or f"document {n + 1}"), doc["text"]))
    return tuple(docs)


def _paper_files(value: Any, where: str) -> tuple[Document, ...]:
    if value is None or value == {} or value == []:
        raise ItemError(f"{where}: field `input_files` is empty; a reading question needs its "
                        "documents")
    if isinstance(value, str):  # some exports keep the dict as a JSON string
        try:
            value = json.loads(value)
        except ValueError:
            return (Document("context", value),)
    if isinstance(value, dict):
        return tuple(Document(str(k), _file_text(v, f"input_files[{k!r}]", where))
                     for k, v in value.items())
    if isinstance(value, list):
        return tuple(Document(str(f.get("name") or f.get("title") or f"file {n + 1}"),
                              _file_text(f.get("content", f.get("text")), f"input_files[{n}]", where))
                     for n, f in enumerate(value) if isinstance(f, dict))
    raise ItemError(f"{where}: field `input_files` must map file names to text")


def _file_text(value: Any, name: str, where: str) -> str:
    if not isinstance(value, str):
        raise ItemError(f"{where}: field `{name}` must be text")
    return value


def _check_reward(reward: Any, where: str) -> None:
    if reward is None:
        return
    try:
        parse_reward(reward)
    except RewardError as exc:
        raise ItemError(f"{where}: field `reward`: {exc}") from None
