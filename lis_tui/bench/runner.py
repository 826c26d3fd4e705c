"""`BenchRunner`: every (task, mode, repeat) episode, N at a time, each in its own sandbox.

    runner = BenchRunner(tasks, config, spec, BenchOptions(output=Path("out"), concurrency=16))
    outcome = runner.run()      # Ctrl-C in the main thread stops cleanly; outcome.interrupted

Each finished episode is appended to `results.jsonl` at once, so a crash or Ctrl-C loses only the
episodes in flight, and `resume=True` skips the keys already there. An episode that crashes is
recorded as failed (`crashed: true`) and the others go on; a resume runs crashed ones again.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from isolation import SandboxSpec
from lis_tui.bench.episode import Episode, EpisodeContext, dumps, run_episode
from lis_tui.bench.report.progress import Progress
from lis_tui.bench.tasks import Task
from lis_tui.config.settings import Config

MODES = ("sandbox", "llm")


@dataclass
class BenchOptions:
    """How to run a task set."""

    output: Path
    """Folder for results.jsonl, episodes/, summary.md and report.html."""
    modes: tuple[str, ...] = ("sandbox",)
    """"sandbox", "llm", or both."""
    concurrency: int = 4
    """Episodes at once, each with its own sandbox."""
    repeat: int = 1
    """Runs of every task in every mode."""
    limit: int | None = None
    """Use only the first N tasks."""
    resume: bool = False
    """Skip the episodes already in results.jsonl."""
    progress: TextIO | None = field(default_factory=lambda: sys.stderr)
    """Where the progress line goes; None for none."""
    workers: int = 1
    """Processes that run the episodes (`lis_tui.bench.workers.pool`); 1 runs them in this process, in
    threads; 0: one per 2 cores, at most `concurrency`."""
    ray: Any = None
    """Run the episodes on a Ray cluster: "auto", an address, or a `lis_tui.ray.RayOptions`
    (whose `concurrency`, not this one's, caps them); None (the default) runs them here, in
    threads, and never imports Ray."""


@dataclass
class BenchOutcome:
    results: list[dict[str, Any]]
    """Every record in results.jsonl, earlier runs included when resuming."""
    ran: int
    interrupted: bool


class BenchRunner:
    """Runs a task set; `cancel()` may come from any thread."""

    def __init__(self, tasks: list[Task], config: Config, spec: SandboxSpec | None,
                 options: BenchOptions, judge: Any = None) -> None:
        bad = [m for m in options.modes if m not in MODES]
        if bad or not options.modes:
            raise ValueError(f"unknown mode(s) {bad}; use sandbox, llm or both")
        if options.concurrency < 1 or options.repeat < 1:
            raise ValueError("--concurrency and --repeat must be at least 1")
        if options.workers < 0:
            raise ValueError("--workers must be 0 (one per 2 cores) or more")
        self.tasks = tasks[: options.limit] if options.limit else tasks
        self.options = options
        self.results_path = options.output / "results.jsonl"
        if self.results_path.exists() and not options.resume:
            raise ValueError(f"{self.results_path} exists: pass --resume to continue that run, or "
                             "choose another --output")
        if options.ray:
            from lis_tui.ray import ray_options  # noqa: PLC0415 (no Ray in it: that comes at run)

            options.ray = ray_options(options.ray)  # a bad value fails here, not mid-run
        self.ctx = EpisodeContext(config, spec or SandboxSpec(), options.output, judge)
        self._write_lock = threading.Lock()

    def episodes(self) -> list[Episode]:
        """All episodes, task by task, each task's modes side by side."""
        return [Episode(t, m, r) for r in range(self.options.repeat) for t in self.tasks
                for m in self.options.modes]

    def run(self) -> BenchOutcome:
        """Run what is not done yet; returns when all are done or after Ctrl-C / cancel()."""
        ran, interrupted = self.run_episodes()
        return BenchOutcome(self.read_results(), ran, interrupted)

    def run_episodes(self) -> tuple[int, bool]:
        """`run()` without reading results.jsonl back: (episodes finished, interrupted)."""
        previous = self._previous()
        todo = [e for e in self.episodes() if e.key not in previous]
        progress = Progress(self.options.progress, len(self.episodes()),
                            already=len(self.episodes()) - len(todo))
        interrupted = False
        try:
            interrupted = self._run_all(todo, progress)
        finally:
            self.ctx.close()
        progress.show(final=True)
        return progress.done, interrupted or self.ctx.stop.is_set()

    def workers(self) -> int:
        """The worker processes this run uses (1: none, the episodes run in this one)."""
        if self.options.workers:
            return min(self.options.workers, self.options.concurrency)
        from lis_tui.bench.workers.pool import default_workers  # noqa: PLC0415

        return default_workers(self.options.concurrency)

    def cancel(self, hard: bool = False) -> None:
        """Stop: queued episodes are dropped, running ones end as cancelled (not recorded)."""
        self.ctx.cancel(hard)

    def read_results(self) -> list[dict[str, Any]]:
        """The records in results.jsonl, the last one of each key; torn lines are skipped."""
        if not self.results_path.exists():
            return []
        records: dict[str, dict[str, Any]] = {}
        for line in self.results_path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # a kill mid-write
                continue
            records[record.get("key", "")] = record
        return list(records.values())

    # -- internals ---------------------------------------------------------------------------
    def _previous(self) -> set[str]:
        self.options.output.mkdir(parents=True, exist_ok=True)
        cut_torn_tail(self.results_path)
        # A crash is the harness failing, not the model: resuming runs those episodes again.
        return {r.get("key") for r in self.read_results() if not r.get("crashed")}

    def _run_all(self, todo: list[Episode], progress: Progress) -> bool:
        if self.options.ray:
            from lis_tui.ray.cluster import run_on_cluster  # noqa: PLC0415 (Ray only when asked)

            return run_on_cluster(self, todo, progress)
        workers = self.workers()
        if workers > 1:
            from lis_tui.bench.workers.pool import run_in_workers  # noqa: PLC0415

            return run_in_workers(self, todo, progress, workers)
        interrupts = 0
        with cf.ThreadPoolExecutor(self.options.concurrency, thread_name_prefix="lis-bench") as pool:
            pending = {pool.submit(self._one, e, progress) for e in todo}
            while pending:
                try:
                    done, pending = cf.wait(pending, timeout=0.5, return_when=cf.FIRST_COMPLETED)
                    progress.show()  # rate and ETA move while long episodes run
                    for future in done:
                        if not future.cancelled():
                            future.result()  # a bug in our bookkeeping must not pass silently
                except KeyboardInterrupt:
                    interrupts += 1
                    self._interrupt(pending, hard=interrupts > 1)
                except BaseException:  # our own failure (results.jsonl unwritable): stop all
                    for future in pending:
                        future.cancel()
                    self.cancel(hard=True)
                    raise
        return interrupts > 0

    def _interrupt(self, pending: set, hard: bool) -> None:
        out = self.options.progress
        if out is not None:
            print("\nstopping: finishing the running episodes' current step (Ctrl-C again to "
                  "kill their sandboxes); --resume continues later", file=out, flush=True)
        for future in pending:
            future.cancel()
        self.cancel(hard)

    def _one(self, episode: Episode, progress: Progress) -> None:
        progress.begin()
        try:
            record = run_episode(episode, self.ctx)
        finally:
            progress.end()
        if record is not None:
            self.keep(episode, record, progress)

    def keep(self, episode: Episode, record: dict[str, Any], progress: Progress,
             raw: list[dict] | None = None, writer: Any = None) -> None:
        """Append one finished episode's record to results.jsonl (thread-safe); `raw` (what the
        model server sent) and `writer` (the trajectory) are for rollouts, which keep them."""
        with self._write_lock:
            with self.results_path.open("a", encoding="utf-8") as f:
                f.write(dumps(record) + "\n")
            progress.add(record)


def cut_torn_tail(path: Path) -> None:
    """Before a resumed run appends to `path` (JSON lines): cut a last line that a kill left
    half-written, so the next record starts on a line of its own (glued to the torn one, a whole
    record would be lost too)."""
    try:
        f = open(path, "rb+")
    except FileNotFoundError:
        return
    with f:
        end = f.seek(0, os.SEEK_END)
        keep = end
        while keep > 0:  # back to the last newline, a chunk at a time
            start = max(0, keep - (1 << 16))
            f.seek(start)
            newline = f.read(keep - start).rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            keep = start
        if keep != end:
            f.truncate(keep)
