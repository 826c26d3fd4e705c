"""The ReAct loop of the LLM-in-Sandbox paper: `run()` repeats `step()`, a step is one model call
and then its tool calls in order, each answered with a `tool` message, until `submit`.

Control flow uses a small exception tree, as mini-swe-agent does: a `NonTerminating` one ends
the step and its message is appended for the model to read; a `Terminating` one ends the run
and carries the finish reason. The agent never imports a UI: it reports through events
(`lis_tui.agent.events`) and asks for approvals through futures.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import logging
import re
import threading
import time
from typing import Any, Callable, Union

from isolation import SandboxError
from tools import loads_model_json
from lis_tui.agent.errors import (Cancelled, Failed, FormatError, LimitReached, NonTerminating, Submitted,
                                  Terminating)
from lis_tui.config.settings import AgentConfig
from lis_tui.agent.events import (
    ApprovalNeeded, Edit, Event, Listeners, ModelDelta, ModelReply, ModelRequest, ModelRetry,
    Run, RunFinished, RunStarted, RunUsage, Skip, StepFinished, StepRecord, StepStarted,
    ToolFinished, ToolFormatChanged, ToolRecord, ToolStarted,
)
from lis_tui.model.client import ModelCancelled, ModelError, ToolCall
from lis_tui.agent.observation import paper_not_run
from lis_tui.agent.shapes import make_shape
from lis_tui.model.client import ModelReply as Reply
from lis_tui.prompts import Prompts, load_prompts, render
from lis_tui.agent.protocols import Model, Tools
from lis_tui.model.tool_formats import make_format
from tools import ToolResult

log = logging.getLogger(__name__)

WORKING_DIR, INPUT_DIR, OUTPUT_DIR = "/testbed", "/testbed/input", "/testbed/output"
ANSWER_PATH = f"{OUTPUT_DIR}/answer.txt"
ANSWER_LIMIT = 1 << 20
"""Bytes of an answer file read into memory (a sparse 1 GiB answer.txt costs the sandbox nothing);
the whole file still goes to files/ under the export cap."""
PROMPT_VALUES = {"working_dir": WORKING_DIR, "scratch_dir": WORKING_DIR, "input_dir": INPUT_DIR,
                 "output_dir": OUTPUT_DIR, "input_note": "if the task has any", "network_note": "", "environment_note": ""}
CommandApproval = Union[bool, Callable[[str], bool]]
MIN_REPLY_TOKENS = 8192  # the paper's harness lowers max_tokens no further than this


# -- control flow ---------------------------------------------------------------------------------


# -- the agent ------------------------------------------------------------------------------------

class Agent:
    """One run of the loop; make a new Agent per task. `cancel()` may come from any thread."""

    def __init__(self, model: Model, tools: Tools | None = None, config: AgentConfig | None = None,
                 *, prompts: Prompts | None = None, listener: Any = None,
                 prompt_values: dict[str, str] | None = None,
                 command_approval: CommandApproval = False, stream: bool = False,
                 max_tool_output: int = 20_000, reply_reserve: int = 0) -> None:
        self.model, self.tools = model, tools
        self.config = config or AgentConfig()
        if self.config.mode == "sandbox" and tools is None:
            raise ValueError('mode "sandbox" needs tools (a tools.Toolbox); use mode "llm" without')
        self.prompts = prompts or load_prompts(self.config.prompts or None)
        self.listener = listener if isinstance(listener, Listeners) else Listeners(listener)
        self.prompt_values = {**PROMPT_VALUES, **(prompt_values or {})}
        self.command_approval = command_approval
        self.stream = stream
        self.max_tool_output = max_tool_output
        self.reply_reserve = reply_reserve  # tokens kept free for the reply (model.max_tokens)
        self.messages: list[dict] = []
        self.steps: list[StepRecord] = []
        self.usage = RunUsage()
        self._halt, self._halt_reason = threading.Event(), ""
        self._stop_lock, self._done = threading.Lock(), threading.Event()
        self._running = False
        self._no_action = 0
        self._step_no, self._step_started = 0, 0.0
        self._vanilla_answer: str | None = None
        self.format = make_format(self.config.tool_format, self._format_switched)
        """How tool calls travel (`lis_tui.model.tool_formats`); auto may switch it once."""
        self.shape = make_shape(self.config, fill=self._fill, reserve=reply_reserve, schemas=self._schemas,
                                server_limit=getattr(model, "context_length", None), emit=self.emit)
        """The conversation's shape (`lis_tui.agent.shapes`): the paper harness's or lis-tui's."""
        if getattr(model, "on_retry", False) is None:  # ModelClient reports retries this way
            model.on_retry = self._retried  # type: ignore[attr-defined]

    # -- public -------------------------------------------------------------------------------
    def run(self, task: str) -> RunFinished:
        """Run until submit, a limit, an error or cancel(); the result is also the last event."""
        started = time.monotonic()
        with self._stop_lock:
            self._running = True
        self.messages = self._first_messages(task)
        self.shape.begin(self.messages)
        tool_names = [s["function"]["name"] for s in self.tools.schemas] \
            if self.tools is not None and self.config.mode != "llm" else []
        self.emit(RunStarted(task, self.config.mode, self.messages, tool_names, self.format.name))
        clock = self._start_clock()
        try:
            self._run_vanilla() if self.config.mode == "llm" else self._loop()
        except Terminating as stop:
            reason, message = stop.reason, str(stop)
        except KeyboardInterrupt:  # run in the main thread: Ctrl-C ends it like cancel() would
            reason, message = "cancelled", "interrupted (Ctrl-C)"
        except Exception as exc:  # a bug, or a sandbox that died: keep the record and say so
            log.exception("the agent loop failed")
            reason, message = "error", f"{type(exc).__name__}: {exc}"
        finally:
            with self._stop_lock:
                self._running = False
            self._done.set()
            if clock is not None:
                clock.cancel()
        answer, note = self._read_answer()
        event = RunFinished(reason, answer, len(self.steps), self.usage,
                            time.monotonic() - started, message, note)
        self.emit(event)
        return event

    def begin(self, task: str) -> list[dict]:
        """Start a conversation on `task` without running it, for callers that drive `step()`
        themselves (`lis_tui.rl.SandboxEnv`); returns the first messages."""
        self.messages = self._first_messages(task)
        self.shape.begin(self.messages)
        return self.messages

    def step(self) -> None:
        """One model call and its tool calls; a reply without a tool call is nudged."""
        record = self._begin_step()
        try:
            self.execute(self.query(record), record)
            self._no_action = 0
        except NonTerminating as exc:
            record.nudged = True
            self._no_action += 1
            if self.config.max_no_action and self._no_action >= self.config.max_no_action:
                raise LimitReached("no_action", f"{self._no_action} replies in a row called no "
                                   "tool (agent.max_no_action)") from None
            self.messages.append({"role": "user", "content": str(exc)})
        except Terminating as stop:
            record.stopped = stop.reason
            raise
        finally:
            self._end_step(record)

    def cancel(self) -> None:
        """Stop soon: the model call or shell command in progress is interrupted."""
        self._stop("cancelled")

    def compact_soon(self) -> bool:
        """Compact the conversation before the next model call (from any thread); False when its
        shape never compacts (paper mode) or `agent.compact` is off."""
        return self.shape.compact_soon()

    def emit(self, event: Event) -> None:
        self.listener.on_event(event)

    # -- the loop -----------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            self.step()

    def _run_vanilla(self) -> None:
        record = self._begin_step()
        try:
            self._vanilla_answer = self.query(record).text.strip()
        except Terminating as stop:
            record.stopped = stop.reason
            raise
        finally:
            self._end_step(record)
        raise Submitted()

    def query(self, record: StepRecord) -> Reply:
        """One model call; the reply is appended to the conversation."""
        self.shape.before_call(self.messages, record.step)
        self.messages = self.shape.fit(self.messages, record.step)
        self.emit(ModelRequest(record.step, self.messages))
        on_delta = (lambda kind, text: self.emit(ModelDelta(record.step, kind, text))) \
            if self.stream else None
        started = time.monotonic()
        try:
            reply = self._complete(on_delta)
        finally:
            record.model_duration = time.monotonic() - started
        if self.config.mode != "llm":
            reply = self.format.read(reply, f"call_{record.step}")
        record.text, record.reasoning, record.usage = reply.text, reply.reasoning, reply.usage
        record.finish_reason = reply.finish_reason
        self.messages.append(self.shape.assistant_message(reply, self.format))
        self.shape.counted(reply.usage, self.messages)
        self.emit(ModelReply(record.step, reply.text, reply.reasoning, reply.tool_calls,
                             reply.usage, record.model_duration))
        if self.config.mode != "llm" and not reply.tool_calls:
            raise FormatError(self._fill(reply.format_error) or self.shape.nudge(self.format))
        if self.config.mode != "llm" and self.config.bad_arguments == "nudge" \
                and not _is_json(reply.tool_calls[0].arguments):
            raise FormatError(self.shape.nudge(self.format))  # the paper's harness reads such a reply as no call
        return reply

    @property
    def answer_path(self) -> str:
        """Where the answer is read from: answer.txt in the output folder the prompt names."""
        return f"{self.prompt_values['output_dir']}/answer.txt"

    def _fill(self, text: str) -> str:
        """A tool format's text with this run's folders in it (they differ beside a workspace)."""
        return render(text, self.prompt_values)

    def _complete(self, on_delta: Any) -> Reply:
        # Asked again after auto switched away from `tools` (once a run), and after the shape
        # compacted a prompt the server found too long (once a step: a second refusal ends the run).
        while True:
            try:
                return self._ask(on_delta)
            except ModelCancelled:
                raise self._halted() from None
            except ModelError as exc:
                if self.config.mode == "llm":
                    raise Failed(str(exc)) from None
                refused = getattr(self.format, "refused", None)
                if refused is not None and refused(exc.status, str(exc)):
                    continue
                fitted = self.shape.refused(exc, self.messages, self._step_no)
                if fitted is None:
                    raise Failed(str(exc)) from None
                self.messages = fitted

    def _ask(self, on_delta: Any) -> Reply:
        """One call; with `prompt_too_long = "shrink"`, a prompt the server finds too long is
        asked again with a lower max_tokens, as the paper's harness does (in both its modes)."""
        max_tokens = getattr(getattr(self.model, "config", None), "max_tokens", None)
        for lowered in itertools.count():
            try:
                if not lowered:  # a model that is not a ModelClient never sees the keyword
                    return self.model.complete(self.messages, self._schemas(), on_delta)
                return self.model.complete(self.messages, self._schemas(), on_delta,
                                           max_tokens=max_tokens)
            except ModelError as exc:
                if self.config.prompt_too_long != "shrink" or not max_tokens or exc.status is None:
                    raise
                tried, max_tokens = max_tokens, shrunk_max_tokens(exc.detail, max_tokens)
                if max_tokens is None:
                    raise
                self.emit(ModelRetry(self._step_no, lowered + 1, 0.0, "prompt too long; max_tokens "
                                     f"{tried} -> {max_tokens} (agent.prompt_too_long)"))
        raise AssertionError("unreachable")

    def _format_switched(self, new: Any, reason: str, replied: bool = False) -> None:
        """auto switched to a text format: its instructions go where the model will read them."""
        note = self._fill(new.system_note(self.tools.schemas if self.tools is not None else []))
        said = replied or any(m.get("role") == "assistant" for m in self.messages)
        if not said and self.messages and self.messages[0].get("role") == "system":
            # nothing sent has been answered yet: the prompt is as if the format had been chosen
            self.messages[0] = {**self.messages[0], "content": f"{self.messages[0]['content']}\n\n{note}"}
        self.emit(ToolFormatChanged(self._step_no, "native", new.name, reason))

    def execute(self, reply: Reply, record: StepRecord) -> None:
        """Run the reply's tool calls in order, each answered (the format says how); with
        `tool_calls = "first"` only the first, and the others go unanswered, as in the paper's
        harness (its RL models saw exactly that)."""
        calls = reply.tool_calls[:1] if self.config.tool_calls == "first" else reply.tool_calls
        answered: list[tuple[ToolCall, str]] = []
        try:
            for index, call in enumerate(calls):
                try:
                    if self._halt.is_set():
                        raise self._halted()
                    tool = self._run_tool(record.step, index, call)
                except Terminating:
                    answered += _unrun(calls[index:], "Not run: the run was stopped first.")
                    raise
                record.tool_calls.append(tool)
                answered.append((call, tool.output))
                if tool.submitted:
                    answered += _unrun(calls[index + 1:], "Not run: `submit` ended the task.")
                    raise Submitted()
                if why := self._sandbox_stopped():  # the model was told in the tool's answer
                    answered += _unrun(calls[index + 1:], f"Not run: the sandbox was stopped: {why}.")
                    raise LimitReached("sandbox_limit", f"the sandbox was stopped: {why}")
        finally:
            # Every tool call must get an answer, or the conversation is invalid to resume or train on.
            self.messages.extend(self.format.results(answered))
        if self._halt.is_set():
            raise self._halted()

    def _sandbox_stopped(self) -> str | None:
        """Why a limit stopped the sandbox whole (its disk cap), else None."""
        why = getattr(getattr(self.tools, "sandbox", None), "stopped", None)
        return why if isinstance(why, str) else None

    # -- one tool call ------------------------------------------------------------------------
    def _run_tool(self, step: int, index: int, call: ToolCall) -> ToolRecord:
        args = decode_arguments(call.arguments)
        self.emit(ToolStarted(step, index, call, args))
        record = ToolRecord(call.id, call.name, call.arguments)
        decision = self._approve(step, call, args)
        if args is None and self.config.bad_arguments == "nudge":  # JSON, not an object
            text = paper_not_run(call.name)
            record.submitted = call.name in ("submit", "finish")
        elif isinstance(decision, Skip):
            record.approval = "skipped"
            reason = decision.reason or "no reason given"
            text = f"[The user chose not to run this command: {reason}. Take that into account.]"
        else:
            if isinstance(decision, Edit):
                record.approval = "edited"
                record.arguments = json.dumps({**(args or {}), "command": decision.command})
            elif decision is not None:
                record.approval = "run"
            started = time.monotonic()
            result = self.tools.dispatch(call.name, record.arguments)
            record.duration = time.monotonic() - started
            text = self._tool_text(call.name, result, decision)
            record.exit_code, record.error = result.exit_code, result.error
            record.truncated = result.truncated or len(result.output) > self.max_tool_output
            record.timed_out, record.submitted = result.timed_out, result.submitted
        record.output = text
        record.environment_tokens = len(text) // 4
        self.emit(ToolFinished(step, index, record))
        return record

    def _tool_text(self, tool: str, result: ToolResult, decision: Any) -> str:
        if result.framed:  # the paper flavour's tools answer in the package's words, whole
            text = result.output
        else:
            text = self.shape.observation(tool, result, self.max_tool_output)
        if isinstance(decision, Edit):
            text = (f"[The user changed your command before it ran; it ran as:\n"
                    f"{decision.command}]\n{text}")
        return text

    def _approve(self, step: int, call: ToolCall, args: dict | None) -> Run | Edit | Skip | None:
        """None when no approval is needed, else the person's answer (waited for)."""
        rule = self.command_approval
        command = (args or {}).get("command")
        if call.name != "execute_bash" or not rule or not isinstance(command, str):
            return None
        if callable(rule) and not rule(command):
            return None
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.emit(ApprovalNeeded(step, call.id, command, future))
        while True:
            try:
                answer = future.result(timeout=0.1)  # short, so cancel() is seen
            except concurrent.futures.TimeoutError:
                if self._halt.is_set():  # the loop stops right after this call
                    future.cancel()
                    return Skip("the run was stopped before anyone answered")
                continue
            except concurrent.futures.CancelledError:
                return Skip("the approval was withdrawn")
            except Exception as exc:
                return Skip(f"the approval failed ({exc})")
            if isinstance(answer, (Run, Edit, Skip)):
                return answer
            return Run() if answer is True else Skip(f"not approved ({answer!r})")

    # -- steps, limits, stopping ------------------------------------------------------------
    def _begin_step(self) -> StepRecord:
        if len(self.steps) >= self.config.max_steps:
            raise LimitReached("max_steps", f"reached {self.config.max_steps} steps "
                               "(raise --max-steps or agent.max_steps)")
        if self._halt.is_set():
            raise self._halted()
        self._step_no = len(self.steps) + 1
        record = StepRecord(self._step_no, time.time())
        self._step_started = time.monotonic()
        self.emit(StepStarted(record.step))
        return record

    def _end_step(self, record: StepRecord) -> None:
        record.duration = time.monotonic() - self._step_started
        self.steps.append(record)
        self.usage.add(record)
        self.emit(StepFinished(record.step, record, self.messages))

    def _start_clock(self) -> threading.Timer | None:
        if not self.config.wall_time:
            return None
        timer = threading.Timer(self.config.wall_time, self._stop, args=("wall_time",))
        timer.daemon = True
        timer.start()
        return timer

    def _stop(self, reason: str) -> None:
        with self._stop_lock:
            if self._halt.is_set():
                return  # the first reason wins
            self._halt_reason = reason
            self._halt.set()
            if not self._running:
                return  # run() has not started (it stops at once) or has ended
        threading.Thread(target=self._interrupt_until_done, daemon=True, name="lis-stop").start()

    def _interrupt_until_done(self) -> None:
        # The model client and the shell forget an interrupt that comes just before a call
        # starts (each clears its flag then), so repeat it until the loop has seen the halt.
        while True:
            self.model.cancel()
            self._interrupt_tools()
            if self._done.wait(0.1):
                return

    def _interrupt_tools(self) -> None:
        interrupt = getattr(self.tools, "interrupt", None)
        if interrupt is not None:
            interrupt()

    def _halted(self) -> Terminating:
        if self._halt_reason == "wall_time":
            return LimitReached("wall_time", f"the run took longer than {self.config.wall_time:g} s "
                                "(agent.wall_time)")
        return Cancelled("cancelled")

    def _retried(self, notice: Any) -> None:
        self.emit(ModelRetry(self._step_no, notice.attempt, notice.delay, notice.reason))

    # -- prompts and the answer -------------------------------------------------------------
    def _schemas(self) -> list[dict] | None:
        """The request's `tools`: the tools' schemas in the native format, else none."""
        if self.tools is None or self.config.mode == "llm":
            return None
        return self.format.request_tools(self.tools.schemas)

    def _first_messages(self, task: str) -> list[dict]:
        # {problem_statement} is the paper's package's name for the task in its prompt files
        values = {**self.prompt_values, "task": task, "problem_statement": task}
        p = self.prompts
        system, user = (p.llm_system, p.llm_instance) if self.config.mode == "llm" \
            else (p.system, p.instance)
        note = self._fill(self.format.system_note(self.tools.schemas)) if self.tools is not None \
            and self.config.mode != "llm" else ""
        system = render(system, values) if system.strip() else ""
        # AGENTS.md goes in as written: its braces are not placeholders
        system = "\n\n".join(part for part in (system, p.instructions, note) if part)
        messages = [{"role": "system", "content": system}] if system else []
        return messages + [{"role": "user", "content": render(user, values)}]

    def _read_answer(self) -> tuple[str, str]:
        """The answer and, when there is none, a note saying why."""
        if self.config.mode == "llm":
            if self._vanilla_answer is None:
                return "", "no reply came"
            return self._vanilla_answer, "" if self._vanilla_answer else "the reply was empty"
        path = self.answer_path
        try:
            data = self.tools.sandbox.read_file(path, ANSWER_LIMIT)
        except FileNotFoundError:
            return "", f"no {path} was written"
        except (OSError, SandboxError) as exc:
            return "", f"could not read {path}: {exc}"
        return data.decode("utf-8", "replace").strip(), ""


def _unrun(calls: list[ToolCall], text: str) -> list[tuple[ToolCall, str]]:
    return [(call, text) for call in calls]


def shrunk_max_tokens(server_message: str, max_tokens: int) -> int | None:
    """The max_tokens to ask again with after the server refused a prompt as too long, or None
    to give up: llm-in-sandbox 0.2.0's rule (`Agent.model_query`). With the context length and
    the prompt's tokens both in the message, what is left of the context less 100, when that is
    at least 8192 and below `max_tokens`; without them, half, down to 8192."""
    low = server_message.lower()
    if "token" not in low or not any(word in low for word in ("exceed", "limit", "maximum")):
        return None
    context = re.search(r"(?:maximum|context)[^\d]*(\d+)\s*tokens", server_message, re.I)
    prompt = re.search(r"(\d+)\s*tokens?\s*(?:from\s*(?:the\s*)?(?:input|messages?)|"
                       r"in\s*(?:the\s*)?(?:input|prompt|messages?))", server_message, re.I)
    context_tokens = int(context.group(1)) if context else 0
    prompt_tokens = int(prompt.group(1)) if prompt else 0
    if context_tokens and prompt_tokens:  # a 0 counts as not found there too
        room = context_tokens - prompt_tokens - 100
        return room if MIN_REPLY_TOKENS <= room < max_tokens else None
    return max(max_tokens // 2, MIN_REPLY_TOKENS) if max_tokens > MIN_REPLY_TOKENS else None


def _is_json(arguments: str) -> bool:
    """Whether `json.loads` (the paper's harness's reading, not our lenient one) takes it."""
    try:
        json.loads(arguments)
    except ValueError:
        return False
    return True


def decode_arguments(arguments: str) -> dict | None:
    """The JSON object of a tool call's arguments, or None when they are not one."""
    try:
        value = loads_model_json(arguments) if arguments.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None

