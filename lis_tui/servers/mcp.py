"""`lis-tui mcp`: a sandbox for any MCP client, over the official `mcp` SDK (stdio transport).

The client gets our tools with exactly our semantics and limits: `execute_bash` and
`str_replace_editor` go through the same `Toolbox.dispatch` the agent uses (persistent shell,
bounded output, timeouts that spare bash), plus the review: `list_changes`, `read_output`, and,
only when the server was started so, `apply_changes` (to `--workspace`) and `export_output` (into
`--export-dir`). The sandbox is made on the first call, from the same flags and config as `run`,
and removed when the client goes (its session, or with `--session` its files, are kept).

Changes that `apply` holds back (what the host would run once applied: the repository's hooks and
config, nested repositories, venvs, CI and tool configs, ignored paths; links the sandbox made, new
executable bits: isolation.changes.heldback), each listed with why, are applied only when named in `paths`
and approved by the person through the client (elicitation); a client that cannot ask gets them
refused, by name.

A network in `ask` mode asks the person through the client (MCP elicitation: "allow pypi.org:443?",
then "pypi.org:443 resolves to 10.1.2.3, a private or internal address: allow this address for this
host?" where it does; a question whose request ended is withdrawn) when the client can; a client
that cannot gets the allow list only, and the refusal the model reads says how the user can allow
a host.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

from isolation import Sandbox, SandboxError, SandboxSpec
from isolation.host.walk import RefusedPaths
from isolation.net.decision import Answer
from isolation.net.policy import NetworkPolicy, NetworkRequest
from lis_tui.agent.allow_words import MCP as MCP_WORDS, allow_words
from tools import TOOL_SCHEMAS, Toolbox, ToolResult
from tools.network_notes import NetworkNotes
from tools.terminal_text import safe_terminal_text

REVIEW_TOOLS = [
    ("list_changes", "What the sandbox changed in {working_dir}, one line per path relative to it: kind and path.",
     {}, []),
    ("read_output", "A file under {output_dir} (the answer is answer.txt), as text.",
     {"path": {"type": "string", "description": "Relative to {output_dir}, e.g. answer.txt."}}, ["path"]),
    ("apply_changes", "Write the sandbox's changes to the host workspace (all, or the paths named). Only "
     "when the server was started with --allow-apply. Held-back paths (list_changes marks them: .git, "
     "config, links, new executables) go only when named here and approved by the person.",
     {"paths": {"type": "array", "items": {"type": "string"}, "description": "Paths relative to "
                "{working_dir}, as list_changes gives them; omit for all."}}, []),
    ("export_output", "Copy {output_dir} into the server's --export-dir, under the name given.",
     {"name": {"type": "string", "description": "A directory name inside --export-dir."}}, ["name"]),
]
OUTPUT_LIMIT = 1 << 20
IDLE_TIMEOUT = 1800.0
"""Seconds an HTTP client session may sit idle before its sandbox goes (the SDK's own default)."""
log = logging.getLogger(__name__)
ASK_SCHEMA = {"type": "object", "required": ["answer"], "properties": {"answer": {
    "type": "string", "title": "Network access", "enum": ["allow_once", "allow_session", "deny"],
    "description": "allow_once: this request; allow_session: this host and port (at this address, when "
    "the question names one) until the sandbox goes; deny"}}}
APPROVE_SCHEMA = {"type": "object", "required": ["answer"], "properties": {"answer": {
    "type": "string", "title": "Held-back changes", "enum": ["apply", "leave"],
    "description": "apply: write them to the workspace; leave: keep them in the sandbox"}}}
APPROVE_WAIT = 600.0
"""Seconds the person has to answer an approval before it counts as "leave"."""


def _argument_mistake(name: str, arguments: dict[str, Any]) -> str:
    """A sentence for the client when a review tool's arguments do not fit its schema, or ''
    (a Python signature in a TypeError says nothing to a model or a person)."""
    _, _, properties, required = next(t for t in REVIEW_TOOLS if t[0] == name)
    missing = [r for r in required if r not in arguments]
    unknown = sorted(set(arguments) - set(properties))
    if missing:
        return f"{name} needs " + "; ".join(f"`{r}`: {properties[r]['description']}" for r in missing)
    if unknown:
        takes = ", ".join(f"`{p}`" for p in properties) or "no arguments"
        return f"{name} takes {takes}, not " + ", ".join(f"`{u}`" for u in unknown)
    return ""


class SandboxTools:
    """One client's sandbox and its tools; every call is blocking and thread-safe."""

    def __init__(self, spec: SandboxSpec, allow_apply: bool = False, export_dir: str | None = None) -> None:
        self.spec, self.allow_apply, self.export_dir = spec, allow_apply, export_dir
        self._sandbox: Sandbox | None = None
        self._toolbox: Toolbox | None = None
        self._lock = threading.Lock()
        self._reviewed = None  # what list_changes last showed: what apply_changes writes, byte for byte
        self.client = None
        """(session, loop, request id) of the tool call running now, to ask the person through;
        None when the client cannot elicit."""

    def schemas(self) -> list[dict]:
        """(name, description, input schema) of every tool, ours first."""
        ours = [s["function"] for s in TOOL_SCHEMAS if s["function"]["name"] != "submit"]
        review = [{"name": name, "description": text, "parameters": {"type": "object", "properties": props,
                   "required": required}} for name, text, props, required in REVIEW_TOOLS]
        # Each folder a description names is this sandbox's own (spec.places: /agent/output beside a
        # workspace, which is seen at its own path)
        places = self.spec.places
        text = json.dumps(ours + review).replace("{output_dir}", places.output)
        return json.loads(text.replace("{working_dir}", places.working))

    def call(self, name: str, arguments: dict[str, Any] | None) -> ToolResult:
        with self._lock:
            try:
                box = self._start()
                if name in ("execute_bash", "str_replace_editor"):
                    return box.dispatch(name, arguments or {})
                handler = getattr(self, f"_{name}", None)
                if handler is None or name not in {t[0] for t in REVIEW_TOOLS}:
                    return ToolResult(f"No tool named {name!r}; the tools are: "
                                      + ", ".join(s["name"] for s in self.schemas()), error=True)
                mistake = _argument_mistake(name, arguments or {}).replace("{output_dir}", self.spec.places.output)
                if mistake:
                    return ToolResult(mistake, error=True)
                return handler(**(arguments or {}))
            except (SandboxError, OSError, TypeError, ValueError) as exc:
                return ToolResult(f"{name} failed: {exc}", error=True)

    def close(self) -> None:
        with self._lock:
            if self._toolbox is not None:
                self._toolbox.close()
            if self._sandbox is not None:
                self._sandbox.close()
            self._sandbox = self._toolbox = self._reviewed = None

    def _start(self) -> Toolbox:
        if self._toolbox is None:
            ask = self._ask if self.client is not None else None
            words = allow_words(MCP_WORDS)  # the client's model reads these: the server's flags
            notes = NetworkNotes(words)
            policy = NetworkPolicy(self.spec.network, self.spec.allow_hosts, self.spec.deny_hosts, decide=ask,
                                   on_note=notes.refused, words=words)
            self._sandbox = Sandbox(self.spec, network=policy).start()
            self._toolbox = Toolbox(self._sandbox, network_notes=notes)
        return self._toolbox

    def _ask(self, request: NetworkRequest):
        """The approval callback: the question goes to the person through the client, on the
        server's loop; the proxy awaits the answer (a Future)."""
        session, loop, request_id = self.client

        async def elicit() -> Answer:
            # A second question when an allowed host resolves to a private or internal address
            result = await session.elicit_form(request.question, ASK_SCHEMA, related_request_id=request_id)
            answer = (result.content or {}).get("answer", "deny") if result.action == "accept" else "deny"
            return Answer(str(answer), "mcp-client")  # who answered: the policy's note and log line say

        return asyncio.run_coroutine_threadsafe(elicit(), loop)

    # ---- the review tools ----------------------------------------------------------------------

    def _list_changes(self) -> ToolResult:
        self._reviewed = self._sandbox.review(diff=False)
        found = self._reviewed.changes
        lines = [f"{c.kind}: {c.path} {c.detail}".rstrip() + (f" [held back: {c.held}]" if c.held else "")
                 for c in found]
        return ToolResult("\n".join(lines) or f"No changes in {self.spec.places.working}.")

    def _read_output(self, path: str) -> ToolResult:
        data = self._sandbox.read_file(f"{self.spec.places.output}/{path.lstrip('/')}", OUTPUT_LIMIT + 1)
        text = data[:OUTPUT_LIMIT].decode("utf-8", errors="replace")
        return ToolResult(text + ("\n[... cut at 1 MiB]" if len(data) > OUTPUT_LIMIT else ""))

    def _apply_changes(self, paths: list[str] | None = None) -> ToolResult:
        if not self.allow_apply:
            return ToolResult("Applying is off: the person who started this server can allow it with "
                              "`lis-tui mcp --workspace DIR --allow-apply`.", error=True)
        # What list_changes showed; without one, a review made now (nothing was shown to keep to)
        reviewed = self._reviewed or self._sandbox.review(diff=False)
        held = {c.path.rstrip("/"): c for c in reviewed.changes if c.held}
        named = None if paths is None else [p.strip("/") for p in paths]
        asked = [p for p in named or () if p in held]
        refusal = self._approve(asked, held) if asked else ""
        if refusal:
            named = [p for p in named if p not in held]
        try:
            applied = self._sandbox.apply(named, reviewed=reviewed)
            done, refused = f"applied {len(applied)} change(s) to {self.spec.workspace}", []
        except RefusedPaths as exc:
            done, refused = exc.done, [_mcp_refusal(line, exc.held_back) for line in exc.refused]
        refused += [f"{p} (held back: {held[p].held}; {refusal})" for p in asked if refusal]
        if not refused:
            return ToolResult(f"{done[:1].upper()}{done[1:]}.")
        return ToolResult(f"{done[:1].upper()}{done[1:]}; not applied:\n" + "\n".join(f"  {r}" for r in refused)
                          + "\nA held-back path is applied only when named in `paths` and approved by the person.",
                          error=True)

    def _approve(self, asked: list[str], held: dict) -> str:
        """'' if the person approves writing the held-back `asked` paths; else why not."""
        if self.client is None:
            return ("this MCP client cannot ask the person (no elicitation), so held-back paths are not "
                    "applied through it; the person can apply them in `lis-tui`'s review (F6) or copy them")
        session, loop, request_id = self.client
        one_line = lambda text: safe_terminal_text(text).replace("\n", "\\n")  # noqa: E731 (names the sandbox made)
        lines = "\n".join("- " + one_line(f"{held[p].kind}: {p} {held[p].detail}".rstrip() + f" ({held[p].held})")
                          for p in asked)
        question = (f"The sandbox asks to write these held-back changes to {self.spec.workspace}:\n{lines}\n"
                    "They could configure or run something on this machine once written (hooks, settings, "
                    "start-up files, executables). Apply them?")

        async def elicit() -> bool:
            result = await session.elicit_form(question, APPROVE_SCHEMA, related_request_id=request_id)
            return result.action == "accept" and (result.content or {}).get("answer") == "apply"

        try:
            approved = asyncio.run_coroutine_threadsafe(elicit(), loop).result(APPROVE_WAIT)
        except Exception:  # noqa: BLE001 (no answer, a client error: nothing is written)
            log.info("asking to apply held-back paths failed", exc_info=True)
            approved = False
        return "" if approved else "the person did not approve it"

    def _export_output(self, name: str) -> ToolResult:
        if not self.export_dir:
            return ToolResult("Exporting is off: start the server with `--export-dir DIR` to allow it.",
                              error=True)
        if not name or "/" in name or name in (".", ".."):
            return ToolResult(f"{name!r} is not a plain directory name.", error=True)
        output = self.spec.places.output
        dest = self._sandbox.export(output, f"{self.export_dir}/{name}")
        return ToolResult(f"Exported {output} to {dest}.")


def _mcp_refusal(line: str, held_back: dict[str, str]) -> str:
    """A refusal as the MCP client should read it: held-back paths are named in `paths`, not apply()."""
    for path, why in held_back.items():
        if line.startswith(f"{path} ("):
            return f"{path} (held back: {why}; name it in `paths` to ask the person)"
    return line


def _sdk():
    try:
        import anyio  # noqa: PLC0415
        import mcp_types  # noqa: PLC0415
        from mcp.server.lowlevel import Server  # noqa: PLC0415
    except ImportError:
        from isolation.extras import install_hint  # noqa: PLC0415

        raise SystemExit(f"lis-tui mcp needs the MCP SDK; install it with: {install_hint('mcp')}") from None
    return anyio, mcp_types, Server


def _server(tools_for) -> Any:
    """The MCP server; `tools_for(ctx)` is the SandboxTools of the client session asking."""
    anyio, types, Server = _sdk()

    async def list_tools(ctx, params) -> Any:
        schemas = tools_for(ctx).schemas()
        return types.ListToolsResult(tools=[types.Tool(name=s["name"], description=s["description"],
                                                       input_schema=s["parameters"]) for s in schemas])

    async def call_tool(ctx, params) -> Any:
        tools, arguments = tools_for(ctx), params.arguments
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        capabilities = ctx.session.client_capabilities
        if capabilities is not None and capabilities.elicitation is not None:
            tools.client = (ctx.session, asyncio.get_running_loop(), ctx.request_id)
        result = await anyio.to_thread.run_sync(tools.call, params.name, arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text=result.output)],
                                    is_error=result.error)

    from lis_tui import __version__  # noqa: PLC0415

    return Server("lis-tui", version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


def serve_stdio(tools: SandboxTools) -> None:
    """Serve `tools` to the client on stdin/stdout until it goes; then remove the sandbox."""
    anyio, _, _ = _sdk()
    from mcp.server.stdio import stdio_server  # noqa: PLC0415

    server = _server(lambda ctx: tools)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    try:
        anyio.run(main)
    finally:
        tools.close()


class Sessions:
    """A sandbox per MCP session (streamable HTTP serves several clients at once). A client that
    goes without ending its session (a crash, a closed laptop) loses its sandbox once the session
    has been idle, no request in flight, for `idle_timeout` seconds (`reap`)."""

    def __init__(self, make, idle_timeout: float | None = IDLE_TIMEOUT) -> None:
        self._make, self._by_id, self._lock = make, {}, threading.Lock()
        self.idle_timeout = idle_timeout
        self._busy: dict[str, int] = {}  # requests in flight per session (a long tool call counts)
        self._seen: dict[str, float] = {}  # when each session's last request ended
        self.expired: set[str] = set()

    def tools_for(self, ctx) -> SandboxTools:
        headers = getattr(getattr(ctx, "request", None), "headers", None)  # the HTTP request's
        session_id = headers.get("mcp-session-id") if headers is not None else None
        with self._lock:
            if session_id in self.expired:  # reaped while this request was on its way
                raise RuntimeError("this MCP session ended after being idle (its sandbox is gone); "
                                   "start a new session")
            if session_id not in self._by_id:
                self._by_id[session_id] = self._make()
            return self._by_id[session_id]

    def begin(self, session_id: str) -> bool:
        """A request of `session_id` started; False (and nothing counted) if it was reaped."""
        with self._lock:
            if session_id in self.expired:
                return False
            self._busy[session_id] = self._busy.get(session_id, 0) + 1
            return True

    def done(self, session_id: str) -> None:
        """A request of `session_id` ended."""
        with self._lock:
            self._busy[session_id] = self._busy.get(session_id, 1) - 1
            self._seen[session_id] = time.monotonic()

    def reap(self) -> list[str]:
        """End the sessions idle past `idle_timeout`; their ids answer 404 from now on."""
        if self.idle_timeout is None:
            return []
        now = time.monotonic()
        with self._lock:  # decided and taken out at once: a request that begins meanwhile is refused
            idle = [sid for sid in self._by_id if sid is not None and not self._busy.get(sid)
                    and now - self._seen.get(sid, now) > self.idle_timeout]
            self.expired.update(idle)
            gone = [self._take(sid) for sid in idle]
        for tools in gone:
            if tools is not None:
                tools.close()
        return idle

    def _take(self, session_id: str | None) -> SandboxTools | None:
        self._busy.pop(session_id, None)
        self._seen.pop(session_id, None)
        return self._by_id.pop(session_id, None)

    def end(self, session_id: str | None) -> None:
        with self._lock:
            tools = self._take(session_id)
        if tools is not None:
            tools.close()

    def close(self) -> None:
        for session_id in list(self._by_id):
            self.end(session_id)


def _reaper(sessions: Sessions, stop: threading.Event) -> None:
    interval = min(30.0, max(0.2, (sessions.idle_timeout or 0) / 4))
    while not stop.wait(interval):
        for session_id in sessions.reap():
            log.info("MCP session %s idle for %.0f s: its sandbox was removed", session_id, sessions.idle_timeout)


def serve_http(make_tools, sock, token: str, idle_timeout: float | None = IDLE_TIMEOUT) -> None:
    """Streamable HTTP on the bound `sock`, every request carrying `Authorization: Bearer TOKEN`;
    a client's sandbox is removed when it ends its session (DELETE), when the session was idle for
    `idle_timeout` seconds (None: never), or when the server stops."""
    _sdk()
    import hmac  # noqa: PLC0415

    import uvicorn  # noqa: PLC0415

    sessions = Sessions(make_tools, idle_timeout)
    # The SDK forgets an idle session after the same time, so its id then answers 404 there too.
    app = _server(sessions.tools_for).streamable_http_app(host=sock.getsockname()[0],
                                                          session_idle_timeout=idle_timeout)
    want = f"Bearer {token}".encode()

    async def guarded(scope, receive, send) -> None:
        if scope["type"] != "http":  # lifespan: the app's own
            return await app(scope, receive, send)
        headers = dict(scope["headers"])
        if not hmac.compare_digest(headers.get(b"authorization", b""), want):
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
            return await send({"type": "http.response.body", "body": b"a bearer token is required\n"})
        session_id = headers.get(b"mcp-session-id", b"").decode(errors="replace") or None
        if session_id is not None and not sessions.begin(session_id):  # reaped
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
            return await send({"type": "http.response.body", "body": b"this session ended after being idle "
                               b"(its sandbox is gone); start a new session\n"})
        try:
            await app(scope, receive, send)
        finally:
            if session_id is not None:
                sessions.done(session_id)
        if scope["method"] == "DELETE" and session_id is not None:  # the client ended its session
            await asyncio.to_thread(sessions.end, session_id)

    stop = threading.Event()
    threading.Thread(target=_reaper, args=(sessions, stop), name="lis-mcp-reaper", daemon=True).start()
    try:
        uvicorn.Server(uvicorn.Config(guarded, log_level="warning")).run(sockets=[sock])
    finally:
        stop.set()
        sessions.close()
