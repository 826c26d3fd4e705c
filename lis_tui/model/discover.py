"""Find model servers running on this machine: the setup screen offers each one it finds. And
`check_server`: whether the configured one answers, and which models it serves (the welcome's).

Every known server's usual loopback port is asked `GET /v1/models` at once, with a short timeout,
so a machine with none running answers in well under a second. Ollama is asked `/api/tags` too
(older versions have no /v1/models). No textual here: the screen calls `find_servers` in a worker.
"""
from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

KNOWN_PORTS: tuple[tuple[str, int], ...] = (
    ("Ollama", 11434), ("llama.cpp server", 8080), ("vLLM", 8000), ("LM Studio", 1234),
    ("SGLang", 30000),
)
"""The usual ports of local OpenAI-compatible servers, in the order they are offered."""
HOST = "127.0.0.1"
# Loopback only, never through a proxy the environment names: the answer must come from here.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class FoundServer:
    """A server that answered: what it probably is, where, and the models it lists."""

    kind: str
    base_url: str
    models: tuple[str, ...]


def find_servers(ports: tuple[tuple[str, int], ...] = KNOWN_PORTS, host: str = HOST,
                 timeout: float = 0.5) -> list[FoundServer]:
    """The servers among `ports` (kind, port) that answer like an OpenAI-compatible one."""
    if not ports:
        return []
    with ThreadPoolExecutor(max_workers=len(ports), thread_name_prefix="lis-discover") as pool:
        found = pool.map(lambda kp: _probe(kp[0], f"http://{host}:{kp[1]}", timeout), ports)
        return [server for server in found if server is not None]


def _probe(kind: str, root: str, timeout: float) -> FoundServer | None:
    models = _models(f"{root}/v1/models", timeout, "data", "id")
    if models is None and kind == "Ollama":
        models = _models(f"{root}/api/tags", timeout, "models", "name")
    return None if models is None else FoundServer(kind, f"{root}/v1", tuple(models))


def _models(url: str, timeout: float, key: str, field: str) -> list[str] | None:
    """The names listed at `url`, or None when nothing (or something else) answers there."""
    try:
        with _OPENER.open(url, timeout=timeout) as answer:
            doc = json.loads(answer.read(1 << 20))
    except (OSError, ValueError):  # refused, timed out, an HTTP error, not JSON
        return None
    entries = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        return None
    return [str(e[field]) for e in entries if isinstance(e, dict) and e.get(field)]


@dataclass(frozen=True)
class ServerCheck:
    """What the configured model server said when asked for its models."""

    models: tuple[str, ...] = ()
    """The names it lists (its first is the one a run uses when no model is set)."""
    error: str = ""
    """Why it cannot be used, with the fix (a run's own words for it); "" when it answered."""


def check_server(model: Any, timeout: float = 5.0) -> ServerCheck:
    """Ask the server of `model` (a ModelConfig) for its models once, with no retries: the same
    client, key and proxy a run uses, so its answer (or its error and fix) is the run's."""
    from lis_tui.model.client import ModelClient, ModelError  # noqa: PLC0415 (openai: off the first frame)

    try:
        with ModelClient(replace(model, max_retries=0, timeout=timeout)) as client:
            return ServerCheck(models=tuple(client.list_models()))
    except ModelError as exc:
        return ServerCheck(error=str(exc))
