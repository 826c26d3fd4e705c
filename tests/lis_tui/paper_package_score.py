"""Scores cases with llm-in-sandbox's own code; run by test_paper_package.py in the package's venv.

    python paper_package_score.py CASES.json OUT.json

Each case is {"suite", "answer", "row"} (scored as the package's runner does: reward.py's
`compute_score(answer, row["ground_truth"], **the row's other fields)`, 0 when it raises) or
{"suite", "judge": true, "answer", "row", "replies"} (the judge script's prompt and the mean of
its verdicts on the scripted replies). The package's reward modules are loaded from their files
the way its runner loads them, without running its `__init__`s (they import litellm and docker
for the agent, which scoring never touches).
"""
import contextlib
import importlib.util
import json
import sys
import types
from pathlib import Path


def _package() -> Path:
    spec = importlib.util.find_spec("llm_in_sandbox")  # finds it without importing it
    root = Path(spec.submodule_search_locations[0])
    for name, folder in (("llm_in_sandbox", root),
                         ("llm_in_sandbox.benchmark", root / "benchmark")):
        module = types.ModuleType(name)
        module.__path__ = [str(folder)]
        sys.modules[name] = module
    return root / "benchmark"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(cases_path: str, out_path: str) -> None:
    bench = _package()
    cases = json.loads(Path(cases_path).read_text())
    rewards = {s: _load(bench / s / "reward.py", "reward").compute_score
               for s in {c["suite"] for c in cases if not c.get("judge")}}
    judges = {s: _load(bench / s / "judge.py", f"judge_{s}")
              for s in {c["suite"] for c in cases if c.get("judge")}}
    results = []
    with contextlib.redirect_stdout(sys.stderr):  # the package prints its warnings
        for case in cases:
            row = case["row"]
            if case.get("judge"):
                judge = judges[case["suite"]]
                prompt = judge.create_judge_prompt(row.get("problem_statement", ""),
                                                   row["ground_truth"], case["answer"])
                verdicts = [judge.extract_verdict(r) for r in case["replies"]]
                scores = [1.0 if v == "CORRECT" else 0.0 for v in verdicts]
                results.append({"score": sum(scores) / len(scores), "asks": len(scores),
                                "shown": prompt.split("CANDIDATE ANSWER TO ASSESS: ", 1)[1]
                                .rsplit("\n\nReply only with CORRECT or INCORRECT.", 1)[0]})
                continue
            others = {k: v for k, v in row.items() if k != "ground_truth"}
            try:
                score, crashed = rewards[case["suite"]](case["answer"], row["ground_truth"],
                                                        **others), ""
            except Exception as exc:  # noqa: BLE001 (the runner records 0 and the error)
                score, crashed = 0.0, f"{type(exc).__name__}: {exc}"
            results.append({"score": float(score), "crashed": crashed})
    Path(out_path).write_text(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:])
