"""What a server says of its model's context window, so that a run compacts before the server would
refuse its prompt (lis_tui.agent.shapes). Asked once a client, only when a prompt grows past a
couple of thousand tokens; a server that says nothing leaves lis-tui's default.

- vLLM and SGLang: `max_model_len` in the model's entry of `GET /v1/models`.
- llama.cpp's server: `meta.n_ctx_train` there is what the model was trained for; what the server
  was started with (`-c`, shared by its `--parallel` slots) is `default_generation_settings.n_ctx`
  in `GET /props`, beside /v1.
- OpenRouter, Together, LM Studio, Groq and others: `context_length`, `context_window` or
  `max_context_length` in the entry.
- Ollama says none here (and cuts a long prompt itself, at its `num_ctx`); nor does OpenAI.
"""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
KEYS = ("max_model_len", "context_length", "context_window", "max_context_length")
TIMEOUT = 5.0


def context_length(client: Any, base_url: str, model: str) -> int | None:
    """The context `model` has on the server an openai client (`client`) talks to, or None."""
    asker = client.with_options(timeout=TIMEOUT, max_retries=0)
    try:
        entries = [e for e in asker.get("/models", cast_to=object).get("data", []) if isinstance(e, dict)]
    except Exception as exc:  # noqa: BLE001 (no answer is an answer: the default holds)
        log.debug("the server did not list its models' context: %s", exc)
        return None
    # the model's own entry; a server that serves one answers to any name (llama.cpp lists its file)
    entry = next((e for e in entries if e.get("id") == model), entries[0] if len(entries) == 1 else None)
    if entry is None:
        return None
    said = next((entry[key] for key in KEYS if _count(entry.get(key))), None)
    meta = entry.get("meta")
    if said is None and isinstance(meta, dict) and _count(meta.get("n_ctx_train")):
        said = min(meta["n_ctx_train"], _served_context(asker, base_url) or meta["n_ctx_train"])
    return said


def _served_context(asker: Any, base_url: str) -> int | None:
    """llama.cpp's context per slot, from /props at the server's root."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        props = asker.get(f"{root}/props", cast_to=object)
    except Exception as exc:  # noqa: BLE001
        log.debug("llama.cpp's /props did not answer: %s", exc)
        return None
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    for place in (settings, props):
        if isinstance(place, dict) and _count(place.get("n_ctx")):
            return place["n_ctx"]
    return None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
