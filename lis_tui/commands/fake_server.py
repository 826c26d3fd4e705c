"""`lis-tui fake-server`: a scripted model on 127.0.0.1, to try the app, run, bench and rollout
before there is a real model. It reads nothing: each episode it looks around, writes an answer and
submits, the same every time. With --echo it runs the task itself as one command, so what the app
shows of a command (live output, the network dialog, the workspace review) can be tried at once."""
from __future__ import annotations

import argparse
import sys
import threading

from lis_tui.commands.ports import cannot_listen, port_number

ANSWER = "fake answer: lis-tui's fake server read nothing of the task"
_EPILOG = """\
Then, in another terminal:
  lis-tui --base-url http://127.0.0.1:8799/v1 --model fake
  lis-tui run --base-url http://127.0.0.1:8799/v1 --model fake "any task"
  lis-tui bench demo --base-url http://127.0.0.1:8799/v1 --model fake

Each episode takes three steps: a command that looks at the sandbox, the answer written to
answer.txt with the editor (in /testbed/output, or /agent/output beside a workspace), and submit.
Without tools (bench --mode llm) it answers in one reply. Scores are 0: it does not read the task.
Ctrl-C stops it.

With --echo, the task (and each follow-up) is the command: it runs as typed, its output becomes
the answer, and it submits. So, in the app:
  for i in 1 2 3; do echo $i; sleep 1; done    the live output
  curl -sI https://example.com | head -n 1     the network dialog (with --network ask)
  echo hello > hello.txt                       the workspace review, F6 (with --workspace .)"""


def add_parsers(sub) -> None:
    p = sub.add_parser("fake-server", help="a scripted model on 127.0.0.1, to try lis-tui without one",
                       description="Serve a scripted OpenAI-compatible model on 127.0.0.1, so the "
                                   "app, run, bench and rollout can be tried with no model at all.",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=port_number, default=8799,
                   help="port on 127.0.0.1 (default 8799; 0: any free one)")
    p.add_argument("--model", default="fake", help="the model name it lists (default fake)")
    p.add_argument("--echo", action="store_true",
                   help="run the task (and each follow-up) as one command, answer with its output "
                        "and submit: type `ls -la` or `curl -sI https://example.com` as the task")
    p.set_defaults(func=cmd_fake_server)


def scripted_turn(request):
    """The next reply of an episode, from how many tool results its conversation holds."""
    from lis_tui.servers.scripted import call, reply  # noqa: PLC0415

    if "execute_bash" not in request.tool_names:  # no sandbox: one plain reply
        return reply(ANSWER)
    output = _output_dir(request)
    turns = [
        reply("Let me look at the computer first.", [call("execute_bash", {
            "command": "uname -sr; id; ls -la /testbed /testbed/input 2>/dev/null | head -n 20"})]),
        reply("Now the answer.", [call("str_replace_editor", {
            "command": "create", "path": f"{output}/answer.txt", "file_text": ANSWER + "\n"})]),
        reply("Done.", [call("submit", {})]),
    ]
    return turns[min(len(request.tool_outputs), len(turns) - 1)]


def echo_turn(request):
    """--echo: the newest task or follow-up run as one command, its output written as the answer,
    then submit; each step is told from the tool results since that task."""
    from lis_tui.servers.scripted import call, reply  # noqa: PLC0415

    task, done = _newest_task(request)
    if "execute_bash" not in request.tool_names:  # no sandbox: one plain reply
        return reply(task)
    if not done:
        return reply("Running the task as one command (fake-server --echo).",
                     [call("execute_bash", {"command": task})])
    answer, before = done[0].rstrip("\n") + "\n", _answer_written(request)
    if len(done) == 1 and answer != before:
        path = f"{_output_dir(request)}/answer.txt"
        edit = {"command": "create", "path": path, "file_text": answer} if before is None else \
            {"command": "str_replace", "path": path, "old_str": before, "new_str": answer}
        return reply("Its output is the answer.", [call("str_replace_editor", edit)])
    return reply("Done.", [call("submit", {})])


def _newest_task(request) -> tuple[str, list[str]]:
    """The newest task or follow-up as typed, and the tool results that came after it."""
    from lis_tui.runs.resume import FOLLOW_UP  # noqa: PLC0415 (only a served request needs it)

    last = max((i for i, m in enumerate(request.messages) if m.get("role") == "user"), default=-1)
    text = request.messages[last].get("content") if last >= 0 else ""
    text = text if isinstance(text, str) else ""
    start, end = text.find("<task>\n"), text.rfind("\n</task>")
    if 0 <= start < end:  # the first task, inside the instance prompt
        text = text[start + len("<task>\n"):end]
    else:  # a follow-up is the text typed, then a note of ours
        text = text.split(FOLLOW_UP.split("{task}", 1)[1][:30], 1)[0]
    done = [m.get("content") or "" for m in request.messages[last + 1:] if m.get("role") == "tool"]
    return text.strip(), done


def _answer_written(request) -> str | None:
    """What this conversation last wrote to answer.txt with the editor (None: nothing yet)."""
    import json  # noqa: PLC0415

    written = None
    for message in request.messages:
        for tool_call in message.get("tool_calls") or []:
            function = tool_call.get("function") or {}
            try:
                args = json.loads(function.get("arguments") or "{}")
            except ValueError:
                continue
            if function.get("name") == "str_replace_editor" and isinstance(args, dict) \
                    and str(args.get("path", "")).endswith("/answer.txt"):
                written = args.get("file_text", args.get("new_str", written))
    return written


def _output_dir(request) -> str:
    """The output folder the system prompt names (a paper suite's may differ from ours)."""
    import re  # noqa: PLC0415

    system = next((m.get("content") for m in request.messages if m.get("role") == "system"), "")
    found = re.search(r"(/(?:testbed|agent)/[\w/.-]*output)\b", system if isinstance(system, str) else "")
    return found.group(1) if found else "/testbed/output"


def cmd_fake_server(args: argparse.Namespace) -> int:
    from lis_tui.servers.scripted import FakeOpenAI  # noqa: PLC0415

    server = FakeOpenAI(default=echo_turn if args.echo else scripted_turn, model=args.model,
                        port=args.port)
    try:
        server.start()
    except OSError as exc:
        print(f"lis-tui fake-server: {cannot_listen('127.0.0.1', args.port, exc)}", file=sys.stderr)
        return 1
    task = "ls -la" if args.echo else "any task"
    what = " (--echo: each task runs as one command)" if args.echo else ""
    print(f"fake model server on {server.base_url} (model {args.model}){what}; try:\n"
          f"  lis-tui run --base-url {server.base_url} --model {args.model} \"{task}\"\n"
          f"  lis-tui --base-url {server.base_url} --model {args.model}          (the app)\n"
          "Ctrl-C stops it.", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0
