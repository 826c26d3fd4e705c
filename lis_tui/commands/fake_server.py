"""`lis-tui fake-server`: a scripted model on 127.0.0.1, to try the app, run, bench and rollout
before there is a real model. It reads nothing: each episode it looks around, writes an answer and
submits, the same every time."""
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
/testbed/output/answer.txt with the editor, and submit. Without tools (bench --mode llm) it
answers in one reply. Scores are 0: it does not read the task. Ctrl-C stops it."""


def add_parsers(sub) -> None:
    p = sub.add_parser("fake-server", help="a scripted model on 127.0.0.1, to try lis-tui without one",
                       description="Serve a scripted OpenAI-compatible model on 127.0.0.1, so the "
                                   "app, run, bench and rollout can be tried with no model at all.",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=port_number, default=8799,
                   help="port on 127.0.0.1 (default 8799; 0: any free one)")
    p.add_argument("--model", default="fake", help="the model name it lists (default fake)")
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


def _output_dir(request) -> str:
    """The output folder the system prompt names (a paper suite's may differ from ours)."""
    import re  # noqa: PLC0415

    system = next((m.get("content") for m in request.messages if m.get("role") == "system"), "")
    found = re.search(r"(/(?:testbed|agent)/[\w/.-]*output)\b", system if isinstance(system, str) else "")
    return found.group(1) if found else "/testbed/output"


def cmd_fake_server(args: argparse.Namespace) -> int:
    from lis_tui.servers.scripted import FakeOpenAI  # noqa: PLC0415

    server = FakeOpenAI(default=scripted_turn, model=args.model, port=args.port)
    try:
        server.start()
    except OSError as exc:
        print(f"lis-tui fake-server: {cannot_listen('127.0.0.1', args.port, exc)}", file=sys.stderr)
        return 1
    print(f"fake model server on {server.base_url} (model {args.model}); try:\n"
          f"  lis-tui run --base-url {server.base_url} --model {args.model} \"any task\"\n"
          "Ctrl-C stops it.", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0
