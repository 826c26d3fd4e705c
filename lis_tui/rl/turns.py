"""Per-turn token records of an episode: usage split into model and environment tokens, and, when
the server sends them, completion token ids and logprobs with a loss mask.

`RecordingModel` wraps the episode's model client and keeps what the server answered; the agent
sees the same client it always does. Token ids come from vLLM: `logprobs: true` with
`return_tokens_as_token_ids: true` makes each logprob entry's token `"token_id:N"`, and
`return_token_ids: true` adds the prompt's ids (`prompt_token_ids`) and the completion's
(`choices[0].token_ids`). With the prompt ids, the tokens a turn adds before the model speaks
(tool results, nudges: the environment's) are the new prompt ids since the last turn; they get
loss mask 0, the model's own tokens 1.
"""
from __future__ import annotations

from typing import Any

# Asked of the policy server; vLLM knows all three, SGLang the first.
TOKEN_REQUEST = {"logprobs": True, "return_tokens_as_token_ids": True, "return_token_ids": True}


class RecordingModel:
    """A model client that records each raw completion; one per episode, used from one thread."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.raw: list[dict] = []

    @property
    def on_retry(self) -> Any:
        return self.inner.on_retry

    @on_retry.setter
    def on_retry(self, value: Any) -> None:
        self.inner.on_retry = value

    def complete(self, messages: list[dict], tools: list[dict] | None = None,
                 on_delta: Any = None) -> Any:
        reply = self.inner.complete(messages, tools, on_delta)
        self.raw.append(reply.raw if isinstance(reply.raw, dict) else {})
        return reply

    def cancel(self) -> None:
        self.inner.cancel()


def turns_from(raw: list[dict]) -> list[dict[str, Any]]:
    """One record per model call, in order."""
    turns, before = [], None  # before: (prompt ids, completion ids) of the previous turn
    prev_total = None
    for n, completion in enumerate(raw):
        usage = completion.get("usage") or {}
        prompt, produced = usage.get("prompt_tokens"), usage.get("completion_tokens")
        turn: dict[str, Any] = {"turn": n, "prompt_tokens": prompt, "model_tokens": produced,
                                "environment_tokens": _new_tokens(prompt, prev_total, n)}
        prev_total = prompt + produced if prompt is not None and produced is not None else None
        ids, logprobs = _completion_tokens(completion)
        prompt_ids = completion.get("prompt_token_ids")
        if ids is not None:
            env_ids = _environment_ids(prompt_ids, before, n)
            turn.update(completion_token_ids=ids, completion_logprobs=logprobs)
            if env_ids is not None:
                turn.update(environment_token_ids=env_ids,
                            token_ids=env_ids + ids, loss_mask=[0] * len(env_ids) + [1] * len(ids),
                            logprobs=[0.0] * len(env_ids) + logprobs)
            else:  # no prompt ids: only the model's tokens are known
                turn.update(token_ids=ids, loss_mask=[1] * len(ids), logprobs=logprobs)
            if n == 0 and prompt_ids is not None:
                turn["prompt_token_ids"] = prompt_ids
        before = (prompt_ids, ids)
        turns.append(turn)
    return turns


def sequence(turns: list[dict]) -> dict[str, Any] | None:
    """The whole episode as one prompt and one response with a loss mask (verl's and OpenRLHF's
    shape), when every turn's environment tokens are known; else None."""
    if not turns or "prompt_token_ids" not in turns[0]:
        return None
    if not all("environment_token_ids" in t for t in turns):
        return None
    return {"prompt_token_ids": turns[0]["prompt_token_ids"],
            "response_token_ids": [i for t in turns for i in t["token_ids"]],
            "loss_mask": [m for t in turns for m in t["loss_mask"]],
            "logprobs": [lp for t in turns for lp in t["logprobs"]]}


def missing_tokens(turns: list[dict]) -> str | None:
    """Why `sequence(turns)` is None, said for the person running the rollout; None if it is not."""
    if not turns or sequence(turns) is not None:
        return None
    asked = ", ".join(f"{k}: true" for k in TOKEN_REQUEST)
    if not any("completion_token_ids" in t for t in turns):
        return (f"the policy server returned no token ids (asked with {asked}), so train.jsonl has "
                "`sequence: null` and no per-turn token ids, logprobs or loss masks: a trainer must "
                "re-tokenize `messages` with the model's chat template, and has no sampling logprobs "
                "for its importance ratios. vLLM returns them for these options; SGLang returns "
                "logprobs; llama.cpp's server and most hosted APIs return none. Serve the policy "
                "with vLLM for token-exact training, or pass --no-token-ids to stop asking.")
    if "prompt_token_ids" not in turns[0]:
        return ("the policy server returned the completions' token ids but not the prompts' "
                "(vLLM's `return_token_ids: true` adds `prompt_token_ids`), so train.jsonl has "
                "`sequence: null` and environment tokens are only counted: a trainer must "
                "re-tokenize `messages` for the prompt and tool results. A vLLM recent enough to "
                "know return_token_ids returns both.")
    return ("a turn's prompt did not extend the previous prompt and completion (the chat template "
            "re-renders earlier turns, e.g. drops old reasoning), so those episodes have "
            "`sequence: null` and their environment tokens are only counted; re-tokenize their "
            "`messages`, or serve with a chat template that keeps earlier turns as they were.")


def _new_tokens(prompt: int | None, prev_total: int | None, n: int) -> int | None:
    if n == 0:
        return 0  # the first prompt is the task, not the environment
    if prompt is None or prev_total is None:
        return None
    return max(0, prompt - prev_total)


def _completion_tokens(completion: dict) -> tuple[list[int] | None, list[float]]:
    choice = (completion.get("choices") or [{}])[0]
    content = ((choice.get("logprobs") or {}).get("content")) or []
    logprobs = [float(entry.get("logprob", 0.0)) for entry in content]
    ids = choice.get("token_ids")
    if ids is None and content:
        parsed = [_token_id(entry.get("token")) for entry in content]
        ids = None if any(i is None for i in parsed) else parsed
    if ids is not None and len(logprobs) != len(ids):
        logprobs = logprobs[: len(ids)] + [0.0] * (len(ids) - len(logprobs))
    return ids, logprobs


def _token_id(token: Any) -> int | None:
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token[len("token_id:"):])
        except ValueError:
            return None
    return None


def _environment_ids(prompt_ids: list[int] | None, before: tuple | None, n: int) -> list[int] | None:
    if prompt_ids is None:
        return None
    if n == 0:
        return []
    if before is None or before[0] is None or before[1] is None:
        return None
    seen = before[0] + before[1]
    # A chat template may re-render earlier turns (e.g. drop old reasoning): then the new prompt
    # is not an extension of the old one, and its environment tokens cannot be told apart.
    if prompt_ids[: len(seen)] != seen:
        return None
    return prompt_ids[len(seen):]
