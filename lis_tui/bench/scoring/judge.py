"""The `judge` reward: an OpenAI-compatible model reads the problem, the reference and the answer."""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, replace
from typing import Any

from lis_tui.config.settings import ModelConfig
from lis_tui.model.client import ModelClient, ModelError

DEFAULT_PROMPT = """\
You grade answers to a task against a reference answer.

Task:
<task>
{problem}
</task>

Reference answer:
<reference>
{ground_truth}
</reference>

Answer to grade:
<answer>
{answer}
</answer>

Decide whether the answer is correct: it must agree with the reference in substance; wording,
formatting and extra explanation do not matter, a different or missing result does. Reply with
one short sentence of reasons, then a last line that is exactly CORRECT or INCORRECT."""
_VERDICT = re.compile(r"\b(INCORRECT|CORRECT)\b")
_SCORE = re.compile(r"score\s*[:=]\s*([01](?:\.\d+)?)", re.IGNORECASE)


@dataclass
class Judge:
    """Grades with one model; thread-safe (a model client per thread)."""

    config: ModelConfig
    prompt: str = DEFAULT_PROMPT
    """Template with {problem}, {ground_truth} and {answer}; a task may bring its own."""

    def __post_init__(self) -> None:
        self._local = threading.local()
        self._clients: list[ModelClient] = []
        self._lock = threading.Lock()

    def grade(self, task: Any, answer: str, params: dict[str, Any] | None = None) -> float:
        """1.0 for CORRECT, 0.0 for INCORRECT, or the `score: x` the judge gives (0 to 1); a
        reasoning model's thinking (up to `</think>`) is left out of the answer judged. With
        `verdict = "llm-in-sandbox"` (the paper suites), as the package's judge script grades
        (lis_tui.bench.paper.judging)."""
        params = params or {}
        template = params.get("prompt") or self.prompt
        if params.get("verdict") == "llm-in-sandbox":
            from lis_tui.bench.paper import judging  # noqa: PLC0415

            return judging.grade(self, task, answer, template)
        # A reasoning model's thinking is not its answer (the paper's judge drops it too).
        answer = answer.partition("</think>")[2] if "</think>" in answer else answer
        if not answer.strip():
            return 0.0
        truth = task.ground_truth
        text = self.fill(template, task.problem_statement,
                         "\n".join(map(str, truth)) if isinstance(truth, list) else str(truth),
                         answer)
        return verdict(self.ask(text))

    @staticmethod
    def fill(template: str, problem: str, truth: str, answer: str) -> str:
        return template.replace("{problem}", problem).replace("{ground_truth}", truth).replace(
            "{answer}", answer)

    def ask(self, text: str, **settings: Any) -> str:
        """The judge's reply to one user message; `settings` (temperature, max_tokens) override
        the judge model's for this call. JudgeError when the model fails."""
        try:
            return self._client(settings).complete([{"role": "user", "content": text}]).text
        except ModelError as exc:
            raise JudgeError(f"the judge model failed: {exc}") from None

    def close(self) -> None:
        with self._lock:
            for client in self._clients:
                client.close()
            self._clients.clear()

    def _client(self, settings: dict[str, Any]) -> ModelClient:
        clients = self._local.__dict__.setdefault("clients", {})
        key = tuple(sorted(settings.items()))
        if key not in clients:
            clients[key] = ModelClient(replace(self.config, stream=False, **settings))
            with self._lock:
                self._clients.append(clients[key])
        return clients[key]


class JudgeError(RuntimeError):
    """The judge could not grade; the episode is recorded with this error."""


def verdict(text: str) -> float:
    """The grade in a judge's reply: its last CORRECT/INCORRECT, else `score: x`, else 0."""
    found = _VERDICT.findall(text.upper())
    if found:
        return 1.0 if found[-1] == "CORRECT" else 0.0
    scored = _SCORE.findall(text)
    return min(1.0, float(scored[-1])) if scored else 0.0
