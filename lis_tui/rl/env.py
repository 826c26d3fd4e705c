"""`SandboxEnv`: one bench episode driven from outside, for trainers that generate themselves.

    env = SandboxEnv()
    first = env.reset(task)                 # messages (system + task prompt) and tool schemas
    while True:
        out = env.step(completion)          # an OpenAI assistant message, or the raw text
        ...                                 # out.messages: tool results (or a format error)
        if out.done: break                  # out.reward: the bench's reward on answer.txt
    env.close()

The sandbox, its files, the prompts, the tools and the reward are the bench's (`run_episode`);
the loop is the agent's own `step()`, fed with the trainer's reply instead of a model call.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from isolation import Sandbox, SandboxError, SandboxSpec
from lis_tui.agent.loop import ANSWER_LIMIT, OUTPUT_DIR, Agent
from lis_tui.agent.errors import Terminating
from lis_tui.bench.episode import stage_files, task_prompt_values
from lis_tui.bench.scoring.rewards import parse_reward
from lis_tui.bench.scoring.score import score
from lis_tui.bench.tasks import Task, tasks_from_items
from lis_tui.config.settings import Config, load_config
from lis_tui.model.reply import ModelReply
from lis_tui.model.textcalls import parse_assistant


@dataclass
class StepResult:
    """What one `step` produced."""

    messages: list[dict]
    """The messages the step added after the assistant's: tool results, or a note to the model."""
    assistant: dict
    """The assistant message as the environment read it (text calls become `tool_calls`)."""
    done: bool = False
    reward: float | None = None
    """The bench's reward on the answer, once `done`."""
    finish_reason: str | None = None
    """submitted, max_steps, max_context or error, once `done`."""
    answer: str | None = None
    steps: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    """`format_error` (the reply's calls could not be read), `reward_error`, `message`."""

    def to_dict(self) -> dict[str, Any]:
        return {"messages": self.messages, "assistant": self.assistant, "done": self.done,
                "reward": self.reward, "finish_reason": self.finish_reason, "answer": self.answer,
                "steps": self.steps, "info": self.info}


class EnvError(RuntimeError):
    """A call the environment cannot take now (no episode, episode over); says what to do."""


class EnvClosed(EnvError):
    """The environment was closed while a step ran; what the step did is lost with its sandbox."""


class _FedModel:
    """The trainer is the model: `complete` hands the agent the reply given to `step`."""

    on_retry = False  # the agent hooks retry reporting only into clients that have it as None

    def __init__(self) -> None:
        self.reply: ModelReply | None = None

    def complete(self, messages: list[dict], tools: Any = None, on_delta: Any = None) -> ModelReply:
        reply, self.reply = self.reply, None
        if reply is None:  # the agent asks once per step(), after step() has fed the reply
            raise RuntimeError("the agent asked for a second reply within one step")
        return reply

    def cancel(self) -> None:
        pass


class SandboxEnv:
    """One environment: `reset(task)` starts an episode in a fresh sandbox, `step` runs the
    model's tool calls, `close` ends it. Not for concurrent use: one caller steps it at a time."""

    def __init__(self, config: Config | None = None, spec: SandboxSpec | None = None,
                 judge: Any = None, max_steps: int | None = None) -> None:
        self.config = config or load_config()
        self.spec = spec or SandboxSpec()
        self.judge = judge
        self.max_steps = max_steps or self.config.agent.max_steps
        self.task: Task | None = None
        self.sandbox: Sandbox | None = None
        self.done = False
        self._agent: Agent | None = None
        self._model = _FedModel()
        self._toolbox: Any = None
        self._lock = threading.Lock()  # close() may come from a reaper while a step runs

    @property
    def messages(self) -> list[dict]:
        """The whole conversation so far."""
        return self._agent.messages if self._agent is not None else []

    @property
    def steps(self) -> int:
        return len(self._agent.steps) if self._agent is not None else 0

    def reset(self, task: Task | dict) -> dict[str, Any]:
        """A fresh sandbox holding the task's files; returns `messages` and `tools`."""
        from tools import Toolbox  # noqa: PLC0415
        from tools.shell import Shell  # noqa: PLC0415

        task = task if isinstance(task, Task) else tasks_from_items([task], Path.cwd(), "task", None)[0]
        if self.judge is None and parse_reward(task.reward)[0] == "judge":
            raise ValueError(f"task {task.id!r} is scored by a judge model: pass "
                             "SandboxEnv(judge=lis_tui.bench.scoring.judge.Judge(model_config))")
        self.close()
        sandbox = Sandbox(self.spec).start()
        try:
            stage_files(sandbox, task)
            toolbox = Toolbox(sandbox, shell=Shell(sandbox, timeout=self.config.sandbox.timeout))
        except BaseException:
            sandbox.close()
            raise
        # The trainer owns time (the pool reaps idle ones), the format (parse_assistant has read
        # its text already, and results go back as OpenAI tool messages) and the conversation,
        # which only grows: each prompt is the last one, its completion and the environment's turn.
        agent_config = replace(self.config.agent, mode="sandbox", max_steps=self.max_steps,
                               wall_time=0, tool_format="native", compact="off")
        agent = Agent(self._model, toolbox, agent_config,
                      prompt_values=task_prompt_values(task, self.spec),
                      reply_reserve=self.config.model.max_tokens or 0)
        with self._lock:
            self.task, self.sandbox, self._toolbox, self._agent = task, sandbox, toolbox, agent
            self.done = False
        return {"messages": [dict(m) for m in agent.begin(task.problem_statement)],
                "tools": toolbox.schemas}

    def step(self, assistant: dict | str) -> StepResult:
        """Run the calls in `assistant` (an OpenAI message or raw completion text)."""
        agent = self._agent
        if agent is None:
            raise EnvError("no episode: call reset(task) first")
        if self.done:
            raise EnvError("the episode is over (done); reset() starts another")
        sandbox = self.sandbox
        if sandbox is None:
            raise EnvError("the environment was closed; reset() starts another episode")
        reply = parse_assistant(assistant, call_prefix=f"call_{self.steps + 1}")
        self._model.reply = reply
        before = len(agent.messages)
        result = StepResult([], {}, info={"format_error": reply.format_error} if reply.format_error else {})
        finish = None
        try:
            agent.step()
        except Terminating as stop:
            finish = stop.reason, str(stop)
        except Exception:
            if self.sandbox is sandbox:
                raise
        if finish is None and self.steps >= self.max_steps:
            finish = "max_steps", f"reached {self.max_steps} steps"
        if finish is not None and self.sandbox is sandbox:
            self._finish(result, *finish)
        # A close (DELETE, the idle reaper, shutdown) during the step killed what it ran: its
        # tool results describe a sandbox that is gone, so none is passed off as an answer.
        if self.sandbox is not sandbox:
            raise EnvClosed("the environment was closed while this step ran (DELETE, the idle reaper, "
                            "or the server stopping); what the step did is lost: reset another")
        result.assistant = agent.messages[before] if len(agent.messages) > before else reply.to_message()
        result.messages = agent.messages[before + 1:]
        result.steps = self.steps
        return result

    def _finish(self, result: StepResult, reason: str, message: str) -> None:
        self.done = result.done = True
        result.finish_reason = reason
        result.answer = self._read_answer()
        try:
            result.reward = float(score(result.answer, self.task, self.judge))
        except Exception as exc:  # noqa: BLE001 (a failing judge marks this episode only)
            result.reward, result.info["reward_error"] = 0.0, f"{type(exc).__name__}: {exc}"
        if message and reason != "submitted":
            result.info["message"] = message

    def _read_answer(self) -> str:
        task = self.task
        path = task.layout.answer_path if task.layout else f"{OUTPUT_DIR}/{task.answer_file}"
        try:
            data = self.sandbox.read_file(path, limit=ANSWER_LIMIT)
        except (OSError, SandboxError):
            return ""
        return data.decode("utf-8", "replace").strip()

    def close(self) -> None:
        """End the episode's sandbox and every process in it; safe to call twice."""
        with self._lock:
            toolbox, sandbox = self._toolbox, self.sandbox
            self._toolbox = self.sandbox = None
        # The sandbox first: from the moment it starts closing, a step still running (an editor
        # write after its command was cut) is refused, so nothing lands in a scratch being removed.
        try:
            if sandbox is not None:
                sandbox.close()
        finally:
            if toolbox is not None:
                toolbox.close()

    def __enter__(self) -> SandboxEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
