"""Group rollouts for GRPO-style training: n episodes of every task, each in its own sandbox.

    from lis_tui.rl import rollout
    outcome = rollout("tasks.jsonl", policy_url="http://localhost:8000/v1", model="M", n=8,
                      output="out")

This is the bench runner (`BenchRunner`) with three changes: the n samples of a task run side by
side, each episode's line also carries its messages and per-turn tokens, and when a group's
last sample ends its GRPO advantages are computed. The output folder holds:
- rollouts.jsonl: one line per episode, appended as it ends (what --resume reads; `advantage`
  is null there when the group was not complete yet);
- groups.jsonl: one line per completed group (rewards, mean, std, advantages, zero_variance);
- train.jsonl: every completed group's episodes with their advantage filled in, rewritten at the
  end of each run: the file a trainer reads. docs/rollouts.md describes the format.

A line is encoded once, as its episode ends (messages from the trajectory writer's encodings, not
read back from disk); train.jsonl copies those bytes with the advantage put in, unparsed.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import sys
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from isolation import SandboxSpec
from lis_tui.bench.episode import EndTrajectory, Episode, EpisodeContext, dumps, run_episode
from lis_tui.bench.runner import BenchOptions, BenchRunner, cut_torn_tail
from lis_tui.bench.tasks import Task, load_tasks
from lis_tui.config.settings import Config, load_config
from lis_tui.rl.turns import TOKEN_REQUEST, RecordingModel, missing_tokens, sequence, turns_from
from lis_tui.agent.trajectory import write_atomic

EPS = 1e-6
# Where a rollouts.jsonl line leaves the advantage for train.jsonl. A JSON string cannot hold it
# (its quotes would be escaped), so the first match in a line is the field itself.
ADVANTAGE_SLOT = b', "advantage": null, "zero_variance": null, '


@dataclass
class RolloutOptions:
    """How to roll out a task set."""

    output: Path
    n: int = 8
    """Samples (episodes) per task: the GRPO group size."""
    concurrency: int | None = None
    """Episodes at once; default n (one group at a time)."""
    limit: int | None = None
    resume: bool = False
    token_ids: bool = True
    """Ask the server for logprobs and token ids (vLLM); turn off for servers that reject them."""
    progress: TextIO | None = field(default_factory=lambda: sys.stderr)
    workers: int = 1
    """Processes that run the episodes; 1: this one; 0: one per 2 cores, at most `concurrency`."""
    ray: Any = None
    """Run on a Ray cluster: "auto", an address or a `lis_tui.ray.RayOptions`; None: here."""


@dataclass
class RolloutOutcome:
    count: int
    """Lines in train.jsonl."""
    groups: list[dict[str, Any]]
    incomplete: list[str]
    """Tasks whose group misses samples (crashed or interrupted): --resume runs them."""
    interrupted: bool
    output: Path
    warnings: list[str] = field(default_factory=list)
    """What the run warned of (also in warnings.txt), e.g. a server that sent no token ids."""

    @functools.cached_property
    def episodes(self) -> list[dict[str, Any]]:
        """train.jsonl's lines: the episodes of complete groups, with advantages (read when asked:
        parsing them costs more than running a short episode)."""
        text = (self.output / "train.jsonl").read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines()]


def advantages(rewards: list[float], eps: float = EPS) -> tuple[list[float], float, float, bool]:
    """GRPO: (r - mean) / (std + eps), std the sample (n-1) deviation as in verl; zero-variance
    groups (every reward equal, or one sample) get 0 and are marked, as they carry no signal."""
    mean = sum(rewards) / len(rewards)
    if len(rewards) < 2 or max(rewards) == min(rewards):
        return [0.0] * len(rewards), mean, 0.0, True
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    return [(r - mean) / (std + eps) for r in rewards], mean, std, False


class RolloutContext(EpisodeContext):
    """The bench's episode context, whose clients record what the server sent."""

    def client(self) -> Any:
        recorder = RecordingModel(super().client())
        self._local.recorder = recorder
        return recorder

    def take_raw(self) -> list[dict]:
        recorder, self._local.recorder = getattr(self._local, "recorder", None), None
        return recorder.raw if recorder is not None else []

    def trajectory(self, path: Path, header: dict[str, Any]) -> EndTrajectory:
        self._local.writer = writer = super().trajectory(path, header)
        return writer

    def take_trajectory(self) -> EndTrajectory | None:
        writer, self._local.writer = getattr(self._local, "writer", None), None
        return writer


class RolloutRunner(BenchRunner):
    """Runs n samples of every task; `cancel()` may come from any thread."""

    def __init__(self, tasks: list[Task], config: Config, spec: SandboxSpec | None,
                 options: RolloutOptions, judge: Any = None) -> None:
        if options.n < 1:
            raise ValueError("-n must be at least 1 (8 is usual for GRPO)")
        if options.token_ids:
            config.model = replace(config.model, extra_body={**TOKEN_REQUEST,
                                                             **config.model.extra_body})
        # A record's turns each extend the one before, token for token: never compacted
        config.agent = replace(config.agent, compact="off")
        bench = BenchOptions(output=options.output, concurrency=options.concurrency or options.n,
                             repeat=options.n, limit=options.limit, resume=options.resume,
                             progress=options.progress, workers=options.workers, ray=options.ray)
        super().__init__(tasks, config, spec, bench, judge)
        self.rollout_options = options
        self.results_path = options.output / "rollouts.jsonl"
        if self.results_path.exists() and not options.resume:
            raise ValueError(f"{self.results_path} exists: pass --resume to continue that run, or "
                             "choose another --output")
        self.ctx = RolloutContext(config, spec or SandboxSpec(), options.output, judge)
        self.groups_path = options.output / "groups.jsonl"
        self._groups_lock = threading.Lock()
        self._rewards: dict[str, dict[int, float]] = {}
        self._written: set[str] = set()
        self._lines: dict[str, tuple[int, int, bool]] | None = None
        """rollouts.jsonl's last line of each key: (offset, length, crashed); filled by _scan()."""
        self.warnings: list[str] = []

    def episodes(self) -> list[Episode]:
        """A task's n samples next to each other, so its group completes early."""
        return [Episode(t, "sandbox", r) for t in self.tasks for r in range(self.options.repeat)]

    def run_rollouts(self) -> RolloutOutcome:
        self.options.output.mkdir(parents=True, exist_ok=True)
        self._written = self._written_groups()
        with self._write_lock:
            self._scan()
        _, interrupted = self.run_episodes()
        return self.finish(interrupted)

    def finish(self, interrupted: bool = False) -> RolloutOutcome:
        """Write the groups a kill left unwritten, then train.jsonl; returns what is there."""
        with self._write_lock:
            lines = dict(self._scan() if self._lines is None else self._lines)
        done = {key for key, (_, _, crashed) in lines.items() if not crashed}
        with self._groups_lock:
            self._written = self._written_groups()
            for task in self.tasks:
                keys = [f"{task.id}|sandbox|{s}" for s in range(self.options.repeat)]
                rewards = self._rewards.get(task.id, {})
                if task.id not in self._written and all(k in done for k in keys):
                    self._write_group(task.id, [float(rewards[s]) for s in range(self.options.repeat)])
            groups = {g["group_id"]: g for g in self._read_lines(self.groups_path)}
        train = []
        with self.results_path.open("rb") if lines else contextlib.nullcontext() as f:
            for task in self.tasks:
                group = groups.get(task.id)
                for sample, adv in enumerate(group["advantages"] if group else ()):
                    offset, length, _ = lines[f"{task.id}|sandbox|{sample}"]
                    f.seek(offset)
                    train.append(_with_advantage(f.read(length), adv, group["zero_variance"]))
        write_atomic(self.rollout_options.output / "train.jsonl", b"".join(train).decode("utf-8"))
        incomplete = [t.id for t in self.tasks if t.id not in groups]
        if self.warnings:
            (self.rollout_options.output / "warnings.txt").write_text(
                "".join(w + "\n" for w in self.warnings), encoding="utf-8")
        return RolloutOutcome(len(train), [groups[t.id] for t in self.tasks if t.id in groups],
                              incomplete, interrupted, self.rollout_options.output, self.warnings)

    def _previous(self) -> set[str]:
        self.options.output.mkdir(parents=True, exist_ok=True)
        with self._write_lock:
            lines = self._scan() if self._lines is None else self._lines
        return {key for key, (_, _, crashed) in lines.items() if not crashed}

    def _scan(self) -> dict[str, tuple[int, int, bool]]:
        """Index rollouts.jsonl as it is on disk (an earlier run's lines, for --resume) and take
        the rewards of its finished episodes; under the write lock."""
        self._lines = {}
        cut_torn_tail(self.results_path)
        data = self.results_path.read_bytes() if self.results_path.exists() else b""
        offset = 0
        for line in data.split(b"\n"):
            try:
                record = json.loads(line)
            except ValueError:  # torn by a kill mid-write, or the empty piece after the last line
                record = None
            if isinstance(record, dict) and record.get("key") is not None:
                self._lines[record["key"]] = (offset, len(line), bool(record.get("crashed")))
                if not record.get("crashed") and record.get("task_id") is not None:
                    self._rewards.setdefault(record["task_id"], {})[record["sample"]] = record["reward"]
            offset += len(line) + 1
        return self._lines

    # -- one episode ---------------------------------------------------------------------------
    def _one(self, episode: Episode, progress: Any) -> None:
        self.ctx._local.recorder = None  # an episode that crashes before its agent has none
        self.ctx._local.writer = None
        progress.begin()
        try:
            record = run_episode(episode, self.ctx)
        finally:
            progress.end()
        raw, writer = self.ctx.take_raw(), self.ctx.take_trajectory()
        if record is not None:
            self.keep(episode, record, progress, raw, writer)

    def keep(self, episode: Episode, record: dict, progress: Any, raw: list[dict] | None = None,
             writer: Any = None) -> None:
        """Append the episode's rollout line (messages, turns, tokens) and complete its group;
        `writer` is the episode's trajectory (or what a worker sent of it), when there is one
        (else it is read from disk)."""
        data = (self._rollout_line(episode, record, raw or [], writer) + "\n").encode("utf-8")
        with self._write_lock:
            if self._lines is None:
                self._scan()
            with self.results_path.open("ab") as f:
                offset = f.tell()
                f.write(data)
            self._lines[episode.key] = (offset, len(data) - 1, bool(record["crashed"]))
            progress.add(record)
        if not record["crashed"]:
            self._maybe_complete(episode, float(record["reward"]))

    def _rollout_line(self, episode: Episode, record: dict, raw: list[dict], writer: Any) -> str:
        """The line as `dumps` writes the record with the fields below, the messages put in as the
        trajectory writer encoded them."""
        doc = writer.doc if writer is not None else self._trajectory(record)
        messages = writer.messages.compact() if writer is not None else dumps(doc.get("messages", []))
        tools = doc.get("tools", [])
        turns = turns_from(raw)
        model = sum(t["model_tokens"] or 0 for t in turns)
        env = sum(t["environment_tokens"] or 0 for t in turns)
        line = sequence(turns)
        if line is None and not record["crashed"] and self.rollout_options.token_ids:
            self._warn_missing(missing_tokens(turns))
        # tool_format native: `tools` went in the request; else the prompt carried them as text
        head = dumps({**record, "tool_format": doc.get("tool_format") or "native",
                      "task_id": episode.task.id, "group_id": episode.task.id,
                      "sample": episode.repeat})
        tail = dumps({"tools": tools,
                      "usage": {"model_tokens": model, "environment_tokens": env,
                                "environment_share": round(env / (model + env), 4) if model + env else 0.0},
                      "turns": turns, "sequence": line})
        return f'{head[:-1]}{ADVANTAGE_SLOT.decode()}"messages": {messages}, {tail[1:]}'

    def _trajectory(self, record: dict) -> dict[str, Any]:
        try:
            return json.loads((self.options.output / record["trajectory"]).read_text("utf-8"))
        except (OSError, ValueError):
            return {}

    def _warn_missing(self, why: str | None) -> None:
        """Say once, on stderr and in warnings.txt, why train.jsonl's `sequence` is null."""
        if why is None:
            return
        with self._groups_lock:
            if self.warnings:
                return
            self.warnings.append(f"warning: {why}")
        if self.options.progress is not None:
            print(f"\nlis-tui rollout: warning: {why}", file=self.options.progress, flush=True)

    # -- groups --------------------------------------------------------------------------------
    def _maybe_complete(self, episode: Episode, reward: float) -> None:
        # Kept in memory, so a group's completion costs nothing however long rollouts.jsonl is.
        with self._groups_lock:
            group = self._rewards.setdefault(episode.task.id, {})
            group[episode.repeat] = reward
            if len(group) == self.options.repeat and episode.task.id not in self._written:
                self._write_group(episode.task.id, [group[s] for s in range(self.options.repeat)])

    def _write_group(self, task_id: str, rewards: list[float]) -> None:
        advs, mean, std, zero = advantages(rewards)
        line = {"group_id": task_id, "task_id": task_id, "n": len(rewards), "rewards": rewards,
                "mean": mean, "std": std, "advantages": advs, "zero_variance": zero}
        with self.groups_path.open("a", encoding="utf-8") as f:
            f.write(dumps(line) + "\n")
        self._written.add(task_id)

    def _written_groups(self) -> set[str]:
        return {g.get("group_id") for g in self._read_lines(self.groups_path)}

    @staticmethod
    def _read_lines(path: Path) -> list[dict]:
        if not path.exists():
            return []
        lines = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:  # torn by a kill mid-write
                continue
        return lines


def _with_advantage(line: bytes, advantage: float, zero_variance: bool) -> bytes:
    """A rollouts.jsonl line as train.jsonl has it: `dumps` of the record with the two fields set."""
    at = line.index(ADVANTAGE_SLOT)
    filled = f', "advantage": {json.dumps(advantage)}, "zero_variance": {json.dumps(zero_variance)}, '
    return line[:at] + filled.encode() + line[at + len(ADVANTAGE_SLOT):] + b"\n"


def rollout(tasks: str | Path | list[Task], *, policy_url: str, model: str = "", n: int = 8,
            output: str | Path, config: Config | None = None, spec: SandboxSpec | None = None,
            **options: Any) -> RolloutOutcome:
    """Roll out a task set (a file, a built-in name, or Tasks) against a policy server."""
    config = config or load_config()
    config.model = replace(config.model, base_url=policy_url, model=model or config.model.model)
    task_list = tasks if isinstance(tasks, list) else load_tasks(tasks)
    runner = RolloutRunner(task_list, config, spec,
                           RolloutOptions(output=Path(output), n=n, **options))
    return runner.run_rollouts()
