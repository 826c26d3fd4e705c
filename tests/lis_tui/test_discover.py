"""Finding local model servers: real HTTP servers on loopback ports, probed the way setup does."""
from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fakes.openai_server import FakeOpenAI
from lis_tui.model.discover import KNOWN_PORTS, find_servers


def free_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A loopback HTTP server answering GET `path` with `body` (and 404 elsewhere)."""

    def __init__(self, path: str, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = self.path == path
                self.send_response(200 if found else 404)
                self.send_header("Content-Length", str(len(body) if found else 0))
                self.end_headers()
                if found:
                    self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()

    def __enter__(self) -> "Served":
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_finds_an_openai_server_and_lists_its_models_skipping_closed_ports():
    with FakeOpenAI(models=["qwen3-4b", "llama-3.2-1b"]) as server:
        ports = (("vLLM", free_port()), ("llama.cpp server", server.port))
        found = find_servers(ports)
    assert len(found) == 1
    assert found[0].kind == "llama.cpp server"
    assert found[0].base_url == f"http://127.0.0.1:{server.port}/v1"
    assert found[0].models == ("qwen3-4b", "llama-3.2-1b")


def test_an_ollama_without_v1_models_is_found_by_its_tags():
    tags = json.dumps({"models": [{"name": "qwen3:4b"}, {"name": "gemma3:1b"}]}).encode()
    with Served("/api/tags", tags) as ollama:
        found = find_servers((("Ollama", ollama.port),))
    assert [(s.kind, s.models) for s in found] == [("Ollama", ("qwen3:4b", "gemma3:1b"))]


@pytest.mark.parametrize("path,body", [("/v1/models", b"<html>a web page</html>"),
                                       ("/v1/models", b'{"something": "else"}'),
                                       ("/elsewhere", b"{}")])
def test_a_server_that_is_not_a_model_server_is_not_offered(path, body):
    with Served(path, body) as other:
        assert find_servers((("vLLM", other.port),)) == []


def test_a_server_that_never_answers_costs_only_the_timeout():
    import time

    with socket.socket() as silent:  # listens, accepts into the backlog, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        assert find_servers((("vLLM", silent.getsockname()[1]),), timeout=0.3) == []
        # a loose bound, only to catch a probe that waits for the OS's own timeout
        assert time.monotonic() - started < 10


def test_the_known_ports_are_the_usual_ones():
    assert dict(KNOWN_PORTS) == {"Ollama": 11434, "llama.cpp server": 8080, "vLLM": 8000,
                                 "LM Studio": 1234, "SGLang": 30000}
