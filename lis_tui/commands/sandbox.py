"""`lis-tui exec`, `lis-tui shell` and `lis-tui doctor`: sandboxes without a model."""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading


def add_sandbox_flags(parser: argparse.ArgumentParser) -> None:
    """The flags every command that makes a sandbox takes."""
    group = parser.add_argument_group("sandbox")
    group.add_argument("--rootfs", default=None, metavar="NAME",
                       help="root filesystem: `host` (the host's /usr and /etc, read-only), a name from "
                            "`lis-tui rootfs list`, or a directory (default: the configured default, else host)")
    group.add_argument("--network", choices=("off", "ask", "on"), default=None,
                       help="network access from inside the sandbox: off (nothing leaves), ask (a person "
                            "approves each new host; headless runs refuse what is not allowed), on (default: off)")
    group.add_argument("--allow-host", action="append", default=[], metavar="HOST[:PORT]",
                       help="let the sandbox reach HOST without asking (repeatable): a name, *.suffix or an IP; "
                            "a service on this machine needs its exact HOST:PORT")
    group.add_argument("--workspace", metavar="DIR",
                       help="show DIR copy-on-write at its own path and at /testbed (/testbed only with "
                            "--observation paper); the host copy is not changed (the model's own folders are "
                            "then /agent/output, /agent/input, /agent/scratch)")
    group.add_argument("--input-dir", metavar="DIR",
                       help="show DIR read-only at /testbed/input (/agent/input with --workspace)")
    group.add_argument("--documents-dir", metavar="DIR",
                       help="show DIR read-only at /testbed/documents (the paper's long-context layout; "
                            "/agent/documents with --workspace)")
    group.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                       help="set an environment variable inside (repeatable)")
    group.add_argument("--memory", metavar="SIZE",
                       help="memory one process inside may use, e.g. 2G or none (default: [sandbox] memory, "
                            "else 4 GiB or half the RAM)")
    group.add_argument("--disk", metavar="SIZE",
                       help="what the sandbox's files may hold, e.g. 2G or none: a tmpfs of that size, so "
                            "memory (default: [sandbox] disk, else 10G or half the RAM)")
    group.add_argument("--disk-on", choices=("memory", "disk"),
                       help="where the sandbox's files live: memory (a tmpfs of --disk, in the memory budget of "
                            "all sandboxes) or disk (for big installs: a walk bounds them, more softly) "
                            "(default: [sandbox] disk_on, else memory)")
    group.add_argument("--export-cap", metavar="SIZE",
                       help="data one export copies out of the output folder (/testbed/output, or "
                            "/agent/output with --workspace: files/, review, MCP), holes not "
                            "counted, e.g. 20G (default: [sandbox] export_cap, else the disk limit)")
    group.add_argument("--nested-userns", action="store_true", default=None,
                       help="let commands make user namespaces of their own (a nested bwrap, rootless podman); "
                            "off by default")
    group.add_argument("--git-writable", action="store_true", default=None,
                       help="let commands write the workspace's .git, for tasks that commit (default: [workspace] "
                            "git_writable, else read-only: git status/diff/log work, git commit fails)")
    group.add_argument("--session", metavar="ID",
                       help="keep this sandbox's files under session ID, or resume that session if it exists "
                            "(see `lis-tui sessions list`)")


def add_model_flags(parser: argparse.ArgumentParser):
    """The model and limit flags of every command that runs the agent; returns the group for more."""
    group = parser.add_argument_group("model and agent")
    group.add_argument("--model", metavar="M", help="model name (default: config, $LIS_MODEL)")
    group.add_argument("--base-url", metavar="U", help="OpenAI-compatible server URL, e.g. "
                       "http://localhost:8000/v1 (default: config, $OPENAI_BASE_URL)")
    group.add_argument("--profile", metavar="P", help="a [models.P] profile from the config")
    group.add_argument("--max-steps", type=at_least_one, metavar="N",
                       help="most model calls per task (default 100)")
    group.add_argument("--wall-time", type=float, metavar="S", help="stop a task after S seconds")
    return group


def at_least_one(text: str) -> int:
    """argparse type: a whole number of 1 or more (`--max-steps 0` would stop before the first call)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


TOOL_FORMAT_HELP = ("how the model calls tools: OpenAI tools (native), <tool_call> text (hermes), "
                    "fenced JSON (json), one ```bash block a reply (bash), or auto (default: native, "
                    "switching when the server or model has none; docs/tool-formats.md)")

# The agent's flags that `run` and the app share, and the setting each sets: one table, so the app
# takes every flag `run` does and both read them the same way (`agent_overrides`).
AGENT_FLAGS: tuple[tuple[str, str, dict], ...] = (
    ("--mode", "agent.mode", {"choices": ("sandbox", "llm"),
                              "help": "sandbox: the agent with tools (default); llm: one reply, no sandbox"}),
    ("--temperature", "model.temperature", {"type": float, "metavar": "T",
                                            "help": "sampling temperature (default: the server's)"}),
    ("--max-tokens", "model.max_tokens", {"type": int, "metavar": "N", "help": "most tokens in "
                                          "one reply (a small model may otherwise ramble for minutes)"}),
    ("--max-context-tokens", "agent.max_context_tokens", {
        "type": int, "metavar": "N", "help": "the context limit: past N tokens of prompt the older steps "
        "are compacted into a summary (agent.compact = \"off\": the run stops); default: what the "
        "server says of the model, else 128000"}),
    ("--prompts", "agent.prompts", {"metavar": "FILE", "help": "a TOML file replacing built-in prompts"}),
    ("--observation", "agent.observation", {"choices": ("lis-tui", "paper"), "help": "how tool results "
                                            "read: ours (default), or the paper harness's (exit code, "
                                            "stdout and stderr apart, steps left)"}),
    ("--tool-format", "agent.tool_format", {"choices": ("auto", "native", "hermes", "json", "bash"),
                                            "help": TOOL_FORMAT_HELP}),
)
_MODEL_FLAG_KEYS = {"model": "model.model", "base_url": "model.base_url",
                    "max_steps": "agent.max_steps", "wall_time": "agent.wall_time"}


def add_agent_flags(parser: argparse.ArgumentParser):
    """`add_model_flags` and AGENT_FLAGS: every model flag of `run` and the app; returns the group."""
    group = add_model_flags(parser)
    for flag, _, keywords in AGENT_FLAGS:
        group.add_argument(flag, **keywords)
    group.add_argument("--no-project-instructions", action="store_true",
                       help="leave AGENTS.md (the workspace's, and yours beside config.toml) out of "
                            "the system prompt")
    return group


def agent_overrides(args: argparse.Namespace) -> dict:
    """The config overrides that `add_agent_flags`'s flags ask for (None: not given)."""
    overrides = {key: getattr(args, name) for name, key in _MODEL_FLAG_KEYS.items()}
    for flag, key, _ in AGENT_FLAGS:
        overrides[key] = getattr(args, flag[2:].replace("-", "_"))
    overrides["agent.project_instructions"] = False if args.no_project_instructions else None
    return overrides


def add_tool_format_flag(group) -> None:
    """--tool-format, for the commands that run the agent without AGENT_FLAGS (bench, rollout)."""
    group.add_argument("--tool-format", choices=("auto", "native", "hermes", "json", "bash"),
                       help=TOOL_FORMAT_HELP)


def add_allow_dir_flag(parser) -> None:
    """--allow-dir, for the commands that read task files (bench, rollout, env serve)."""
    parser.add_argument("--allow-dir", metavar="DIR",
                        help="a folder the tasks' documents_dir/input_dir may name folders in, besides their task "
                             "file's own folder (paths stay relative to that folder; a task with no file, sent "
                             "over HTTP or a row from hf:, takes them from DIR and without it may name none)")


def allow_dir(args: argparse.Namespace):
    """--allow-dir as a real path (None when not given); ValueError with the fix when it is no folder."""
    from pathlib import Path  # noqa: PLC0415

    if not getattr(args, "allow_dir", None):
        return None
    allow = Path(args.allow_dir).expanduser().resolve()
    if not allow.is_dir():
        raise ValueError(f"--allow-dir {args.allow_dir!r} is not a folder; give the folder the tasks' "
                         "documents_dir/input_dir are in")
    return allow


def spec_from_args(args: argparse.Namespace, config=None):
    """The SandboxSpec the flags ask for; [network] allow/deny come from `config` (loaded if None)."""
    from isolation import SandboxSpec  # noqa: PLC0415 (keep `lis-tui --help` fast)

    from lis_tui.config.settings import configured_rootfs, load_config, network_credentials, sandbox_limits  # noqa: PLC0415
    from lis_tui.config.workspace import workspace_options  # noqa: PLC0415

    _check_host_dirs(args)
    if config is None:
        config = load_config()
    if getattr(args, "memory", None) is not None:
        config.set("sandbox.memory", args.memory, "--memory")
    if getattr(args, "disk", None) is not None:
        config.set("sandbox.disk", args.disk, "--disk")
    if getattr(args, "disk_on", None) is not None:
        config.set("sandbox.disk_on", args.disk_on, "--disk-on")
    if getattr(args, "export_cap", None) is not None:
        config.set("sandbox.export_cap", args.export_cap, "--export-cap")
    if getattr(args, "nested_userns", None):
        config.set("sandbox.nested_userns", True, "--nested-userns")
    if getattr(args, "git_writable", None):
        config.set("workspace.git_writable", True, "--git-writable")
    hosts = {"allow_hosts": tuple(config.network.allow) + tuple(getattr(args, "allow_host", None) or ()),
             "deny_hosts": tuple(config.network.deny), "credentials": network_credentials(config),
             **workspace_options(config)}

    env = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"lis-tui: --env wants NAME=VALUE, got {item!r}")
        env[name] = value
    saved = _saved_session_spec(args.session) if getattr(args, "session", None) else None
    if saved is not None:  # resuming: what was not given again comes from the session
        _session_project(args, saved)
        return SandboxSpec(rootfs=args.rootfs or saved.rootfs, network=args.network or saved.network,
                           workspace=args.workspace or saved.workspace, input_dir=args.input_dir or saved.input_dir,
                           documents_dir=args.documents_dir or saved.documents_dir,
                           env={**(saved.env or {}), **env}, limits=_resumed_limits(saved.limits, args, config),
                           session=args.session,
                           nested_userns=saved.nested_userns, **hosts).resolved()
    return SandboxSpec(rootfs=args.rootfs or configured_rootfs(config), network=args.network or config.network.mode,
                       workspace=args.workspace, input_dir=args.input_dir, documents_dir=args.documents_dir,
                       env=env, session=getattr(args, "session", None), limits=sandbox_limits(config),
                       nested_userns=config.sandbox.nested_userns, **hosts).resolved()


def _session_project(args: argparse.Namespace, saved) -> None:
    """A kept session goes on in the project it was made on, wherever this is typed: said when that
    is not here; refused when an earlier version kept it only as a relative path (whose folder it
    did not note), until the person names the project."""
    from isolation import SandboxError  # noqa: PLC0415
    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    was = saved.workspace
    if args.workspace is not None or was is None:
        return
    if not os.path.isabs(was):
        raise SandboxError(f"session {args.session} kept its workspace only as {str(was)!r}, relative to a folder "
                           "an earlier lis-tui did not note. Fix: name the project it was made on, once: "
                           "--workspace DIR")
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # the folder it is typed in is gone
        here = ""
    if here != was:
        print(safe_terminal_text(f"lis-tui: session {args.session} works in {was} (its project), not here"),
              file=sys.stderr)


def _check_host_dirs(args: argparse.Namespace) -> None:
    """A folder flag that names no folder is said now, before a run folder is made for a run that
    could never start."""
    from isolation import SandboxError  # noqa: PLC0415

    for flag in ("--workspace", "--input-dir", "--documents-dir"):
        path = getattr(args, flag[2:].replace("-", "_"), None)
        if not path:
            continue
        try:
            os.close(os.open(os.path.expanduser(path), os.O_RDONLY | os.O_DIRECTORY))
        except OSError as exc:
            raise SandboxError(f"{flag} {path!r} is not a directory ({exc.strerror}); give a folder "
                               f"you can read: {flag} DIR") from None


def _resumed_limits(saved, args: argparse.Namespace, config):
    """A session's saved limits, but for --disk and --disk-on given again: the fix when the
    session has outgrown its disk."""
    from dataclasses import replace  # noqa: PLC0415

    from lis_tui.config.settings import sandbox_limits  # noqa: PLC0415

    given = {key: getattr(args, key, None) for key in ("disk", "disk_on")}
    if all(value is None for value in given.values()):
        return saved
    asked = sandbox_limits(config)
    return replace(saved, **{key: getattr(asked, key) for key, value in given.items() if value is not None})


def _saved_session_spec(session: str):
    from isolation import sessions  # noqa: PLC0415

    return sessions.load_spec(sessions.sessions_root() / sessions.check_id(session))


def add_parsers(sub) -> None:
    p = sub.add_parser("exec", help="run one command in a fresh sandbox",
                       description="Run one command in a fresh sandbox and remove the sandbox afterwards. "
                                   "Output is streamed; the exit code is the command's (124 on timeout). "
                                   "A single argument is run by the shell (`lis-tui exec -- 'ls | wc -l'`); "
                                   "several are run as they are.")
    add_sandbox_flags(p)
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="kill the command after S seconds")
    p.add_argument("--cwd", default=None, help="working directory inside (default: /testbed, or with "
                   "--workspace the project's own path)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser("shell", help="an interactive bash in a fresh sandbox",
                       description="Open an interactive shell in a fresh sandbox in this terminal. "
                                   "The sandbox is removed when the shell exits.")
    add_sandbox_flags(p)
    p.set_defaults(func=cmd_shell)

    p = sub.add_parser("doctor", help="check what this machine can do, with fixes",
                       description="Check kernel user namespaces, AppArmor, bwrap, helper tools, cgroups and the "
                                   "rootfs store, then start a test sandbox. Exit 0 only when sandboxes work.")
    p.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                   help="check every node of a Ray cluster instead (auto: RAY_ADDRESS or this "
                        "machine's cluster) and print one table; needs Ray (./install.sh --ray)")
    p.set_defaults(func=cmd_doctor)


def cmd_exec(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("lis-tui exec: no command given; usage: lis-tui exec [options] -- CMD [ARGS...]", file=sys.stderr)
        return 2
    from isolation import warm_up  # noqa: PLC0415

    warm_up()  # the spawn helper starts while this process imports the sandbox's code and reads the config
    from isolation import Sandbox  # noqa: PLC0415

    spec = spec_from_args(args)
    say_owners(spec, "lis-tui exec")
    with Sandbox(spec) as sb:
        argv = [sb.shell, "-c", command[0]] if len(command) == 1 else command
        if any(os.isatty(fd) for fd in (0, 1, 2)):  # never hand the sandbox our terminal: a pty of ours
            return _on_pty(sb, argv, args)
        proc = sb.popen(argv, cwd=args.cwd)
        try:
            code = proc.wait(args.timeout)
        except subprocess.TimeoutExpired:
            return _timed_out(proc, args.timeout)
        except KeyboardInterrupt:
            proc.killpg(signal.SIGKILL)
            return 130
        return 128 - code if code < 0 else code


def _on_pty(sb, argv: list[str], args: argparse.Namespace) -> int:
    from lis_tui.app.ptyrelay import relay  # noqa: PLC0415

    size = shutil.get_terminal_size()
    # Only the streams that are our terminal go to the pty: `exec ... 2>log` keeps its stderr apart.
    keep = {fd: fd for fd in (0, 1, 2) if not os.isatty(fd)}
    child = sb.spawn_pty(argv, cwd=args.cwd, env_extra={"TERM": os.environ.get("TERM", "xterm-256color")},
                         dimensions=(size.lines, size.columns), echo=True, keep=keep)
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        child.proc.killpg(signal.SIGKILL)

    timer = threading.Timer(args.timeout, kill) if args.timeout else None
    if timer:
        timer.start()
    try:
        code = relay(child, forward_input=0 not in keep, output_fd=1 if 1 not in keep else 2)
    finally:
        if timer:
            timer.cancel()
    if fired.is_set():
        print(f"lis-tui exec: timed out after {args.timeout:g} s; killed", file=sys.stderr)
        return 124
    return code


def _timed_out(proc, timeout: float) -> int:
    print(f"lis-tui exec: timed out after {timeout:g} s; killed", file=sys.stderr)
    proc.killpg(signal.SIGKILL)
    proc.wait()
    return 124


def cmd_shell(args: argparse.Namespace) -> int:
    from isolation import warm_up  # noqa: PLC0415

    warm_up()  # as exec does
    return interactive_shell(spec_from_args(args))


def interactive_shell(spec) -> int:
    """An interactive bash (or sh) in a fresh sandbox, relayed to this terminal; its exit code.
    The sandbox is removed when the shell exits. The setup screen of the app calls this too."""
    from isolation import Sandbox  # noqa: PLC0415
    from lis_tui.app.ptyrelay import relay  # noqa: PLC0415

    with Sandbox(spec) as sb:
        print(shell_banner(spec), file=sys.stderr, flush=True)
        say_owners(spec, "lis-tui shell")
        env = {"TERM": os.environ.get("TERM", "xterm-256color"), "PS1": r"(lis-sandbox) \w# "}
        argv = ["bash", "--norc", "-i"] if sb.shell == "bash" else ["sh", "-i"]
        size = shutil.get_terminal_size()
        child = sb.spawn_pty(argv, env_extra=env, dimensions=(size.lines, size.columns), echo=True)
        return relay(child)


def shell_banner(spec) -> str:
    """What the shell is in, and how to leave it: said before its first prompt."""
    from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

    where = ""
    if spec.workspace:
        at = "its own path and /testbed" if spec.places.working != "/testbed" else "/testbed"
        where = f"; {spec.workspace} at {at}, copy-on-write"
    return safe_terminal_text(f"lis-tui shell: a fresh sandbox (rootfs {spec.rootfs}, network {spec.network}{where}). "
                              "`exit` or Ctrl-D leaves, and the sandbox and everything in it go.")


def say_owners(spec, who: str) -> None:
    """On stderr, the line owners_note() has for `spec`'s workspace, if any."""
    note = owners_note(spec)
    if note:
        from tools.terminal_text import safe_terminal_text  # noqa: PLC0415

        print(safe_terminal_text(f"{who}: {note}"), file=sys.stderr, flush=True)


def owners_note(spec) -> str:
    """Why the sandbox will meet "Permission denied" in the workspace, with the fix: what at its top
    another user owns ('' when nothing). A sandbox maps only the caller's id, as its root."""
    if spec is None or not spec.workspace:
        return ""
    import shlex  # noqa: PLC0415

    from isolation.host.owners import others_own  # noqa: PLC0415

    found = others_own(spec.workspace, skip=() if spec.git_writable else (".git",))  # else read-only inside
    if found is None:
        return ""
    me, owner, where = _user(os.geteuid()), _user(found.uid), str(spec.workspace)
    few = ", ".join(found.names[:3]) + (f" and {len(found.names) - 3} more" if len(found.names) > 3 else "")
    paths = [where] if found.folder else [os.path.join(where, name) for name in found.names[:3]]
    targets = " ".join(shlex.quote(path) for path in paths) + (" ..." if not found.folder and len(found.names) > 3 else "")
    what = f"{where} is {owner}'s" if found.folder else \
        f"in {where}, {few} {'is' if len(found.names) == 1 else 'are'} {owner}'s"
    if os.geteuid() != 0:
        return (f"{what}, not yours ({me}): the sandbox works as you, so it cannot change what you do not own "
                f"there (\"Permission denied\" inside). Fix: `sudo chown -R {shlex.quote(me)} {targets}`"
                + (", or work on a copy of your own (`cp -r` it into your home)" if found.folder else ""))
    fix = f"run lis-tui as {owner} (`sudo -u {shlex.quote(owner)} lis-tui ...`)" if found.folder else \
        f"`chown -R root {targets}` if they are root's to change, else run lis-tui as their owner"
    return (f"{what}: run as root, the sandbox works as a stand-in for root, never as the host's root, so it "
            f"cannot change what other users own there (\"Permission denied\" inside). Fix: {fix}")


def _user(uid: int) -> str:
    import pwd  # noqa: PLC0415

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def cmd_doctor(args: argparse.Namespace) -> int:
    from isolation import doctor  # noqa: PLC0415

    if getattr(args, "ray", None):
        from lis_tui.ray.doctor import cluster_doctor  # noqa: PLC0415

        return cluster_doctor(args.ray)

    from lis_tui.config.settings import ConfigError, load_config, sandbox_limits  # noqa: PLC0415

    try:  # the config's memory budget, which doctor shows
        sandbox_limits(load_config())
    except ConfigError as exc:
        print(f"lis-tui doctor: {exc}")
    checks = doctor.run_checks()
    marks = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}
    for check in checks:
        print(f"{marks[check.status]}  {check.name:<16} {check.detail}")
        if check.fix and check.status != "ok":
            print(f"      {'':<16} fix: {check.fix}")
        elif check.fix:
            print(f"      {'':<16} tip: {check.fix}")
    works = doctor.sandboxes_work(checks)
    print("\nsandboxes work on this machine." if works else "\nsandboxes do NOT work yet: apply the fixes above.")
    return 0 if works else 1
