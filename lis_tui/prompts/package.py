"""`--prompts llm-in-sandbox:SUITE`: a suite's prompts read, at run time, from the installed
llm-in-sandbox package (never copied into lis-tui).

The package (0.2.0) keeps them in `llm_in_sandbox/benchmark/SUITE/config.yaml` (keys
`system_prompt`, `instance_prompt`; `general` is its CLI's default, `config/general.yaml`), as
`str.format` templates: `{working_dir}`, `{input_dir}`, `{output_dir}`, `{problem_statement}`,
`{command_docs}` and `{demo}` (both filled with nothing), and `{{`/`}}` for braces. Its `--mode
llm` prompt is `create_prompt(row)` in the suite's `vanilla_llm_prompt.py` (the problem statement
when there is none). The package itself is found without being imported: its `__init__` pulls
in litellm and docker, which reading two files does not need.
"""
from __future__ import annotations

import functools
import importlib.util
import shlex
import string
import sys
from pathlib import Path
from typing import Any, Callable

from lis_tui.config.toml_text import ConfigError

PREFIX = "llm-in-sandbox:"
INSTALL = "pip install llm-in-sandbox"
VERSION = "0.2.0"


def install_line() -> str:
    """The pip line that puts the package's prompts where lis-tui reads them, into this Python:
    its files only (`--no-deps`: its litellm and docker are not needed to read them)."""
    return f"{shlex.quote(sys.executable)} -m pip install --no-deps llm-in-sandbox=={VERSION}"
_OURS = {"working_dir", "input_dir", "output_dir", "problem_statement"}
_EMPTY = {"command_docs", "demo"}


def is_package_ref(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def package_prompts(ref: str) -> dict[str, str]:
    """The four prompts for `llm-in-sandbox:SUITE`, as lis-tui templates. The baseline gets no
    system prompt and the task as it is, as the package sends it (see `vanilla_prompt`)."""
    suite = ref[len(PREFIX):]
    config = _suite_file(suite, "config.yaml")
    data = _read_yaml(config)
    prompts = {}
    for ours, theirs in (("system", "system_prompt"), ("instance", "instance_prompt")):
        template = data.get(theirs) or ""
        if not isinstance(template, str):
            raise ConfigError(f"{theirs} is not text", path=config)
        prompts[ours] = _as_ours(template, config) if template else "{problem_statement}"
    return {**prompts, "llm_system": "", "llm_instance": "{task}"}


@functools.lru_cache(maxsize=None)  # once per run, not per episode
def vanilla_prompt(ref: str) -> Callable[[dict[str, Any]], str]:
    """The suite's `create_prompt(row)` for `--mode llm`, or the problem statement as it is."""
    suite = ref[len(PREFIX):]
    _suite_file(suite, "config.yaml")  # an unknown suite is named, not silently plain
    path = _root() / "benchmark" / suite / "vanilla_llm_prompt.py"
    if not path.is_file():
        return lambda row: row["problem_statement"]
    spec = importlib.util.spec_from_file_location(f"_lis_vanilla_{suite}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the user installed this package to run its code
    return getattr(module, "create_prompt", lambda row: row["problem_statement"])


def _root() -> Path:
    spec = importlib.util.find_spec("llm_in_sandbox")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("--prompts llm-in-sandbox:SUITE reads the prompts of the llm-in-sandbox "
                          f"package, which is not installed; run: {INSTALL}")
    return Path(list(spec.submodule_search_locations)[0])


def _suite_file(suite: str, name: str) -> Path:
    root = _root()
    path = root / "config" / "general.yaml" if suite == "general" else root / "benchmark" / suite / name
    if not suite or "/" in suite or suite.startswith(".") or not path.is_file():
        bench = root / "benchmark"
        known = sorted(p.parent.name for p in bench.glob("*/config.yaml")) + ["general"]
        raise ConfigError(f"llm-in-sandbox (in {root}) has no prompts for {suite!r}; it has: "
                          f"{', '.join(known)} (e.g. --prompts llm-in-sandbox:math)")
    return path


def _read_yaml(path: Path) -> dict:
    try:
        import yaml  # noqa: PLC0415 (llm-in-sandbox depends on it; lis-tui alone does not)
    except ImportError:
        raise ConfigError(f"reading {path} needs PyYAML, which llm-in-sandbox depends on; run: "
                          "pip install pyyaml") from None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read it: {exc}", path=path) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping with system_prompt and instance_prompt", path=path)
    return data


def _as_ours(template: str, path: Path) -> str:
    """A `str.format` template as one of ours: the paths and the task stay placeholders that
    the agent fills, `{command_docs}` and `{demo}` go, `{{` and `}}` become braces."""
    out = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"a prompt is not a valid format template: {exc}", path=path) from None
    for literal, name, _spec, _conversion in parsed:
        out.append(literal)
        if name is None or name in _EMPTY:
            continue
        if name not in _OURS:
            raise ConfigError(f"a prompt uses {{{name}}}, which lis-tui does not fill; it fills "
                              f"{', '.join(sorted(_OURS | _EMPTY))}", path=path)
        out.append(f"{{{name}}}")
    return "".join(out)


def package_tools() -> list[dict] | None:
    """The installed package's tool schemas, in the order its agent sends them (editor, bash,
    submit), or None when it is not installed. Its tools.py holds only these dicts and imports
    nothing, so loading it runs none of the package's machinery."""
    try:
        path = _root() / "tools.py"
    except ConfigError:
        return None
    spec = importlib.util.spec_from_file_location("_lis_package_tools", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)  # the user installed this package to run its code
        return [module.str_replace_editor_tool, module.execute_bash_tool, module.submit_tool]
    except (OSError, AttributeError, SyntaxError):
        return None
