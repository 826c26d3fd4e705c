"""`lis-tui tasks build` on a small context dataset (tests/lis_tui/rl_data): files, chunking,
distractors, examples, both --context arms, determinism, validation."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lis_tui.bench.tasks import load_tasks
from lis_tui.rl.build import BuildOptions, build_tasks, split_text
from lis_tui.rl.items import ItemError, read_items

DATA = Path(__file__).with_name("rl_data") / "context_items.jsonl"


def build(tmp_path, *flags, name="tasks.jsonl"):
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "lis_tui.cli", "tasks", "build", str(DATA),
                           "--output", str(out), *flags], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stderr


def by_id(path):
    return {t["id"]: t for t in map(json.loads, path.read_text().splitlines())}


def test_files_arm_writes_a_bench_task_set_with_documents_and_a_summary(tmp_path):
    out, err = build(tmp_path, "--chunk-tokens", "1000")
    assert "9 tasks" in err and "files per task" in err and "bytes" in err and "tokens" in err
    tasks = by_id(out)
    loaded = {t.id: t for t in load_tasks(out)}  # the bench reads it as it is
    assert set(loaded) == set(tasks) and "item-8" in tasks  # the plain row got a line id
    alder = loaded["alder-1"]
    names = sorted(alder.documents)
    # four sections of ~3,300 characters, parts of ~4,000: one part a section
    assert names == [f"01-the-alder-river.part{k}of4.txt" for k in range(1, 5)]
    parts = [alder.documents[n] for n in names]
    assert [p.split("\n")[0] for p in parts] == ["# Source", "# Course", "# Delta", "# History"]
    original = json.loads(DATA.read_text().splitlines()[0])["context"][0]["text"]
    assert "".join(parts).replace("\n", "") == original.replace("\n", "")
    assert "/testbed/documents" in alder.problem_statement and alder.reward == "normalized"
    assert loaded["alder-3"].reward == "numeric" and loaded["paper-1"].reward == "choice"
    assert loaded["paper-1"].documents == {"01-report.txt": "The report names zinc."}
    assert "INDEX.md" not in alder.documents


def test_split_text_cuts_a_huge_paragraph_at_sentences():
    text = " ".join(f"Sentence number {i} ends here." for i in range(400))
    parts = split_text(text, 100)
    assert len(parts) > 5 and all(len(p) <= 400 for p in parts)
    assert all(p.endswith(".") for p in parts[:-1])


def test_distractors_never_come_from_the_same_group(tmp_path):
    items = read_items(DATA)
    group_of_text = {}
    for item in items:
        for doc in item.documents:
            group_of_text.setdefault(doc.text, set()).add(item.group)
    tasks, _ = build_tasks(items, BuildOptions(distractors=3, chunk_tokens=100000))
    for item, task in zip(items, tasks):
        own = {d.text for d in item.documents}
        others = [t for t in task["documents"].values() if t not in own]
        assert len(others) == 3, item.id
        assert all(item.group not in group_of_text[t] for t in others), item.id


def test_examples_are_earlier_items_of_the_same_group_with_answers():
    items = read_items(DATA)
    tasks = {t["id"]: t for t in build_tasks(items, BuildOptions(examples=2))[0]}
    assert "Answer:" not in tasks["cat-0"]["problem_statement"]  # nothing earlier in its group
    cat2 = tasks["cat-2"]["problem_statement"]
    assert "Bram's collar" in cat2 and "Answer: green" in cat2 and "Answer: blue" in cat2
    assert "Alder" not in cat2  # never another group's
    assert cat2.index("Answer: blue") < cat2.index("Question: What colour is Dov")


def test_prompt_arm_holds_the_same_material_in_the_same_order(tmp_path):
    files, _ = build(tmp_path, "--distractors", "2", "--seed", "7", "--chunk-tokens", "300")
    prompt, _ = build(tmp_path, "--distractors", "2", "--seed", "7", "--chunk-tokens", "300",
                      "--context", "prompt", name="prompt.jsonl")
    f, p = by_id(files), by_id(prompt)
    for task_id, task in f.items():
        statement = p[task_id]["problem_statement"]
        assert "documents" not in p[task_id]
        positions = [statement.index(f'<document name="{n}">\n{t}\n</document>')
                     for n, t in sorted(task["documents"].items())]
        assert positions == sorted(positions)
        assert statement.endswith(task["problem_statement"].split("\n\n", 1)[1])


def test_same_seed_same_bytes_other_seed_other_order(tmp_path):
    flags = ("--distractors", "3", "--index")
    a, _ = build(tmp_path, *flags, "--seed", "1", name="a.jsonl")
    b, _ = build(tmp_path, *flags, "--seed", "1", name="b.jsonl")
    c, _ = build(tmp_path, *flags, "--seed", "2", name="c.jsonl")
    assert a.read_bytes() == b.read_bytes() and a.read_bytes() != c.read_bytes()
    index = by_id(a)["stars-1"]["documents"]["INDEX.md"]
    assert "| file |" in index and "Vega is 25" in index


@pytest.mark.parametrize("row, message", [
    ({"id": "x", "question": "q?", "answer": "a"}, ":2: field `context` is missing"),
    ({"id": "x", "context": "c", "question": "", "answer": "a"}, ":2: field `question`"),
    ({"id": "x", "context": [{"title": "t"}], "question": "q", "answer": "a"}, "field `context[0]`"),
    ({"id": "x", "context": "c", "question": "q", "answer": "a", "reward": "nope"}, "field `reward`"),
    ({"id": "x", "context": "c", "question": "q", "answer": "a", "colour": 1}, "unknown field(s) colour"),
    ({"id": "a", "context": "c", "question": "q", "answer": "a"}, "also on line 1"),
])
def test_bad_rows_are_named_by_line_and_field(tmp_path, row, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "a", "context": "c", "question": "q", "answer": "a"}) + "\n"
                    + json.dumps(row) + "\n")
    with pytest.raises(ItemError, match=None) as info:
        read_items(path)
    assert message in str(info.value)
    proc = subprocess.run([sys.executable, "-m", "lis_tui.cli", "tasks", "build", str(path),
                           "--output", str(tmp_path / "o.jsonl")], capture_output=True, text=True)
    assert proc.returncode == 2 and message in proc.stderr and not (tmp_path / "o.jsonl").exists()
