"""Batch evaluation (`lis-tui bench`): task sets, rewards, a concurrent runner and reports.

    from lis_tui.bench import load_tasks, score
    tasks = load_tasks("smoke")            # a built-in set, a JSON/JSONL file or a task directory
    score("42", tasks[0])                  # 1.0 or 0.0 (judge rewards may give fractions)

The runner (`lis_tui.bench.runner.BenchRunner`) and the reports (`lis_tui.bench.report.pages`) are
imported from their modules; this package stays light.

May import: isolation, tools, lis_tui.agent, .model, .config, .prompts, .runs, lis_tui.api;
lis_tui.ray only when --ray is given (lazily).
"""
from lis_tui.bench.scoring.rewards import REWARD_NAMES, RewardError
from lis_tui.bench.scoring.score import score
from lis_tui.bench.tasks import BUILTIN_SETS, Task, TaskError, load_tasks

__all__ = ["BUILTIN_SETS", "REWARD_NAMES", "RewardError", "Task", "TaskError", "load_tasks", "score"]
