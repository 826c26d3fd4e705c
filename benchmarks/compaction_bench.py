"""What compaction costs, and why lis-tui writes the summary itself rather than asking the model.

    .venv/bin/python benchmarks/compaction_bench.py [--rounds 40] [--limits 6000,16000]

A scripted model runs ROUNDS commands that each print about 700 tokens, then submits, in a real
sandbox, at each context limit. The table gives, per limit: the compactions, the largest request
(the scripted server's count: a fourth of its bytes), the prompt tokens sent in all, and lis-tui's
own time per compaction (the digest: choosing what goes, writing the summary lines).

The last columns are what a summary written by the model would have added, from the same run: one
more request per compaction carrying the conversation it summarizes (its prompt, at least what the
compaction took out) and a reply of SUMMARY_TOKENS generated tokens, which at DECODE tokens a
second (a 7-8B model on one consumer GPU) the person waits for at every compaction. Neither is
lis-tui's to make smaller, and a summary request can itself fail or come back empty.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fakes.openai_server import FakeOpenAI, call, reply, submit  # noqa: E402
from lis_tui import run_task  # noqa: E402
from lis_tui.agent import compaction  # noqa: E402
from lis_tui.config.settings import load_config  # noqa: E402

SUMMARY_TOKENS = 500
"""What a model's summary of an agent's steps runs to (Codex's and OpenHands' prompts ask for a
structured page: the task, the state, the files, what is next)."""
DECODE = 40.0


def scripted(rounds: int):
    made = itertools.count(1)

    def answer(request):
        n = next(made)
        if n > rounds:
            return submit()
        return reply(f"round {n}", [call("execute_bash", {"command": f"python3 -c \"print('round {n} ' + 'x' * 2700)\""})])
    return answer


def one(limit: int, rounds: int, out: Path) -> dict:
    spent: list[float] = []
    real = compaction.compact

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    compaction.compact = timed
    try:
        with FakeOpenAI(default=scripted(rounds)) as server:
            config = load_config(env={}, paths=[], overrides={
                "model.base_url": server.base_url, "model.model": "m", "model.max_retries": 0,
                "sandbox.rootfs": "host", "agent.max_context_tokens": limit, "agent.max_steps": rounds + 5})
            result = run_task("Print the rounds.", config=config, output_dir=out)
            sizes = [r.size // 4 for r in server.chat_requests]
    finally:
        compaction.compact = real
    doc = json.loads(result.trajectory_path.read_text())
    done = doc.get("compactions", [])
    taken = sum(c["tokens"][0] - c["tokens"][1] for c in done)
    return {"limit": limit, "result": f"{result.finish_reason} after {result.steps}", "compactions": len(done),
            "largest": max(sizes), "sent": sum(sizes), "ms": 1000 * sum(spent) / max(len(spent), 1),
            "model_prompt": sum(c["tokens"][0] for c in done), "model_taken": taken,
            "model_wait": len(done) * SUMMARY_TOKENS / DECODE}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--limits", default="6000,16000")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for limit in (int(x) for x in args.limits.split(",")):
            rows.append(one(limit, args.rounds, Path(tmp) / str(limit)))
    print(f"{args.rounds} rounds of ~700 tokens each, then submit (scripted model, real sandbox)\n")
    print("| limit | run | compactions | largest request | prompt tokens sent | lis-tui ms / compaction "
          f"| a model summary: + requests | + prompt tokens | + s waited at {DECODE:g} tok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['limit']:,} | {r['result']} | {r['compactions']} | {r['largest']:,} | {r['sent']:,} | "
              f"{r['ms']:.2f} | +{r['compactions']} | +{r['model_prompt']:,} (of which {r['model_taken']:,} "
              f"taken out) | +{r['model_wait']:.0f} |")


if __name__ == "__main__":
    main()
