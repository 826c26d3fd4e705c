"""One benchmark episode: a fresh sandbox (or none in `llm` mode), the agent, the score, a record.

`EpisodeContext` holds what every episode shares (config, sandbox spec, judge, output folder)
and what the runner needs to stop them (the live agents and sandboxes).
"""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from isolation import Sandbox, SandboxSpec
from lis_tui.agent.loop import ANSWER_LIMIT, INPUT_DIR, OUTPUT_DIR, Agent
from lis_tui.bench.scoring.answers import final_answer
from lis_tui.bench.report.capability import KINDS, CapabilityCounter
from lis_tui.bench.scoring.rewards import MATH_REWARDS, math_verify_missing, parse_reward
from lis_tui.bench.scoring.score import score
from lis_tui.bench.tasks import Task
from lis_tui.config.settings import Config
from lis_tui.agent.events import Listeners, RunFinished
from lis_tui.model.client import ModelClient
from lis_tui.prompts import Prompts, load_prompts
from lis_tui.agent.trajectory import TrajectoryWriter

DOCUMENTS_DIR = "/testbed/documents"
LLM_SUFFIX = ("\n\nEnd your reply with `ANSWER:` followed by your final answer only: on the same "
              "line, or on the lines after it when the answer has several lines. When the task asks "
              "for a file, the answer is that file's exact contents.")


@dataclass(frozen=True)
class Episode:
    """One run of one task in one mode; `key` names it in results.jsonl and for --resume."""

    task: Task
    mode: str
    repeat: int = 0

    @property
    def key(self) -> str:
        return f"{self.task.id}|{self.mode}|{self.repeat}"

    @property
    def folder(self) -> str:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.task.id)[:80]
        if safe != self.task.id:  # two ids may clean up to the same name: keep them apart
            safe += "-" + hashlib.sha1(self.task.id.encode()).hexdigest()[:8]
        return f"{safe}.{self.mode}.{self.repeat}"


@dataclass
class EpisodeContext:
    """What all episodes share; thread-safe."""

    config: Config
    spec: SandboxSpec
    output: Path
    judge: Any = None
    stop: threading.Event = field(default_factory=threading.Event)
    agents: set = field(default_factory=set)
    sandboxes: set = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _local: threading.local = field(default_factory=threading.local)
    _clients: list = field(default_factory=list)
    _prompts: dict = field(default_factory=dict)

    def prompts(self, path: str) -> Prompts:
        """The prompts of `path` (agent.prompts; "": the built-in ones), read and parsed once
        per run rather than once per episode (a tenth of an episode's own CPU in the harness)."""
        found = self._prompts.get(path)
        if found is None:
            found = self._prompts[path] = load_prompts(path or None)  # a race reads it twice: fine
        return found

    def client(self) -> ModelClient:
        """This thread's model client (one per worker: a client serves one caller at a time);
        all of them share the first one's HTTP client."""
        client = getattr(self._local, "client", None)
        if client is None:
            with self.lock:
                client = self._clients[0].sibling() if self._clients else ModelClient(self.config.model)
                self._clients.append(client)
            self._local.client = client
        client.on_retry = None  # the next agent hooks its own retry reporting in
        return client

    def track(self, kind: str, thing: Any, live: bool) -> None:
        with self.lock:
            getattr(self, kind).add(thing) if live else getattr(self, kind).discard(thing)

    def cancel(self, hard: bool = False) -> None:
        """Stop every episode: agents finish as cancelled; `hard` also kills the sandboxes."""
        self.stop.set()
        with self.lock:
            agents, sandboxes = list(self.agents), list(self.sandboxes)
        for agent in agents:
            agent.cancel()
        for sandbox in sandboxes if hard else ():
            sandbox.close()

    def trajectory(self, path: Path, header: dict[str, Any]) -> EndTrajectory:
        """The episode's trajectory writer (rollouts keep it, to take its messages from memory)."""
        return EndTrajectory(path, header)

    def close(self) -> None:
        with self.lock:
            clients, self._clients = self._clients, []
        for client in reversed(clients):  # the first, which owns the HTTP client, last
            client.close()


class EndTrajectory(TrajectoryWriter):
    """trajectory.json written once, when the episode ends. A bench episode cut short is run
    again on --resume, so saving after every step buys nothing and cost a fifth of the
    harness's CPU per episode."""

    def save(self) -> None:
        if self.doc.get("finish_reason") is not None:
            super().save()

    def crashed(self, message: str) -> None:
        self.doc.update(finish_reason="error", message=message)
        self.save()


def run_episode(episode: Episode, ctx: EpisodeContext) -> dict[str, Any] | None:
    """The episode's record; None when it was cancelled (so --resume runs it again)."""
    if ctx.stop.is_set():
        return None
    started = time.monotonic()
    folder = ctx.output / "episodes" / episode.folder
    shutil.rmtree(folder, ignore_errors=True)  # a run cut short earlier left it
    folder.mkdir(parents=True)
    counter = CapabilityCounter()
    writer = ctx.trajectory(folder / "trajectory.json", _header(episode, ctx))
    listeners = Listeners(writer, counter)
    try:
        finished, answer = _drive(episode, ctx, listeners)
    except Exception as exc:  # noqa: BLE001 (any crash is recorded; the other episodes go on)
        if ctx.stop.is_set():
            return None
        record = _crashed(episode, folder, exc, started, counter)
        writer.crashed(record["message"])
        return record
    if ctx.stop.is_set() and finished.reason != "submitted":
        return None  # stopped by us (a hard stop may end it as an error): --resume runs it again
    return _record(episode, ctx, folder, finished, answer, started, counter)


def _drive(episode: Episode, ctx: EpisodeContext, listeners: Listeners) -> tuple[RunFinished, str]:
    task = episode.task
    config = replace(ctx.config.agent, mode=episode.mode, observation=observation_for(ctx.config, task))
    as_package = episode.mode == "llm" and task.extra.get("llm_prompt") == "paper"
    prompts = ctx.config.agent.prompts
    if episode.mode == "llm" and ctx.config.sources.get("agent.prompts") == "paper":
        prompts = ""  # the paper's default prompts are its sandbox mode's; --llm-prompt rules here
        config = replace(config, prompts=prompts)
    if task.layout and episode.mode == "llm":
        config = replace(config, max_context_tokens=0)  # the package's LLM mode has no such limit
    # A paper suite's trajectory limit counts the prompt alone, as the package's does.
    reserve = 0 if task.layout else ctx.config.model.max_tokens or 0

    def make_agent(tools: Any, values: dict[str, str]) -> Agent:
        prompts = _PACKAGE_LLM if as_package else ctx.prompts(config.prompts)
        agent = Agent(ctx.client(), tools, config, listener=listeners, prompt_values=values,
                      reply_reserve=reserve, prompts=prompts)
        ctx.track("agents", agent, True)
        if ctx.stop.is_set():
            agent.cancel()
        return agent

    if episode.mode == "llm":
        agent = make_agent(None, {})
        try:
            finished = agent.run(_llm_task(task, prompts, as_package))
        finally:
            ctx.track("agents", agent, False)
        if as_package:  # the whole reply, as the package scores it
            return finished, agent.steps[-1].text if agent.steps else ""
        return finished, final_answer(finished.answer)
    return _in_sandbox(task, ctx, make_agent, config.observation == "paper")


_PACKAGE_LLM = Prompts(system="", instance="", llm_system="", llm_instance="{task}")
"""The package's LLM mode: no system prompt, the user message as `package_prompt` makes it."""


def observation_for(config: Config, task: Task) -> str:
    """The observation format: as configured when it was set, else the paper's for its suites."""
    if config.sources.get("agent.observation", "default") != "default" or not task.layout:
        return config.agent.observation
    return "paper"


def _in_sandbox(task: Task, ctx: EpisodeContext, make_agent: Any,
                stderr_apart: bool) -> tuple[RunFinished, str]:
    from tools import Toolbox  # noqa: PLC0415 (llm-only runs need no tools)
    from tools.shell import Shell  # noqa: PLC0415

    with Sandbox(ctx.spec) as sandbox:
        ctx.track("sandboxes", sandbox, True)
        try:
            stage_files(sandbox, task)
            toolbox = _paper_toolbox(sandbox) if stderr_apart else \
                Toolbox(sandbox, shell=Shell(sandbox, timeout=ctx.config.sandbox.timeout))
            agent = make_agent(toolbox, task_prompt_values(task, ctx.spec))
            try:
                finished = agent.run(task.problem_statement)
            finally:
                ctx.track("agents", agent, False)
                toolbox.close()
            return finished, _answer(sandbox, task, finished)
        finally:
            ctx.track("sandboxes", sandbox, False)


def _paper_toolbox(sandbox: Sandbox) -> Any:
    """The package's tools as its agent runs them (tools.paper), with its own schemas when it
    is installed."""
    from lis_tui.prompts.package import package_tools  # noqa: PLC0415
    from tools.paper import PaperToolbox  # noqa: PLC0415

    return PaperToolbox(sandbox, schemas=package_tools())


def _llm_task(task: Task, prompts: str, as_package: bool = False) -> str:
    """What `llm` mode sends: the installed package's own baseline prompt with `--prompts
    llm-in-sandbox:S`, the package's as lis-tui writes it (a paper suite's default), the paper
    suite's in lis-tui's words (`--llm-prompt lis-tui`), or ours."""
    from lis_tui.prompts.package import is_package_ref, vanilla_prompt  # noqa: PLC0415

    if is_package_ref(prompts):
        row = {**task.extra, "id": task.id, "domain": task.domain, "ground_truth": task.ground_truth,
               "problem_statement": task.problem_statement, "input_files": dict(task.input_files)}
        return vanilla_prompt(prompts)(row)
    if as_package:
        from lis_tui.bench.paper.llm_mode import package_prompt  # noqa: PLC0415 (paper suites only)

        return package_prompt(task)
    return paper_llm_prompt(task) if task.layout else llm_prompt(task)


def paper_llm_prompt(task: Task) -> str:
    from lis_tui.bench.paper.suites import llm_prompt as paper_prompt  # noqa: PLC0415

    return paper_prompt(task)


def llm_prompt(task: Task) -> str:
    """The task for `llm` mode: no computer, so the files it brings are inlined, as in the paper."""
    parts = [task.problem_statement]
    for path, text in task_files(task):
        parts.append(f'<file path="/testbed/{path}">\n{text}\n</file>')
    return "\n\n".join(parts) + LLM_SUFFIX


def task_files(task: Task) -> list[tuple[str, str]]:
    """(path under /testbed, text) of every file the task brings; binary files are left out, and
    so is a file whose real path is outside its folder: a task's folder is data, and a link in it
    could name any file of the host (sandbox mode copies a link as a link, which stays inside)."""
    found = []
    for prefix, files, folder in (("input", task.input_files, task.input_dir),
                                  ("documents", task.documents, task.documents_dir)):
        found += [(f"{prefix}/{name}", text) for name, text in sorted(files.items())]
        for path in sorted(folder.rglob("*")) if folder is not None else ():
            try:
                inside = path.resolve().is_relative_to(folder.resolve())
                text = path.read_text(encoding="utf-8") if inside and path.is_file() else None
            except (OSError, UnicodeDecodeError, RuntimeError):  # RuntimeError: a link loop
                continue
            if text is not None:
                found.append((f"{prefix}/{path.relative_to(folder).as_posix()}", text))
    return found


def stage_files(sandbox: Sandbox, task: Task) -> None:
    """Put the task's input files and documents into /testbed with one tar inside the sandbox."""
    if not task.has_files:
        if task.layout and task.extra.get("empty_input_dir"):  # all its files null: as there
            sandbox.exec(["mkdir", "-p", task.layout.input_dir], timeout=30, cwd="/")
        return
    buffer = io.BytesIO()
    # A paper suite puts the row's files where the paper did (e.g. /testbed/documents)
    inputs = _under_testbed(task.layout.input_dir) if task.layout else "input"
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for prefix, files, folder in ((inputs, task.input_files, task.input_dir),
                                      ("documents", task.documents, task.documents_dir)):
            if folder is not None:
                tar.add(str(folder), arcname=prefix)
            for name, text in files.items():
                data = text.encode("utf-8")
                info = tarfile.TarInfo(f"{prefix}/{name}")
                info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
                tar.addfile(info, io.BytesIO(data))
    result = sandbox.exec(["tar", "--no-same-owner", "-xf", "-", "-C", "/testbed"],
                          stdin=buffer.getvalue(), timeout=120, cwd="/")
    if result.exit_code != 0:
        raise RuntimeError(f"could not place the task's files in the sandbox: {result.stderr.strip()}")


def _under_testbed(path: str) -> str:
    return str(PurePosixPath(path).relative_to("/testbed"))


def _answer(sandbox: Sandbox, task: Task, finished: RunFinished) -> str:
    if (task.answer_file == "answer.txt" and not task.layout) or not sandbox.readable:
        return finished.answer
    path = task.layout.answer_path if task.layout else f"{OUTPUT_DIR}/{task.answer_file}"
    try:
        return sandbox.read_file(path, ANSWER_LIMIT).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def task_prompt_values(task: Task, spec: SandboxSpec) -> dict[str, str]:
    """The values the agent's prompts are filled with for `task` in a sandbox made from `spec`:
    where its files are (`input_note`, and for a paper suite `input_dir` and `output_dir`), what
    the network allows (`network_note`) and what the rootfs offers (`environment_note`). Bench
    episodes and RL environments (lis_tui.rl.env) both use it, so the two prompts agree."""
    from lis_tui.api import NETWORK_NOTES  # noqa: PLC0415
    from lis_tui.prompts.environment import environment_note  # noqa: PLC0415

    has_input = bool(task.input_files or task.input_dir)
    input_dir = task.layout.input_dir if task.layout else INPUT_DIR
    note = f"see `ls {input_dir}`" if has_input else "it is empty: this task came with no files"
    if task.documents or task.documents_dir:
        note += f"; the task's documents are in {DOCUMENTS_DIR}"
    values = {"input_note": note, "network_note": NETWORK_NOTES.get(spec.network, ""),
              "environment_note": environment_note(spec.rootfs)}
    if task.layout:  # the prompt names the suite's folders, so answer.txt lands where it is read
        values.update(input_dir=input_dir, output_dir=task.layout.output_dir)
    return values


def _header(episode: Episode, ctx: EpisodeContext) -> dict[str, Any]:
    return {"id": episode.key, "task_id": episode.task.id, "domain": episode.task.domain,
            "model": ctx.config.model.public_dict(), "bench_mode": episode.mode}


def _record(episode: Episode, ctx: EpisodeContext, folder: Path, finished: RunFinished,
            answer: str, started: float, counter: CapabilityCounter) -> dict[str, Any]:
    reward_error = ""
    try:
        reward = score(answer, episode.task, ctx.judge)
    except Exception as exc:  # noqa: BLE001 (a judge that fails marks this episode, not the run)
        reward, reward_error = 0.0, f"{type(exc).__name__}: {exc}"
    (folder / "answer.txt").write_text(answer + "\n" if answer else "", encoding="utf-8")
    u = finished.usage
    return _line(episode, folder, started, counter, answer=answer, reward=reward,
                 finish_reason=finished.reason, steps=finished.steps,
                 message=finished.message or ("" if answer else finished.answer_note),
                 tokens=(u.prompt_tokens, u.completion_tokens, u.environment_tokens,
                         u.last_prompt_tokens + u.last_completion_tokens),
                 reward_error=reward_error, notes=_scorer_notes(episode.task))


def _scorer_notes(task: Task) -> list[str]:
    """How the scores differ from what they stand for (shown in the summary): a scorer that ran
    without math-verify undercounts; a paper suite's other scorer is not the paper's metric."""
    notes = [task.extra["scorer_note"]] if task.extra.get("scorer_note") else []
    if parse_reward(task.reward)[0] in MATH_REWARDS and math_verify_missing():
        from isolation.extras import install_hint  # noqa: PLC0415

        notes.append(f"scored without math-verify (to install it: `{install_hint('paper')}`): equal "
                     "expressions written differently, like \\sqrt{12} and 2\\sqrt{3}, count "
                     "as wrong")
    return notes


def _crashed(episode: Episode, folder: Path, exc: Exception, started: float,
             counter: CapabilityCounter) -> dict[str, Any]:
    message = f"the episode crashed: {type(exc).__name__}: {exc}"
    # The record keeps the line; the file keeps where it came from, to find the bug by.
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    (folder / "error.txt").write_text(f"{message}\n\n{trace}", encoding="utf-8")
    return _line(episode, folder, started, counter, answer="", reward=0.0, finish_reason="error",
                 message=message, steps=counter.steps, tokens=(0, 0, 0, 0), crashed=True)


def lost_record(episode: Episode, output: Path, message: str) -> dict[str, Any]:
    """The crashed record of an episode that its runner lost (a cluster node died under it)."""
    folder = output / "episodes" / episode.folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "error.txt").write_text(message + "\n", encoding="utf-8")
    return _line(episode, folder, time.monotonic(), CapabilityCounter(), answer="", reward=0.0,
                 finish_reason="error", message=message, steps=0, tokens=(0, 0, 0), crashed=True)


def _line(episode: Episode, folder: Path, started: float, counter: CapabilityCounter, *,
          answer: str, reward: float, finish_reason: str, message: str, steps: int,
          tokens: tuple[int, int, int, int], crashed: bool = False,
          reward_error: str = "", notes: list[str] | None = None) -> dict[str, Any]:
    """One line of results.jsonl; `tokens.trajectory` is the last call's prompt and reply."""
    return {"key": episode.key, "id": episode.task.id, "mode": episode.mode,
            "repeat": episode.repeat, "domain": episode.task.domain,
            "suite": episode.task.extra.get("paper_suite", ""), "answer": answer,
            "correct": reward >= 1.0, "reward": reward, "finish_reason": finish_reason,
            "message": message, "steps": steps,
            "tokens": dict(zip(("prompt", "completion", "environment", "trajectory"), tokens)),
            "wall_time": round(time.monotonic() - started, 3),
            "capability": {k: counter.counts[k] for k in KINDS}, "crashed": crashed,
            "reward_error": reward_error, "notes": notes or [],
            "trajectory": str(Path("episodes") / folder.name / "trajectory.json")}


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=False)
