"""Harness overhead of one agent step, against a scripted model server that answers at once.

    .venv/bin/python benchmarks/agent_step_bench.py [--steps N] [--runs R] [--max-context-tokens N]

Each step is one model call (the real openai client over HTTP to FakeOpenAI) that asks for
`execute_bash` of `true`, the shell round trip, the events, and the rewrite of trajectory.json.
Target (issue 5): harness overhead = step - the tool call, p50 <= 5 ms. A step's time runs from
one StepStarted event to the next, so the trajectory save after it is counted. The scripted
server runs in a process of its own, as a real one would (`--in-process` shares ours and its
GIL; its work then shows in the model-call column); its own time is in that column either way.
`--max-context-tokens 4000` makes the conversation compact every thirty steps or so (a hundred steps
of `true` is about 7,000 tokens), to see what a compaction costs the step it happens in.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The repository first: tests/isolation (a test folder) would otherwise pass for the package.
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes.openai_server import FakeOpenAI, call, reply  # noqa: E402
from isolation import Sandbox  # noqa: E402
from lis_tui.agent import events  # noqa: E402
from lis_tui.agent.loop import Agent  # noqa: E402
from lis_tui.config.settings import AgentConfig, ModelConfig  # noqa: E402
from lis_tui.model.client import ModelClient  # noqa: E402
from lis_tui.agent.trajectory import TrajectoryWriter  # noqa: E402
from tools import TOOL_SCHEMAS, Toolbox  # noqa: E402
from tools.shell import Shell  # noqa: E402

TARGET_MS = 5.0
SCRIPTED = reply(tool_calls=[call("execute_bash", {"command": "true"})])
SERVER = """
import sys
sys.path[:0] = sys.argv[1:]
from fakes.openai_server import FakeOpenAI, call, reply
import json
with FakeOpenAI(default=reply(tool_calls=[call("execute_bash", {"command": "true"})])) as server:
    print(server.base_url, flush=True)
    sys.stdin.read()
    print(json.dumps(server.handle_times), flush=True)
"""


@contextlib.contextmanager
def scripted_server(in_process: bool, handle_times: list[float] | None = None):
    """The base URL of a FakeOpenAI that always asks for `true`; on exit, `handle_times` gets
    how long the server itself took over each answer."""
    handle_times = [] if handle_times is None else handle_times
    if in_process:
        with FakeOpenAI(default=SCRIPTED) as server:
            yield server.base_url
        handle_times += server.handle_times
        return
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(ROOT), str(ROOT / "tests")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        handle_times += json.loads(proc.stdout.readline() or "[]")
        proc.wait()


class StepClock:
    """Times each step from its StepStarted to the next event of that kind (or RunFinished)."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float, float]] = []  # (step, model, tool) seconds
        self._started: float | None = None
        self._record: events.StepRecord | None = None

    def on_event(self, event: object) -> None:
        now = time.perf_counter()
        if isinstance(event, (events.StepStarted, events.RunFinished)):
            if self._started is not None and self._record is not None:
                tool = sum(t.duration for t in self._record.tool_calls)
                self.rows.append((now - self._started, self._record.model_duration, tool))
            self._started = now
        elif isinstance(event, events.StepFinished):
            self._record = event.record


def one_run(base_url: str, steps: int, sandbox: Sandbox, out: Path,
            conversation: list[dict], limit: int = 0, compacted: list[int] | None = None) -> list[tuple[float, ...]]:
    """Step timings of one agent; its conversation halfway through is left in `conversation`, and
    how many times it compacted is appended to `compacted`."""
    clock = StepClock()
    writer = TrajectoryWriter(out / "trajectory.json", {"id": "bench"})
    model = ModelClient(ModelConfig(model="m", base_url=base_url))
    toolbox = Toolbox(sandbox, shell=Shell(sandbox))
    try:
        # the writer first, as run_task orders them: the clock then sees the step saved
        agent = Agent(model, toolbox, AgentConfig(max_steps=steps, max_context_tokens=limit),
                      listener=events.Listeners(writer, clock))
        finished = agent.run("benchmark: run `true` until stopped")
        assert finished.reason == "max_steps", finished
        conversation[:] = agent.messages[:2 + 2 * (steps // 2)]
        if compacted is not None:
            compacted.append(len(writer.compactions))
    finally:
        toolbox.close()
        model.close()
    return clock.rows[1:]  # the first step pays for the HTTP connection and client set-up


def shell_round_trips(sandbox: Sandbox, runs: int) -> list[float]:
    with Shell(sandbox) as shell:
        for _ in range(20):
            shell.run("true")
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            shell.run("true")
            times.append(time.perf_counter() - start)
    return times


def model_calls(base_url: str, conversation: list[dict], runs: int) -> list[float]:
    """ModelClient.complete alone, on a conversation as long as a run's middle step sends."""
    with ModelClient(ModelConfig(model="m", base_url=base_url)) as model:
        for _ in range(20):
            model.complete(conversation, TOOL_SCHEMAS)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            model.complete(conversation, TOOL_SCHEMAS)
            times.append(time.perf_counter() - start)
    return times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="steps per run (default 100)")
    parser.add_argument("--runs", type=int, default=5, help="runs, each a fresh agent")
    parser.add_argument("--max-context-tokens", type=int, default=0, metavar="N",
                        help="the context limit (default: none given, so nothing compacts)")
    parser.add_argument("--in-process", action="store_true",
                        help="serve the script from this process (measures its work too)")
    args = parser.parse_args()

    rows: list[tuple[float, ...]] = []
    conversation: list[dict] = []
    served: list[float] = []
    compacted: list[int] = []
    with scripted_server(args.in_process, served) as base_url, Sandbox() as sandbox, \
            tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            out = Path(tmp) / str(run)
            out.mkdir()
            gc.collect()
            rows += one_run(base_url, args.steps, sandbox, out, conversation, args.max_context_tokens, compacted)
        shell = shell_round_trips(sandbox, len(rows))
        alone = model_calls(base_url, conversation, len(rows))

    step = [r[0] for r in rows]
    table = [
        ("step: model call + execute_bash `true` + bookkeeping", step),
        ("  model call (openai client -> scripted server)", [r[1] for r in rows]),
        ("  tool call (Toolbox.dispatch -> Shell.run)", [r[2] for r in rows]),
        ("  bookkeeping (events, trajectory.json, messages)", [r[0] - r[1] - r[2] for r in rows]),
        ("step - tool call", [r[0] - r[2] for r in rows]),
        ("  of which the scripted server's own handling", served),
        ("Shell.run('true') alone, for reference", shell),
        (f"ModelClient.complete alone ({len(conversation)} messages)", alone),
    ]
    where = "in this process" if args.in_process else "in its own process"
    limit = f"; context limit {args.max_context_tokens:,}: {sum(compacted)} compactions" \
        if args.max_context_tokens else ""
    print(f"{len(rows)} steps ({args.runs} runs of {args.steps}, first step of each left out); "
          f"scripted server {where}{limit}\n")
    print(f"| {'measure':<52} | {'p50 ms':>7} | {'p90 ms':>7} | {'max ms':>7} |")
    print(f"|{'-' * 54}|{'-' * 9}|{'-' * 9}|{'-' * 9}|")
    for name, values in table:
        print(f"| {name:<52} | {pct(values, .5):7.2f} | {pct(values, .9):7.2f} | "
              f"{max(values) * 1000:7.2f} |")
    # The issue times the harness against a server that answers at once; ours is Python and takes
    # a millisecond or more to parse each request and answer it, which is not the harness's work.
    served_ms = pct(served, .5)
    overhead = pct([r[0] - r[2] for r in rows], .5) - served_ms
    verdict = "meets" if overhead <= TARGET_MS else "MISSES"
    print(f"\nharness overhead p50 = (step - tool call) p50 - scripted server's handling p50 = "
          f"{overhead + served_ms:.2f} - {served_ms:.2f} = {overhead:.2f} ms: "
          f"{verdict} the target of <= {TARGET_MS:g} ms")
    # Stricter: only the shell's round trip measured alone (a hot loop, no idle wake-up) is not ours.
    strict = pct(step, .5) - pct(shell, .5) - served_ms
    print(f"stricter, step p50 - Shell.run alone p50 - server's handling p50 = {strict:.2f} ms "
          f"({'meets' if strict <= TARGET_MS else 'MISSES'} it)")


if __name__ == "__main__":
    main()
