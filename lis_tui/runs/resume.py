"""Continuing a past run or app session (`lis-tui resume ID`, `lis-tui --continue`, `run --resume ID`):
its conversation goes back to the model as it was, the transcript shows it, and the sandbox is the
run's kept session when there is one, else a fresh one with the run's workspace changes and output
files put back inside it (lis_tui.runs.restore), never on the host.

What a run was started with (rootfs, network, workspace, input, limits, the tool format its
conversation is written in) is taken again unless a flag says otherwise; from a run of lis-tui's
store only (store.in_store). A run folder named by its path elsewhere may be a sandbox's, so its
record gives the conversation and its tool format, nothing of where or how to run.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

from lis_tui.agent.loop import Agent
from lis_tui.runs.replay import load_trajectory, replay_events
from lis_tui.agent.trajectory import context_of
from isolation.spec import HOST_FOLDERS
from lis_tui.runs.store import find_run, in_store, list_runs, store_places

FOLLOW_UP = ("{task}\n\n(This continues the task above, in the same computer. When you are done, "
             "update {answer} if the answer changed and call `submit` again.)")
NOT_PUT_BACK = ("\n(Not all of the earlier work could be put back into this computer: {missed}. Those files are "
                "as the project has them now; look before you rely on them.)")
"""Added to the follow-up when some of the run's changes or output files were not put back."""
CARRIED = {"max_steps": "agent.max_steps", "max_context_tokens": "agent.max_context_tokens",
           "wall_time": "agent.wall_time", "mode": "agent.mode"}
"""The earlier run's agent settings that hold again unless a flag gives them (its limits)."""
CHAIN_LIMIT = 50
"""Earlier runs of a chain drawn at most (each resumed from the one before)."""
WHERE_IDS = "Fix: `lis-tui runs` lists past runs and sessions with their ids"


class FollowUpAgent(Agent):
    """An Agent that goes on with an earlier conversation instead of starting a new one."""

    def __init__(self, *args: Any, history: list[dict] | None = None, missed: list[str] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history = list(history or [])
        self.missed = list(missed or [])
        """What of the earlier run's work was not put back ("path (why)"): the model is told."""

    def _first_messages(self, task: str) -> list[dict]:
        if not self.history:
            return super()._first_messages(task)
        text = FOLLOW_UP.format(task=task, answer=self.answer_path)
        if self.missed:
            text += NOT_PUT_BACK.format(missed="; ".join(self.missed))
        return [*self.history, {"role": "user", "content": text}]


@dataclass
class Resumable:
    """A past run that can be continued: its folder, its trajectory and its conversation."""

    run_dir: Path
    doc: dict
    messages: list[dict]
    notes: list[str] = field(default_factory=list)
    """What a person should know before it goes on (fill_args): a limit that holds again, a folder gone."""
    kept: str | None = None
    """The kept session the new sandbox resumes (its files are as the run left them); None: a
    fresh sandbox, into which the run's changes and output files are put back."""
    missed: list[str] = field(default_factory=list)
    """What restore() could not put back ("path (why)"), which the model is told."""

    @property
    def name(self) -> str:
        return self.run_dir.name

    @cached_property
    def trusted(self) -> bool:
        """Whether the run is lis-tui's own (in its store): only then is how it ran taken again."""
        return in_store(self.run_dir)

    @property
    def sandbox(self) -> dict:
        saved = self.doc.get("sandbox")
        return saved if isinstance(saved, dict) else {}

    def header(self) -> dict[str, Any]:
        """What the new trajectory records of the chain."""
        return {"resumed_from": self.name, "resumed_from_path": str(self.run_dir)}

    def overrides(self, given: dict[str, Any], profile: str | None = None) -> dict[str, Any]:
        """`given` (config overrides from flags, None: not given) with the earlier run's tool format,
        and for a run of the store its limits, model and server, where no flag (nor `profile`, for
        the model) gave them."""
        agent = self.doc.get("agent") if isinstance(self.doc.get("agent"), dict) else {}
        merged = dict(given)
        for key, dotted in CARRIED.items() if self.trusted else ():
            if merged.get(dotted) is None and agent.get(key) is not None:
                merged[dotted] = agent[key]
        model = self.doc.get("model") if isinstance(self.doc.get("model"), dict) else {}
        if merged.get("model.max_tokens") is None and isinstance(model.get("max_tokens"), int) and self.trusted:
            merged["model.max_tokens"] = model["max_tokens"]
        # The model and its server, unless a flag or a profile names them: the conversation goes on
        # with the model that wrote it. Only from lis-tui's own store: a run folder found elsewhere
        # may be anyone's, and a server it names would get the API key.
        if profile is None and merged.get("model.model") is None and merged.get("model.base_url") is None \
                and self.trusted:
            for key in ("model", "base_url", "api_key_env"):
                if isinstance(model.get(key), str) and model[key]:
                    merged[f"model.{key}"] = model[key]
        # Its messages are written in the format it ended in: one it was given, or auto's switch
        settled = agent.get("tool_format") if agent.get("tool_format") != "auto" else \
            self.doc.get("tool_format") if "tool_format_switch" in self.doc else None
        if merged.get("agent.tool_format") is None and settled in ("native", "hermes", "json", "bash"):
            merged["agent.tool_format"] = settled
        return merged

    def fill_args(self, args: argparse.Namespace) -> list[str]:
        """Set the sandbox flags not given to what the run had (a run of the store only); notes on
        what was taken and what could not be had. Each value is checked for its type."""
        if not self.trusted:
            self.notes = ["it is not a run of lis-tui's store, so nothing its record says of how it ran is taken "
                          "(workspace, network, env, rootfs, input, session, model, limits): give the flags you "
                          "want (--workspace DIR, --network, ...)"] + self._kept_session(args, None)
            return self.notes
        saved, notes = self.sandbox, []
        text = {key: value for key, value in saved.items() if isinstance(value, str) and value}
        for key in HOST_FOLDERS:  # absolute since this version; before, relative to where it started
            if key in text:
                text[key] = self._host_folder(key, text[key])
        taken = [f"{flag} {text[key]}" for key, flag in (("rootfs", "--rootfs"), ("network", "--network"),
                                                        ("workspace", "--workspace"))
                 if getattr(args, key) is None and key in text]
        args.rootfs, args.network = args.rootfs or text.get("rootfs"), args.network or text.get("network")
        if args.workspace is None and "workspace" in text:
            if not os.path.isdir(text["workspace"]):
                raise ValueError(f"the run's workspace {text['workspace']} is gone (moved or removed?). Fix: "
                                 f"give the project's folder: --workspace DIR")
            args.workspace = text["workspace"]
            if _here() != text["workspace"]:
                notes.append(f"continuing in {text['workspace']}, its project (not here)")
        for key in ("input_dir", "documents_dir"):
            if getattr(args, key) is None and key in text:
                if os.path.isdir(text[key]):
                    setattr(args, key, text[key])
                else:
                    notes.append(f"its --{key.replace('_', '-')} {text[key]} is gone: the sandbox starts without it")
        env = saved.get("env") if isinstance(saved.get("env"), dict) else {}
        args.env = [f"{k}={v}" for k, v in env.items()] + list(args.env or [])
        for key in ("git_writable", "nested_userns"):
            if saved.get(key) is True and not getattr(args, key, None):
                setattr(args, key, True)
        notes += self._kept_session(args, text.get("session"))
        self.notes = ([f"as it ran: {', '.join(taken)} (a flag changes each)"] if taken else []) + notes \
            + self.limit_notes()
        return self.notes

    def _host_folder(self, key: str, value: str) -> str:
        """A host folder the run named, absolute: a relative one (an earlier version's record) is read
        against the folder the run was started in, never the one this is typed in."""
        if os.path.isabs(value):
            return value
        started = self.doc.get("started_in")
        if not isinstance(started, str) or not os.path.isabs(started):
            flag = "--" + key.replace("_", "-")
            raise ValueError(f"the run kept its {flag} only as {value!r}, relative to a folder it did not note. "
                             f"Fix: name that folder: {flag} DIR")
        return os.path.normpath(os.path.join(started, value))

    def _kept_session(self, args: argparse.Namespace, saved: str | None) -> list[str]:
        """Resume the run's kept session when it is still there (and note when it is gone)."""
        from isolation import sessions  # noqa: PLC0415

        def kept(session: str) -> bool:
            return sessions.load_spec(sessions.sessions_root() / sessions.check_id(session)) is not None

        notes = []
        if args.session is None and saved is not None:
            if kept(saved):
                args.session = saved
            else:
                notes.append(f"its kept session {saved} is gone: a fresh sandbox, with the run's work put back")
        if args.session is not None and kept(args.session):
            self.kept = args.session
        return notes

    def limit_notes(self) -> list[str]:
        """What a person should know before the run goes on: it ended at a limit that holds again."""
        reason = self.doc.get("finish_reason")
        agent = self.doc.get("agent") if isinstance(self.doc.get("agent"), dict) else {}
        if reason == "max_context":
            return [f"it stopped at its context limit (agent.max_context_tokens = "
                    f"{agent.get('max_context_tokens')}); the same limit holds: the conversation is compacted "
                    "to go on, or with agent.compact = \"off\" a follow-up stops at once unless you raise "
                    "--max-context-tokens"]
        if reason == "max_steps":
            return [f"it stopped after its {agent.get('max_steps')} steps; the follow-up gets as many again "
                    "(--max-steps)"]
        if reason is None:
            return ["it did not finish (stopped hard or still open): it goes on from its last saved step"]
        return []

    def earlier_events(self) -> Iterator[Any]:
        """The events of the whole chain, oldest run first, for the transcript."""
        return chain_events(self.doc)

    def restore(self, sandbox: Any) -> str:
        """Put the run's work back into `sandbox` (not a kept session's: that has it); what was done."""
        if self.kept is not None and sandbox.spec.session == self.kept:
            return f"continuing in the kept session {self.kept}: its files are as the run left them"
        from lis_tui.runs.restore import put_back  # noqa: PLC0415

        line, self.missed = put_back(sandbox, self.run_dir, self.name)
        return line


def chain_events(doc: dict) -> Iterator[Any]:
    """A trajectory's events (lis_tui.runs.replay), after those of the runs it was resumed from, oldest
    first: the whole conversation, as a replay or a resumed session shows it."""
    docs = [doc]
    while len(docs) < CHAIN_LIMIT and isinstance(doc.get("resumed_from_path"), str):
        try:
            doc = load_trajectory(doc["resumed_from_path"])
        except ValueError:  # an earlier run removed: what is left is drawn
            break
        docs.append(doc)
    for doc in reversed(docs):
        yield from replay_events(doc)


def load_resumable(ref: str) -> Resumable:
    """The run `ref` names (an id from `lis-tui runs`, a prefix, a folder, or a kept session's id:
    its newest run), checked that it can go on; ValueError with the fix when not."""
    try:
        run_dir = find_run(ref)
    except ValueError:
        # a kept session's id (`lis-tui sessions list`): the newest run in it
        run_dir = next((run.path for run in list_runs() if ref and run.session == ref), None)
        if run_dir is None:
            raise
    doc = load_trajectory(run_dir)
    run_dir = (run_dir.parent if run_dir.name == "trajectory.json" else run_dir).absolute()
    if "bench_mode" in doc or "task_id" in doc:
        raise ValueError(f"{run_dir} is a bench or rollout episode: it is scored as it ran, once, so it is not "
                         "continued. Fix: run its task again with `lis-tui run`")
    agent = doc.get("agent") if isinstance(doc.get("agent"), dict) else {}
    if agent.get("observation") == "paper":
        raise ValueError(f"{run_dir} ran in paper mode (--observation paper), which reproduces the paper's "
                         "harness: it has no follow-ups. Fix: run its task again, or start a new one")
    try:
        messages = context_of(doc)  # what the model was sent last: a compacted run goes on compacted
    except ValueError as exc:
        raise ValueError(f"{run_dir}/trajectory.json cannot be continued: {exc}") from None
    if not any(isinstance(m, dict) and m.get("role") == "user" for m in messages):
        raise ValueError(f"{run_dir} holds no conversation to continue (it ended before the model was "
                         "asked). Fix: run its task again")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise ValueError(f"{run_dir}/trajectory.json has messages that are not chat messages; it cannot be "
                         "continued")
    return Resumable(run_dir, doc, messages)


def last_here(folder: Path | None = None) -> Resumable:
    """The newest run or session started in `folder` (default: here) or with it as workspace."""
    folder = (folder or Path.cwd()).resolve()
    for run in list_runs(store_places(), indexed=True):
        started = _resolved(run.started_in)
        # an earlier version's relative workspace is read against where the run started, never here
        workspace = None if not run.workspace else _resolved(os.path.join(run.started_in, run.workspace)) \
            if started else _resolved(run.workspace)
        if folder in (started, workspace):
            return load_resumable(str(run.path))
    raise ValueError(f"no run or session was started in {folder} (nor with it as --workspace). "
                     f"{WHERE_IDS}; `lis-tui resume ID` continues one of them")


def _resolved(path: str) -> Path | None:
    return Path(path).resolve() if path and os.path.isabs(path) else None


def _here() -> str:
    try:
        return os.path.realpath(os.getcwd())
    except OSError:  # the folder this was typed in is gone
        return ""

