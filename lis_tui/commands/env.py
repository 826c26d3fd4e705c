"""`lis-tui env serve`: sandboxed environments over HTTP for trainers that generate themselves."""
from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import secrets
import signal
import socket
import sys
import threading
from typing import Any

from lis_tui.commands.ports import cannot_listen, port_number
from lis_tui.commands.sandbox import add_allow_dir_flag, add_sandbox_flags, allow_dir, spec_from_args
from tools.terminal_text import safe_terminal_text

TOKEN_ENV = "LIS_ENV_TOKEN"
_EPILOG = """\
Each environment is a bench episode driven from outside: POST /envs resets one on a task (its
files placed in a fresh sandbox) and answers with the first messages and the tool schemas;
POST /envs/ID/step takes the model's reply (an OpenAI assistant message, or the raw completion
text with <tool_call>{...}</tool_call> or ```json blocks) and answers with the tool messages,
`done`, and the bench's reward once done; DELETE /envs/ID ends it. See docs/env-server.md.

Every request but GET /health needs `Authorization: Bearer TOKEN`: --token, else $LIS_ENV_TOKEN,
else a fresh one printed at start. Tasks sent over HTTP bring their files as name -> text; they
may name a host folder only inside --allow-dir (given relative to it), and a --tasks file only
inside its own folder or --allow-dir. Ctrl-C or SIGTERM closes every sandbox.

Workers: with --workers N (N > 1) the environments live in N worker processes behind this one
port, each new one on the least loaded; the limits stay this server's. A worker that dies takes
its environments with it (their calls answer 410 saying so) and a new one starts in its place.

exit codes: 0 stopped; 1 the port cannot be had (in use, privileged); 2 usage or config error."""


def add_parsers(sub) -> None:
    p = sub.add_parser("env", help="environment server for RL trainers (HTTP+JSON)",
                       description="Sandboxed RL environments for trainers that generate themselves.")
    env_sub = p.add_subparsers(dest="env_command", metavar="SUBCOMMAND", required=True)
    s = env_sub.add_parser("serve", help="serve environments over HTTP", epilog=_EPILOG,
                           description="Serve sandboxed environments over HTTP+JSON (reset, step, "
                                       "close) with a bearer token.",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; anything else is reachable by others)")
    s.add_argument("--port", type=port_number, default=8765, help="port (default 8765; 0 picks a free one)")
    s.add_argument("--token", metavar="T", help=f"the bearer token (default ${TOKEN_ENV}, else generated)")
    s.add_argument("--tasks", metavar="TASKS", help="a task set whose tasks a reset may name by id")
    add_allow_dir_flag(s)
    s.add_argument("--max-envs", type=int, default=512, metavar="N",
                   help="live environments at most (default 512)")
    s.add_argument("--idle-timeout", type=float, default=600.0, metavar="S",
                   help="close an environment after S seconds without a call (default 600)")
    s.add_argument("--workers", type=int, metavar="N",
                   help="processes that hold the environments (default: the config's sandbox.workers; "
                        "0: one per 2 cores; 1: all in this process, as before); one port either way")
    s.add_argument("--max-steps", type=int, metavar="N",
                   help="steps per episode (default: agent.max_steps of the config)")
    s.add_argument("--max-body", type=int, default=64, metavar="MIB",
                   help="largest request body in MiB (tasks bring their files in it; default 64)")
    s.add_argument("--read-timeout", type=float, default=60.0, metavar="S",
                   help="seconds a client has to send each request in full, and an idle kept-alive "
                        "connection is kept (default 60; a step's own work is not bounded by it)")
    s.add_argument("--max-connections", type=int, metavar="N",
                   help="open connections at most; more are answered 503 (default: twice --max-envs, "
                        "at least 64)")
    s.add_argument("--judge-model", metavar="M", help="model that grades tasks whose reward is `judge`")
    s.add_argument("--judge-base-url", metavar="U",
                   help="OpenAI-compatible server of the judge (default: the config's model server)")
    s.add_argument("--profile", metavar="P", help="a [models.P] profile (for the judge and limits)")
    add_sandbox_flags(s)
    s.add_argument("-v", "--verbose", action="store_true", help="log every request")
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        server, new_token = _build(args)
    except _CannotListen as exc:
        print(safe_terminal_text(f"lis-tui env serve: {exc}"), file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(safe_terminal_text(f"lis-tui env serve: {exc}"), file=sys.stderr)
        return 2
    if new_token:  # only once the port is ours: a token for a server that never ran misleads
        print(f"lis-tui env: token (send `Authorization: Bearer TOKEN`; set {TOKEN_ENV} or --token "
              f"to choose one):\n{new_token}", file=sys.stderr, flush=True)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_SafeFormatter("lis-tui env: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, handlers=[handler])
    host, port = server.server_address[:2]
    spread = f", in {len(server.workers.workers)} worker processes" if server.workers else ""
    print(f"lis-tui env: serving on http://{host}:{port} (at most {args.max_envs} environments{spread})",
          file=sys.stderr, flush=True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        if server.workers is not None:
            server.workers.close()  # each worker closes its sandboxes, all at once
        server.server_close()  # closes every sandbox (this process's, with one worker)
    print("lis-tui env: stopped; every sandbox closed", file=sys.stderr)
    return 0


class _SafeFormatter(logging.Formatter):
    """Log lines, tracebacks included, may quote what a client or a sandbox sent."""

    def format(self, record: logging.LogRecord) -> str:
        return safe_terminal_text(super().format(record))


def _build(args: argparse.Namespace) -> tuple[Any, str]:
    """The server, listening, and the token made for it ("" when one was given)."""
    from lis_tui.bench.scoring.rewards import parse_reward  # noqa: PLC0415 (keep --help fast)
    from lis_tui.bench.tasks import TaskError, load_tasks  # noqa: PLC0415
    from lis_tui.bench.workers.pool import default_workers  # noqa: PLC0415
    from lis_tui.config.settings import ConfigError, configured_rootfs, load_config  # noqa: PLC0415
    from lis_tui.rl.env import SandboxEnv  # noqa: PLC0415
    from lis_tui.rl.pool import EnvPool, PoolConfig  # noqa: PLC0415
    from lis_tui.rl.server import EnvServer, ServerConfig  # noqa: PLC0415
    from lis_tui.rl.worker_main import EnvSetup  # noqa: PLC0415

    if args.workspace or args.input_dir or args.documents_dir or getattr(args, "session", None):
        raise ValueError("--workspace, --input-dir, --documents-dir and --session do not apply: "
                         "each environment gets a fresh sandbox and its task brings its own files")
    if args.max_envs < 1 or args.idle_timeout <= 0 or args.max_body < 1 or args.read_timeout <= 0 \
            or (args.max_connections is not None and args.max_connections < 1) \
            or (args.workers is not None and args.workers < 0):
        raise ValueError("--max-envs, --max-body and --max-connections must be at least 1, "
                         "--idle-timeout and --read-timeout above 0, and --workers 0 (one per 2 "
                         "cores) or more")
    try:
        config = load_config(args.profile, {"network.mode": args.network, "sandbox.rootfs": args.rootfs,
                                            "agent.max_steps": args.max_steps,
                                            "sandbox.workers": args.workers})
        allow = allow_dir(args)
        tasks = {t.id: t for t in load_tasks(args.tasks, allow=allow)} if args.tasks else {}
    except (ConfigError, TaskError) as exc:
        raise ValueError(str(exc)) from None
    if not args.judge_model and any(parse_reward(t.reward)[0] == "judge" for t in tasks.values()):
        raise ValueError("some --tasks are scored by a judge model: pass --judge-model M (and "
                         "--judge-base-url U when the judge runs on another server)")
    args.rootfs = args.rootfs or configured_rootfs(config)
    args.network = args.network or config.network.mode
    spec = spec_from_args(args, config)
    token = args.token or os.environ.get(TOKEN_ENV) or ""
    given = bool(token)
    token = token or secrets.token_urlsafe(24)
    _warn_if_exposed(args.host)
    judge = None
    if args.judge_model:
        from dataclasses import replace  # noqa: PLC0415

        from lis_tui.bench.scoring.judge import Judge  # noqa: PLC0415

        judge = Judge(replace(config.model, model=args.judge_model, temperature=0.0,
                              base_url=args.judge_base_url or config.model.base_url))
    limits = PoolConfig(args.max_envs, args.idle_timeout, config.agent.max_steps)
    connections = args.max_connections or max(2 * args.max_envs, 64)
    settings = ServerConfig(token, tasks, allow, args.max_body << 20, judge is not None,
                            args.read_timeout, connections)
    count = config.sandbox.workers or default_workers(args.max_envs)
    if count == 1:
        pool = EnvPool(lambda steps: SandboxEnv(config, spec, judge, max_steps=steps), limits)
        try:
            return EnvServer((args.host, args.port), pool, settings), "" if given else token
        except OSError as exc:
            raise _CannotListen(cannot_listen(args.host, args.port, exc)) from None
    return _spread(args, count, EnvSetup(config, spec, (judge.config, judge.prompt) if judge else None,
                                         dict(os.environ), os.getcwd()), limits, settings), \
        "" if given else token


def _spread(args: argparse.Namespace, count: int, setup: Any, limits: Any, settings: Any) -> Any:
    """The server over `count` worker processes: the port is taken first (a port that cannot be
    had starts no worker), then the workers, then the pool is handed to the server."""
    from lis_tui.rl.pool import EnvPool  # noqa: PLC0415
    from lis_tui.rl.server import EnvServer  # noqa: PLC0415
    from lis_tui.rl.workers import EnvWorkers  # noqa: PLC0415

    try:
        server = EnvServer((args.host, args.port), None, settings)
    except OSError as exc:
        raise _CannotListen(cannot_listen(args.host, args.port, exc)) from None
    try:
        workers = EnvWorkers(count, setup)
    except BaseException:
        server.server_close()
        raise
    server.pool = workers.pool = EnvPool(workers.make_env, limits)
    server.workers = workers
    return server


class _CannotListen(Exception):
    """The port cannot be had: exit 1, not a usage error."""


def _warn_if_exposed(host: str) -> None:
    try:
        loopback = all(ipaddress.ip_address(info[4][0]).is_loopback
                       for info in socket.getaddrinfo(host, None))
    except (OSError, ValueError):
        loopback = False
    if not loopback:
        print(safe_terminal_text(
            f"lis-tui env: WARNING: listening on {host}, which is not loopback. Anyone who can reach "
            "this port and holds the token runs commands in sandboxes on this machine, and plain "
            "HTTP carries the token unencrypted: prefer 127.0.0.1 with an SSH tunnel, or put TLS in "
            "front."), file=sys.stderr, flush=True)
