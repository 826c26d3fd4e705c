"""The paper suites' default scorers against llm-in-sandbox 0.2.0 itself: hundreds of (answer,
row) cases over the seven suites, scored by the package's own reward.py / judge.py in a venv of
its own (paper_package_score.py) and by lis-tui, must agree exactly.

The venv is made once under ~/.cache/lis-tui-tests (XDG_CACHE_HOME) and reused: the package
without its agent's dependencies (litellm, docker: scoring never imports them) and its scorers'
libraries at the versions installed here, so a difference is a difference of scoring code.
IFBench's registry is given to the package as if-verifiable's port (the one lis-tui uses), at
IFBENCH_PATH as its README asks. No package, no pass: an install failure fails the test.
"""
import fcntl
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.openai_server import FakeOpenAI, reply
from lis_tui.bench.scoring.judge import Judge
from lis_tui.bench.paper import instructions, load_suite
from lis_tui.bench.scoring.score import score
from lis_tui.config.settings import ModelConfig
from paper_package_cases import JUDGED_SUITES, cases

pytestmark = pytest.mark.paper_package
PACKAGE = "llm-in-sandbox==0.2.0"
LIBRARIES = ("math-verify", "latex2sympy2_extended", "sympy", "mpmath", "antlr4-python3-runtime",
             "rouge-score", "absl-py", "nltk", "numpy", "six", "tqdm", "regex", "click", "joblib",
             "defusedxml", "if-verifiable", "emoji", "syllapy", "immutabledict", "langdetect")
"""The scorers' imports and theirs (the package's reward.py and judge.py: math-verify,
rouge-score, tqdm; IFBench's checks: nltk, emoji, syllapy), pinned to the versions here."""
HARNESS = Path(__file__).with_name("paper_package_score.py")
IFBENCH_REGISTRY = """\
# IFBench's registry for the package (IFBENCH_PATH), from if-verifiable's port of it; its
# package __init__ (which loads `datasets` for its own API) is not run, as IFBench has none.
import importlib.util, sys, types
found = importlib.util.find_spec("if_verifiable")
package = types.ModuleType("if_verifiable")
package.__path__ = list(found.submodule_search_locations)
sys.modules["if_verifiable"] = package
from if_verifiable.ifbench.instructions_registry import INSTRUCTION_DICT
"""


def _pins() -> list[str]:
    try:
        return [f"{d}=={importlib.metadata.version(d)}" for d in LIBRARIES]
    except importlib.metadata.PackageNotFoundError as exc:
        pytest.fail(f"{exc.name} is not installed here; the paper scorers need it: "
                    "./install.sh --dev (the [paper] and [ifbench] extras)")


def package_venv(extra: tuple[str, ...] = (), label: str = "", purpose: str = "to compare the paper scorers with") -> Path:
    """The python of a cached venv holding the package, its scorers' libraries (pinned as here)
    and `extra`, made once per content (under `label` in its name) and shared by every process."""
    pins = _pins()
    key = hashlib.sha256(" ".join([PACKAGE, *pins, *extra, sys.version]).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lis-tui-tests"
    venv = cache / f"llm-in-sandbox-0.2.0-{label + '-' if label else ''}{key}"
    python = venv / "bin" / "python"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "ready").exists():
            subprocess.run(["rm", "-rf", str(venv)], check=True)
            steps = ([sys.executable, "-m", "venv", str(venv)],
                     [str(python), "-m", "pip", "install", "-q", "--no-deps", PACKAGE, *pins],
                     *([[str(python), "-m", "pip", "install", "-q", *extra]] if extra else []))
            for step in steps:
                done = subprocess.run(step, capture_output=True, text=True)
                if done.returncode:
                    pytest.fail(f"could not install {PACKAGE} {purpose} (the test needs the package "
                                f"index): {' '.join(step[:5])} ...: {(done.stdout + done.stderr)[-2000:]}")
            (venv / "ready").touch()
    return python


@pytest.fixture(scope="module")
def package_python():
    """The python of a venv holding the package and its scorers' libraries (made once)."""
    return package_venv()


@pytest.fixture
def nltk_dir(tmp_path, monkeypatch):
    """Empty folders of the NLTK data IFBench's checks look for, on both sides: the cases use
    checks that read none, and nothing is downloaded."""
    import nltk
    for resource in instructions.NLTK_RESOURCES:
        (tmp_path / "nltk" / resource).mkdir(parents=True)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk")])
    instructions.checks.cache_clear()
    yield tmp_path / "nltk"
    instructions.checks.cache_clear()


def package_scores(python, all_cases, tmp_path, nltk):
    ifbench = tmp_path / "ifbench"
    ifbench.mkdir()
    (ifbench / "instructions_registry.py").write_text(IFBENCH_REGISTRY)
    (tmp_path / "cases.json").write_text(json.dumps(all_cases))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "IFBENCH_PATH": str(ifbench), "NLTK_DATA": str(nltk), "PYTHONHASHSEED": "0"}
    done = subprocess.run([str(python), str(HARNESS), str(tmp_path / "cases.json"),
                           str(tmp_path / "package.json")], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp_path / "package.json").read_text())


def our_scores(all_cases, tmp_path):
    """Each case through `load_suite` (the rows as a JSONL file) and `score`, the judged ones
    against a scripted judge server."""
    tasks = {}
    for suite in sorted({c["suite"] for c in all_cases}):
        rows = [dict(c["row"], id=str(n)) for n, c in enumerate(all_cases) if c["suite"] == suite]
        path = tmp_path / f"{suite}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tasks.update({(suite, t.id): t for t in load_suite(suite, str(path))})
    replies = {}
    with FakeOpenAI(default=lambda r: reply(_scripted(r, replies))) as server:
        judge = Judge(ModelConfig(base_url=server.base_url, model="judge", max_retries=0))
        results = []
        for n, case in enumerate(all_cases):
            task = tasks[(case["suite"], str(n))]
            before = len(server.chat_requests)
            if case.get("judge"):
                replies[task.problem_statement] = list(case["replies"])
            got = {"score": score(case["answer"], task, judge)}
            asked = server.chat_requests[before:]
            if case.get("judge"):
                got["asks"] = len(asked)
                got["shown"] = sorted({r.last_content.split("<answer>\n", 1)[1]
                                       .rsplit("\n</answer>", 1)[0] for r in asked})
                got["settings"] = sorted({(r.body.get("temperature"), r.body.get("max_tokens"))
                                          for r in asked})
            results.append(got)
        judge.close()
    return results


def _scripted(request, replies):
    """The next scripted reply for the case whose question the judge prompt quotes."""
    text = request.last_content
    question = text.split("<question>\n", 1)[1].split("\n</question>", 1)[0]
    return replies[question].pop(0)


def differences(all_cases, theirs, ours):
    for case, pkg, got in zip(all_cases, theirs, ours):
        want = {"score": pkg["score"]}
        if case.get("judge"):
            want.update(asks=pkg["asks"], shown=[pkg["shown"]], settings=[(0.7, 16384)])
            got = dict(got, settings=[tuple(s) for s in got["settings"]])
        if want != got and not (want.keys() == got.keys() == {"score"}
                                and abs(want["score"] - got["score"]) < 1e-12):
            yield {"case": case, "package": pkg, "lis-tui": got}


def test_the_default_scorers_return_what_the_package_returns(package_python, tmp_path, nltk_dir):
    all_cases = cases()
    assert len(all_cases) >= 300
    assert {c["suite"] for c in all_cases} >= {"math", "physics", "chem", "biomed", "long_context",
                                               "instruct_follow", "instruct_pretrain"}
    theirs = package_scores(package_python, all_cases, tmp_path, nltk_dir)
    ours = our_scores(all_cases, tmp_path)
    differ = list(differences(all_cases, theirs, ours))
    assert not differ, (f"{len(differ)} of {len(all_cases)} cases differ from the package:\n"
                        + "\n".join(json.dumps(d, default=str) for d in differ[:40]))
    crashed = [c for c, p in zip(all_cases, theirs) if p.get("crashed")]
    assert crashed, "the cases include rows the package's scorer crashes on"
    assert {c["suite"] for c in all_cases if c.get("judge")} == set(JUDGED_SUITES)
