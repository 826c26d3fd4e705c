"""The paper's seven evaluation suites: layout, scorer and baseline prompt of each.

    tasks = load_suite("chem", "chem.parquet")      # or "hf:NAME:CONFIG[:SPLIT]"

The table of layouts is docs/paper-suites.md; keep the two in step.

May import: lis_tui.bench's tasks, rewards, answers and report, lis_tui.config,
lis_tui.prompts, isolation.extras; the suites' scorers load the `paper` extra's libraries only
when they run.
"""
from lis_tui.bench.paper.data import load_rows
from lis_tui.bench.paper.suites import SUITES, Layout, Suite, check_extras, load_suite, scorer

__all__ = ["SUITES", "Layout", "Suite", "check_extras", "load_rows", "load_suite", "scorer"]
