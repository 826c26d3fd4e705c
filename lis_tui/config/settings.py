"""Settings: TOML files, then the environment, then a chosen profile, then command-line overrides.

Layers, later ones win: `$XDG_CONFIG_HOME/lis-tui/config.toml`, `./lis-tui.toml` once trusted
(`lis-tui trust`, lis_tui/config/trust.py), the environment (`OPENAI_BASE_URL`, `LIS_MODEL`), the model
profile named on the command line (`[models.NAME]`; an explicit choice, so it beats the
environment), then overrides (`{"model.model": "x"}`).
The API key never comes from a file: it is read from the variable that `model.api_key_env` names
(default `OPENAI_API_KEY`) or given as an override.
"""

from __future__ import annotations

import os
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, NamedTuple
from lis_tui.config import trust
from lis_tui.config.toml_text import ConfigError, find_line, parse_toml, set_toml_value, toml_key, toml_value, \
    toml_parser, user_config_path  # noqa: F401
from lis_tui.config.workspace import WorkspaceConfig

DEFAULT_BASE_URL = "https://api.openai.com/v1"
ENV_LAYER = {"OPENAI_BASE_URL": "model.base_url", "LIS_MODEL": "model.model"}
KEY_FIX = ('put the key in an environment variable and name it with api_key_env = "VAR" '
           "(default OPENAI_API_KEY)")


@dataclass
class ModelConfig:
    """How to reach the model server and what to ask of it."""

    model: str = ""
    """Model name sent to the server; empty means the first one the server lists."""
    base_url: str = DEFAULT_BASE_URL
    """OpenAI-compatible endpoint, usually ending in /v1 (vLLM, SGLang, Ollama, llama.cpp)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable that holds the API key."""
    api_key: str | None = field(default=None, repr=False)
    """The API key; from the environment or an override, never from a file."""
    temperature: float | None = None
    """Sampling temperature; unset leaves the server's default."""
    top_p: float | None = None
    """Nucleus sampling mass; unset leaves the server's default."""
    max_tokens: int | None = None
    """Most tokens one reply may have; unset leaves the server's default."""
    seed: int | None = None
    """Sampling seed, for servers that honour it."""
    extra_body: dict = field(default_factory=dict)
    """Extra request fields passed through, e.g. {chat_template_kwargs = {thinking = true}}."""
    timeout: float = 600.0
    """Seconds to wait for one request before giving up on it (it is then retried)."""
    max_retries: int = 5
    """Retries after a 429, 5xx, timeout or connection error, before stopping."""
    retry_base_delay: float = 1.0
    """Seconds before the first retry; doubles each time, with jitter."""
    retry_max_delay: float = 60.0
    """Longest wait between retries, Retry-After included."""
    stream: bool = True
    """Stream replies when the caller wants live text."""

    def public_dict(self) -> dict[str, Any]:
        """The settings without the key, for trajectories and logs."""
        data = asdict(self)
        data.pop("api_key")
        return data


@dataclass
class SandboxConfig:
    """The sandbox the model works in."""

    rootfs: str = "host"
    """Root filesystem: "host", a name in the rootfs store, or an absolute directory."""
    timeout: float = 120.0
    """Seconds one command may run before it is interrupted."""
    memory: str = "auto"
    """Memory one process may use: "4G", "512M", "none"; "auto" is 4 GiB or half the RAM."""
    tmp_size: str = "1G"
    """What /tmp may hold (it lives in memory): "1G", "256M", "none" (the kernel's default)."""
    disk: str = "auto"
    """What the sandbox's files may hold, in a tmpfs (memory): "10G", "none"; "auto": 10G or half the RAM."""
    inodes: int = 0
    """Files and directories the sandbox may make, checked with `disk`; 0: one for every 16 KiB of the disk limit."""
    disk_on: str = field(default="memory", metadata={"choices": ("memory", "disk")})
    """Where the sandbox's files live: "memory" (a tmpfs, the kernel's bound) or "disk" (big installs; a softer bound)."""
    tmpfs_budget: str = "auto"
    """Memory all of this user's sandboxes' tmpfs may hold together: "8G"; "auto": half of what is available."""
    tmpfs_floor: str = "auto"
    """Free memory (MemAvailable) the sandboxes' writes leave the machine: "2G"; "auto": a 16th of the RAM, 2G at most."""
    export_cap: str = "auto"
    """Data one copy of /testbed/output onto the host may write (holes free): "2G"; "auto": the disk limit."""
    nested_userns: bool = False
    """Let commands make user namespaces of their own (a nested bwrap, rootless podman)."""
    workers: int = field(default=0, metadata={"min": 0})
    """Processes that run `bench` and `rollout` episodes and `env serve` environments: 0 one per 2 cores (at most the concurrency); 1 only lis-tui's own."""


@dataclass
class AgentConfig:
    """Limits and mode of the ReAct loop."""

    max_steps: int = field(default=100, metadata={"min": 1})
    """Most model calls in one run."""
    max_no_action: int = 3
    """Replies in a row without a tool call before the run stops; 0 means no limit."""
    max_context_tokens: int = 0
    """The context limit in tokens; 0: the server's (vLLM, SGLang, llama.cpp say it), else 128000 while compacting, else none."""
    compact: str = field(default="auto", metadata={"choices": ("auto", "off")})
    """At the context limit: "auto" compacts the older steps into a summary and goes on (lis-tui's format; paper mode never); "off" stops the run."""
    wall_time: float = 0.0
    """Seconds one run may take; 0 means no limit."""
    mode: str = field(default="sandbox", metadata={"choices": ("sandbox", "llm")})
    """"sandbox" (the paper's method) or "llm" (one model call, no sandbox)."""
    prompts: str = ""
    """A TOML file replacing built-in prompts, or "llm-in-sandbox:SUITE" (that package's)."""
    observation: str = field(default="lis-tui", metadata={"choices": ("lis-tui", "paper")})
    """Tool results as "lis-tui" words them or as the "paper" harness does (paper suites' default)."""
    tool_calls: str = field(default="all", metadata={"choices": ("all", "first")})
    """Run "all" tool calls of a reply, or only the "first" (the paper harness's way)."""
    tool_format: str = field(default="auto", metadata={
        "choices": ("auto", "native", "hermes", "json", "bash")})
    """How tool calls travel: "native" (OpenAI tools), "hermes"/"json"/"bash" (written as text), or "auto" (docs/tool-formats.md)."""
    bad_arguments: str = field(default="answer", metadata={"choices": ("answer", "nudge")})
    """A tool call whose arguments are not JSON: "answer" it saying so, or "nudge" as if the reply called no tool (the paper harness's way)."""
    prompt_too_long: str = field(default="fail", metadata={"choices": ("fail", "shrink")})
    """The server refuses a prompt as too long: "fail" the run, or "shrink" max_tokens and ask again (the paper harness's way)."""
    project_instructions: bool = True
    """Add AGENTS.md (the workspace's top; the user's beside config.toml) to the system prompt of `run` and the app; never in paper mode."""


@dataclass
class NetworkConfig:
    """What the sandbox may reach."""

    mode: str = field(default="off", metadata={"choices": ("off", "ask", "on")})
    """"off" (loopback only), "ask" (a person approves each new host) or "on"."""
    allow: list[str] = field(default_factory=list)
    """Hosts always allowed, e.g. "pypi.org" or "*.github.com"."""
    deny: list[str] = field(default_factory=list)
    """Hosts always refused; checked before the allow list."""
    credentials: dict = field(default_factory=dict)
    """Per host, a header the proxy adds: [network.credentials."HOST"] header = "Authorization", value = "Bearer ${env:VAR}" (or ${file:PATH})."""


SECTIONS: dict[str, type] = {
    "model": ModelConfig, "sandbox": SandboxConfig, "agent": AgentConfig, "network": NetworkConfig,
    "workspace": WorkspaceConfig,
}


class Setting(NamedTuple):
    """One effective setting, for `lis-tui config`."""

    key: str
    value: str
    source: str


@dataclass
class Config:
    """All settings, with where each came from."""

    model: ModelConfig = field(default_factory=ModelConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    workspace: WorkspaceConfig = field(default_factory=WorkspaceConfig)
    profile: str | None = None
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Each config file looked for, in order, and what became of it ("read", "not present",
    "ignored: not trusted; ...")."""

    def set(self, dotted: str, value: Any, source: str) -> None:
        """Set `section.key` and remember where the value came from."""
        section, key = dotted.split(".", 1)
        setattr(getattr(self, section), key, value)
        self.sources[dotted] = source

    def explain(self) -> list[Setting]:
        """Every effective setting, its value (key masked) and its source."""
        source = self.sources.get("profile", "default")
        rows = [Setting("profile", self.profile or "(none)", source)]
        for name in SECTIONS:
            for f in fields(getattr(self, name)):
                dotted = f"{name}.{f.name}"
                value = getattr(getattr(self, name), f.name)
                shown = mask_key(value) if f.name == "api_key" else _show(value)
                rows.append(Setting(dotted, shown, self.sources.get(dotted, "default")))
        return rows

    def explain_text(self) -> str:
        """`explain()` as aligned lines."""
        rows = self.explain()
        width = max(len(r.key) for r in rows)
        vwidth = min(40, max(len(r.value) for r in rows))
        return "\n".join(f"{r.key:<{width}}  {r.value:<{vwidth}}  # {r.source}" for r in rows)


def mask_key(key: str | None) -> str:
    """Show enough of a key to recognise it and no more."""
    if not key:
        return "(not set; a placeholder is sent)"
    return f"{key[:3]}...{key[-4:]}" if len(key) >= 16 else "****"


def _show(value: Any) -> str:
    return "(unset)" if value is None else toml_value(value)


def field_docs(cls: type) -> dict[str, str]:
    """The one-line docstrings of a config dataclass's fields, read from its source."""
    import ast
    import inspect

    body = ast.parse(inspect.getsource(cls)).body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(after, ast.Expr) \
                and isinstance(after.value, ast.Constant):
            docs[node.target.id] = str(after.value.value)  # type: ignore[attr-defined]
    return docs


# -- loading -------------------------------------------------------------------------------------

def load_config(profile: str | None = None, overrides: Mapping[str, Any] | None = None, *,
                env: Mapping[str, str] | None = None, paths: list[Path] | None = None) -> Config:
    """Build the effective config from files, environment, profile and overrides.

    Without `paths`: the user's file, then `./lis-tui.toml` only if trusted (an untrusted one is
    ignored whole, with one line on stderr). `paths` are files the caller chose, all read."""
    env = os.environ if env is None else env
    config = Config()
    for path in [user_config_path(env)] if paths is None else map(Path, paths):
        if path.is_file():
            _apply_file(config, path)
        config.files[str(path)] = ("not present" if not path.is_file() else "read" if paths is not None
                                   else "read (your own config: needs no trust)")
    if paths is None:
        _apply_project_file(config, Path.cwd(), env)
    for var, dotted in ENV_LAYER.items():
        if env.get(var):
            config.set(dotted, env[var], f"env {var}")
    if profile:
        _apply_profile(config, profile, env)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            config.set(dotted, _checked(dotted, value, source="command line"), "command line")
    if config.sources.get("model.api_key") != "command line":
        key = env.get(config.model.api_key_env)
        if key:
            config.set("model.api_key", key, f"env {config.model.api_key_env}")
    check_base_url(config.model.base_url, f"model.base_url ({config.sources.get('model.base_url', 'default')})")
    return config


def check_base_url(url: str, what: str) -> None:
    """ConfigError at once for a URL the client would retry for half a minute: no scheme, no host."""
    from urllib.parse import urlsplit  # noqa: PLC0415

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port past 65535, or not a number, raises here)
    except ValueError as exc:  # "Invalid IPv6 URL" alone names neither the URL nor the fix
        fix = ("an IPv6 address goes in brackets, its port after them, e.g. --base-url "
               "http://[::1]:8000/v1") if "IPv6" in str(exc) else "its port is a number from 1 to 65535"
        raise ConfigError(f"{what} {url!r} is not a URL ({exc}); {fix}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        # the same wrong scheme again would be no fix: ftp://host becomes http://host
        rest = url.split("://", 1)[1] if "://" in url else url
        raise ConfigError(f"{what} {url!r} is not an http(s) URL; write it with its scheme, "
                          f"e.g. --base-url http://{rest}")


def _apply_project_file(config: Config, directory: Path, env: Mapping[str, str]) -> None:
    """`directory`/lis-tui.toml, if trusted; the bytes parsed are the bytes whose hash was checked."""
    found = trust.check(directory, env)
    if found is None:
        config.files[str(directory / trust.PROJECT_FILE)] = "not present"
    elif found.trusted:
        _apply_file(config, found.path, found.text)
        config.files[str(found.path)] = f"read (trusted, sha256 {found.sha256[:12]})"
    else:
        config.files[str(found.path)] = f"ignored: {found.why()}; {found.fix()}"
        trust.warn(found)


def file_settings(path: Path, text: str) -> Config:
    """What one config file's text sets, on top of the defaults; ConfigError if lis-tui cannot use it."""
    config = Config()
    _apply_file(config, path, text)
    return config


def _apply_file(config: Config, path: Path, text: str | None = None) -> None:
    text = path.read_text(encoding="utf-8") if text is None else text
    data = parse_toml(text, path)
    for name, table in data.items():
        if name == "models":
            _read_profiles(config, table, path, text)
            continue
        if name not in SECTIONS:
            kind = "table" if isinstance(table, dict) else "key"
            raise _unknown(path, text, (), name, list(SECTIONS) + ["models"], kind=kind)
        if not isinstance(table, dict):
            raise ConfigError(f'"{name}" must be a table: write [{name}] on a line of its own',
                              path=path, line=find_line(text, (), name), key=name)
        for key, value in table.items():
            dotted = f"{name}.{key}"
            config.set(dotted, _checked(dotted, value, path=path, text=text), str(path))


def _read_profiles(config: Config, table: Any, path: Path, text: str) -> None:
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise ConfigError("profiles are tables: write [models.NAME] then its keys",
                          path=path, line=find_line(text, (), "models"), key="models")
    for name, values in table.items():
        profile = config.profiles.setdefault(name, {})
        for key, value in values.items():
            profile[key] = _checked(f"model.{key}", value, path=path, text=text,
                                    table=("models", name))
            config.sources[f"models.{name}.{key}"] = str(path)


def _apply_profile(config: Config, name: str, env: Mapping[str, str]) -> None:
    if name not in config.profiles:
        known = ", ".join(sorted(config.profiles)) or "none defined"
        raise ConfigError(f'no model profile "{name}" (profiles: {known}); add a [models.{name}] '
                          f"table to {user_config_path(env)} or ./lis-tui.toml", key=name)
    config.profile = name
    config.sources["profile"] = "command line"
    for key, value in config.profiles[name].items():
        where = config.sources[f"models.{name}.{key}"]
        config.set(f"model.{key}", value, f"profile {name} ({where})")


def _checked(dotted: str, value: Any, *, path: Path | None = None, text: str = "",
             table: tuple[str, ...] | None = None, source: str = "") -> Any:
    """Validate one value against its field, returning it converted; ConfigError if it is wrong."""
    section, _, key = dotted.partition(".")
    table = table or (section,)
    line = find_line(text, table, key) if text else None
    f, hint = _field(dotted, path, text, table)
    if key == "api_key" and path is not None:
        raise ConfigError(f"api_key is not read from files (a key in a file leaks); {KEY_FIX}",
                          path=path, line=line, key=dotted)
    if isinstance(value, str) and _base_type(hint) is not str and source == "command line":
        value = _parse_scalar(dotted, value)
    try:
        value = check_value(value, hint)
    except TypeError as exc:
        raise ConfigError(f"{'.'.join(table)}.{key} {exc}", path=path, line=line,
                          key=dotted) from None
    if dotted == "network.credentials":
        credentials_from(value, path=path, line=line)
    low = f.metadata.get("min")
    if low is not None and value < low:  # max_steps 0 would stop before the first model call
        raise ConfigError(f"{dotted} must be at least {low}, not {value}", path=path, line=line,
                          key=dotted)
    choices = f.metadata.get("choices")
    if choices and value not in choices:
        raise ConfigError(f'{dotted} must be one of {", ".join(choices)}, not "{value}"',
                          path=path, line=line, key=dotted)
    return value


def _field(dotted: str, path: Path | None, text: str, table: tuple[str, ...]) -> tuple[Any, Any]:
    """The dataclass field for `section.key` and its type; ConfigError if there is none."""
    section, _, key = dotted.partition(".")
    cls = SECTIONS.get(section)
    if cls is None:
        raise ConfigError(f'unknown setting "{dotted}"; sections are {", ".join(SECTIONS)}',
                          key=dotted)
    by_name = {f.name: f for f in fields(cls)}
    if key not in by_name:
        raise _unknown(path, text, table, key, list(by_name), kind="key")
    return by_name[key], typing.get_type_hints(cls)[key]


def _parse_scalar(dotted: str, text: str) -> Any:
    toml = toml_parser()
    try:
        return toml.loads(f"v = {text}")["v"]
    except toml.TOMLDecodeError:
        raise ConfigError(f'{dotted}: cannot read "{text}" as a value', key=dotted) from None


def _unknown(path: Path | None, text: str, table: tuple[str, ...], key: str, known: list[str],
             kind: str) -> ConfigError:
    import difflib  # noqa: PLC0415 (only for a mistake)

    close = difflib.get_close_matches(key, known, n=1)
    hint = f'did you mean "{close[0]}"? ' if close else ""
    where = f" in [{'.'.join(table)}]" if table else ""
    return ConfigError(f'unknown {kind} "{key}"{where}; {hint}known: {", ".join(known)}. '
                       "Rename or remove it.", path=path, line=find_line(text, table, key),
                       key=".".join(table + (key,)))


def _base_type(hint: Any) -> Any:
    """`float` for `float | None`, `list` for `list[str]`."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if type(None) in typing.get_args(hint):
        hint = args[0]
    return typing.get_origin(hint) or hint


def check_value(value: Any, hint: Any) -> Any:
    """Return `value` if it fits the type `hint` (ints widen to floats); else TypeError."""
    kind = _base_type(hint)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind in (int, float) and isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"must be {_TYPE_NAMES.get(kind, kind.__name__)}, "
                        f"got {toml_value(value)}")
    if kind is list and not all(isinstance(v, str) for v in value):
        raise TypeError(f"must be a list of strings, got {toml_value(value)}")
    return value


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "a list of strings", dict: "a table"}


# -- TOML text -----------------------------------------------------------------------------------


# -- saving --------------------------------------------------------------------------------------

def save_settings(values: Mapping[str, Any], path: Path | None = None) -> Path:
    """Write `{"sandbox.rootfs": "x", "models.NAME.model": "y"}` into a config file in place."""
    items = []
    for dotted, value in values.items():
        parts = tuple(dotted.split("."))
        table, key = (parts[:2], parts[2]) if parts[0] == "models" else (parts[:1], parts[1])
        items.append((table, key, value))
    return _save(items, path)


def configured_rootfs(config: Config) -> str:
    """The rootfs named in a config file or flag, else the store's default (`lis-tui rootfs default`), else host."""
    if config.sources.get("sandbox.rootfs", "default") != "default":
        return config.sandbox.rootfs
    try:
        from isolation.rootfs import RootfsStore  # noqa: PLC0415

        return RootfsStore().get_default()
    except Exception:  # no store yet, or an unreadable one: the host rootfs always works
        return "host"


def parse_size(text: str, what: str) -> int | None:
    """"4G", "512M", "64K", "1048576" -> bytes; "none" -> None. ConfigError says what it wants."""
    text = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    if text in ("NONE", "0", ""):
        return None
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(text[-1:], 1)
    try:
        value = float(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        raise ConfigError(f"{what} wants a size like 4G, 512M or none, not {text!r}") from None
    return int(value)


def sandbox_limits(config: Config):
    """The Limits that [sandbox] asks for."""
    from isolation.limits import budget  # noqa: PLC0415
    from isolation.spec import Limits, SandboxError, default_disk, default_memory  # noqa: PLC0415

    memory, disk = config.sandbox.memory, config.sandbox.disk
    try:
        budget.configure(config.sandbox.tmpfs_budget, config.sandbox.tmpfs_floor)
    except SandboxError as exc:
        raise ConfigError(str(exc), key="sandbox.tmpfs_budget") from None
    return Limits(disk_on=config.sandbox.disk_on, memory=default_memory() if str(memory).strip().lower() == "auto"
                  else parse_size(memory, "sandbox.memory"),
                  tmp_size=parse_size(config.sandbox.tmp_size, "sandbox.tmp_size"),
                  disk=default_disk() if str(disk).strip().lower() == "auto" else parse_size(disk, "sandbox.disk"),
                  inodes=config.sandbox.inodes or None,
                  export_cap=None if str(config.sandbox.export_cap).strip().lower() == "auto"
                  else parse_size(config.sandbox.export_cap, "sandbox.export_cap"))


def credentials_from(table: Mapping, *, path: Path | None = None, line: int | None = None) -> tuple:
    """[network.credentials] as isolation Credentials (references, no secrets); ConfigError if malformed."""
    from isolation.net.credentials import parse_credentials  # noqa: PLC0415
    from isolation.net.policy import NetworkError  # noqa: PLC0415

    try:
        return parse_credentials(table)
    except NetworkError as exc:
        raise ConfigError(str(exc), path=path, line=line, key="network.credentials") from None


def network_credentials(config: Config) -> tuple:
    """The configured credentials, checked now: each variable set, each file readable, and the
    `cryptography` package there, so a mistake stops lis-tui at start (naming the host and the fix)
    rather than a request later. ConfigError otherwise."""
    if not config.network.credentials:
        return ()
    credentials = credentials_from(config.network.credentials)
    if credentials:
        from isolation.net.ca import require_crypto  # noqa: PLC0415
        from isolation.net.credentials import resolve  # noqa: PLC0415
        from isolation.net.policy import NetworkError  # noqa: PLC0415

        try:
            require_crypto()
            resolve(credentials)
        except NetworkError as exc:
            raise ConfigError(str(exc), key="network.credentials") from None
    return credentials


def save_network_allow(host: str, path: Path | None = None) -> Path:
    """Add `host` to the saved network allow list (the "always allow" answer)."""
    path = Path(path) if path else user_config_path()
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    allow = list(parse_toml(text, path).get("network", {}).get("allow", []))
    return _save([(("network",), "allow", allow + [host] if host not in allow else allow)], path)


def save_model_setup(*, base_url: str | None = None, model: str | None = None,
                     api_key_env: str | None = None, profile: str | None = None,
                     path: Path | None = None) -> Path:
    """Save where the model is: in [model], or in [models.PROFILE] when a profile is named."""
    table = ("models", profile) if profile else ("model",)
    values = {"base_url": base_url, "model": model, "api_key_env": api_key_env}
    return _save([(table, k, v) for k, v in values.items() if v is not None], path)


def _save(items: list[tuple[tuple[str, ...], str, Any]], path: Path | None) -> Path:
    path = Path(path) if path else user_config_path()
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    parse_toml(text, path)  # never rewrite a file we cannot read
    for table, key, value in items:
        section = "model" if table[0] == "models" else table[0]
        value = _checked(f"{section}.{key}", value, path=path, text=text, table=table)
        text = set_toml_value(text, table, key, value)
        _verify(parse_toml(text, path), table, key, value, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def _verify(data: dict, table: tuple[str, ...], key: str, value: Any, path: Path) -> None:
    for part in table:
        data = data.get(part, {})
    if data.get(key) != value:
        header = ".".join(toml_key(p) for p in table)
        raise ConfigError(f"could not update this file safely; add under [{header}]: "
                          f"{toml_key(key)} = {toml_value(value)}", path=path, key=key)


