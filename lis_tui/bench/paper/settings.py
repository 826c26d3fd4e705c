"""The paper package's run settings, the default of every paper suite run, each overridable by
a flag, and the lines that tell a reader whether a run used them ("settings: paper") or not.

Read from llm-in-sandbox 0.2.0: `cli.run_benchmark`'s defaults (temperature from
`LLM_TEMPERATURE`, else 1.0; `max_steps` 100; `max_tokens_per_call` 65,536, and
`max_response_len` 65,536 for its LLM mode; `max_token_limit` 65,536 for the whole trajectory,
131,072 for long_context as that suite's README runs it), its agent (only a reply's first tool
call runs; replies without one are answered and counted as steps, never a reason to stop; the
observation frame of `lis_tui.agent.observation`; a tool call whose arguments are not JSON taken as
no call; a prompt too long for the server asked again with a lower max_tokens; the suite's own
prompts from the installed package, else ours and the settings say so), its container's
network (on; here through lis-tui's proxy, which reaches public addresses only) and its LLM mode
(`lis_tui.bench.paper.llm_mode`). Its README suggests LLM_TEMPERATURE=0.7 for Qwen3 models:
pass --temperature 0.7 for those, and the summary says the run was custom.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lis_tui.config.settings import Config, ConfigError
from lis_tui.prompts.package import PREFIX, install_line, package_prompts

PACKAGE = "llm-in-sandbox 0.2.0"
LONG_TRAJECTORY = {"long_context": 131_072}


@dataclass(frozen=True)
class Knob:
    """One setting: what it is called, the config key it sets and the flag that overrides it."""

    label: str
    key: str
    """`section.key` in the config; "" for the LLM-mode prompt, which the tasks carry."""
    flag: str
    package: Any

    def value_for(self, suite: str) -> Any:
        if self.key == "agent.max_context_tokens":
            return LONG_TRAJECTORY.get(suite, self.package)
        if self.key == "agent.prompts":
            return f"{PREFIX}{suite}"
        return self.package


KNOBS = (
    Knob("temperature", "model.temperature", "--temperature", 1.0),
    Knob("max tokens per call", "model.max_tokens", "--max-tokens", 65_536),
    Knob("max tokens per trajectory", "agent.max_context_tokens", "--max-context-tokens", 65_536),
    Knob("max steps", "agent.max_steps", "--max-steps", 100),
    Knob("replies without a tool call before stopping", "agent.max_no_action", "--max-no-action",
         0),
    Knob("tool calls run per reply", "agent.tool_calls", "--tool-calls", "first"),
    Knob("observation format", "agent.observation", "--observation", "paper"),
    Knob("tool call format", "agent.tool_format", "--tool-format", "native"),
    Knob("tool call whose arguments are not JSON", "agent.bad_arguments", "--bad-arguments",
         "nudge"),
    Knob("prompt too long for the server", "agent.prompt_too_long", "--prompt-too-long", "shrink"),
    Knob("sandbox-mode prompts", "agent.prompts", "--prompts", PREFIX),
    Knob("LLM-mode prompt and answer", "", "--llm-prompt", "paper"),
    Knob("network", "network.mode", "--network", "on"),
)
"""In the order the header and summary.md show them."""
EXPLAINED = {"paper": "the package's", "first": "first only", "all": "all",
             "native": "OpenAI tools", "lis-tui": "lis-tui's", "": "lis-tui's",
             "answer": "answered, saying what is wrong", "nudge": "as a reply without a tool call",
             "fail": "the episode fails", "shrink": "lower max tokens and ask again",
             "on": "on, through lis-tui's proxy (public addresses only)", "off": "off",
             "ask": "ask (headless: only allow-listed hosts)"}


@dataclass(frozen=True)
class RunSettings:
    """The settings a paper suite ran with: (knob, value, the package's value) per setting."""

    suite: str
    rows: tuple[tuple[Knob, Any, Any], ...]

    @property
    def paper(self) -> bool:
        return all(value == package for _, value, package in self.rows)

    @property
    def llm_prompt(self) -> str:
        return next(value for knob, value, _ in self.rows if not knob.key)

    def lines(self, suites: str = "") -> list[str]:
        """The run's header and summary.md's settings block, one line each."""
        changed = [f"{k.label} ({k.flag})" for k, v, p in self.rows if v != p]
        head = (f"settings: paper ({PACKAGE}'s defaults for {suites or self.suite})" if not changed
                else f"settings: custom for {suites or self.suite} ({', '.join(changed)}: not "
                f"{PACKAGE}'s)")
        return [head] + [f"{k.label}: {_value(k, v)}" + ("" if v == p or _missing(k, v) else
                                                            f" (package: {_shown(p)})")
                         for k, v, p in self.rows]


def apply(config: Config, suite: str, flags: dict[str, Any]) -> RunSettings:
    """Set the package's value of every knob in `config`, or the value of its flag where
    `flags` (flag -> value, None when not given) has one."""
    rows = []
    for knob in KNOBS:
        package = knob.value_for(suite)
        given = flags.get(knob.flag)
        value = package if given is None else given
        if knob.key == "agent.prompts" and given is None and not _readable(package):
            value = ""  # ours; the header and summary say how to get the package's
        if knob.key:
            config.set(knob.key, value, "paper" if given is None else knob.flag)
        rows.append((knob, value, package))
    return RunSettings(suite, tuple(rows))


def markdown(settings: list[RunSettings]) -> str:
    """summary.md's settings: a line saying paper or custom and a table of the values, per
    distinct set of values, naming its suites."""
    groups: dict[tuple, list[RunSettings]] = {}
    for s in settings:
        groups.setdefault(tuple((k.label, v, p) for k, v, p in s.rows), []).append(s)
    blocks = ["## Run settings\n"]
    for same in groups.values():
        head = same[0].lines(", ".join(s.suite for s in same))[0]
        rows = "".join(f"| {k.label} | {_value(k, v)} | {_shown(p)} | {k.flag} |\n"
                       for k, v, p in same[0].rows)
        blocks.append(f"{head[0].upper()}{head[1:]}\n\n| setting | this run | {PACKAGE} | flag |\n"
                      f"|---|---|---|---|\n{rows}")
    return "\n".join(blocks)


def _readable(ref: str) -> bool:
    """Whether the package's prompts for `ref` can be read here (it need not be importable)."""
    try:
        package_prompts(ref)
    except ConfigError:
        return False
    return True


def _missing(knob: Knob, value: Any) -> bool:
    """The package's prompts were wanted but it is not installed here."""
    return knob.key == "agent.prompts" and value == ""


def _value(knob: Knob, value: Any) -> str:
    if _missing(knob, value):
        return f"{_shown(value)}; for the package's: {install_line()}"
    return _shown(value)


def _shown(value: Any) -> str:
    if isinstance(value, str) and value.startswith(PREFIX):
        return f"the package's ({value})"
    if value == 0 and not isinstance(value, bool) and isinstance(value, int):
        return "no limit"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return EXPLAINED.get(value, str(value)) if isinstance(value, str) else str(value)
