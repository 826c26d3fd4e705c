"""Credentials the proxy adds to requests for named hosts, so the sandbox never holds them.

Config names where a value comes from, never the value itself:

    [network.credentials."api.github.com"]
    header = "Authorization"
    value = "Bearer ${env:GITHUB_TOKEN}"        # or ${file:~/.config/lis-tui/github-token}

`Credential` is that reference (safe to show, save and log); `resolve` reads the variables and
files in the host process when a sandbox starts, giving `Secret`s that only the proxy holds.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from .addr import is_ip
from .policy import NetworkError, normalize_host, split_host_port

_PLACEHOLDER = re.compile(r"\$\{(env|file):([^}]*)\}")
_HEADER = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VISIBLE = re.compile(r"^[\x20-\x7e\t]*$")  # no CR/LF: a value must not start a header of its own
# Headers that frame the request or route it: a credential there would change what is sent where.
_RESERVED = {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
             "expect", "keep-alive", "proxy-connection", "proxy-authorization"}
KEYS = ("header", "value", "http")
EXAMPLE = ('[network.credentials."api.github.com"]\nheader = "Authorization"\n'
           'value = "Bearer ${env:GITHUB_TOKEN}"')


@dataclass(frozen=True)
class Credential:
    """One host's header, as configured: `value` is a template naming its sources, never a secret."""

    host: str
    """The host name or IP the header is for (exactly; no wildcards)."""
    header: str
    """The header's name, e.g. Authorization."""
    value: str
    """Literal text and `${env:NAME}` / `${file:PATH}` placeholders, e.g. "Bearer ${env:GITHUB_TOKEN}"."""
    port: int | None = None
    """Only this port (None: any)."""
    http: bool = False
    """Also add it to plain http:// requests, which cross the network in the clear."""

    def matches(self, host: str, port: int) -> bool:
        return host == self.host and self.port in (None, port)

    @property
    def files(self) -> list[Path]:
        """The host files the value is read from (`${file:PATH}`), for the sandbox to mask."""
        return [Path(name).expanduser() for kind, name in _PLACEHOLDER.findall(self.value) if kind == "file"]

    @property
    def target(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


@dataclass(frozen=True)
class Secret:
    """A resolved credential; its repr leaves the value out, so no log or traceback shows it."""

    credential: Credential
    value: bytes

    def __repr__(self) -> str:
        return f"Secret({self.credential.target}, {self.credential.header}: ***)"

    @property
    def header(self) -> bytes:
        return self.credential.header.encode("ascii")


def parse_credentials(table: Mapping) -> tuple[Credential, ...]:
    """`[network.credentials]` as Credentials; NetworkError naming the host and the fix if malformed."""
    if not isinstance(table, Mapping):
        raise NetworkError(f"[network.credentials] is a table of hosts, e.g.\n{EXAMPLE}")
    found = []
    for key, entry in table.items():
        found.append(_parse_one(str(key), entry))
    targets = [c.target for c in found]
    for target in targets:
        if targets.count(target) > 1:
            raise NetworkError(f"[network.credentials] names {target} twice; keep one entry per host")
    return tuple(found)


def _parse_one(key: str, entry) -> Credential:
    where = f'[network.credentials."{key}"]'
    try:
        host, port = split_host_port(key.strip(), None)
    except NetworkError as exc:
        raise NetworkError(f"{where}: {exc}") from None
    host = normalize_host(host)
    if not (_NAME.match(host) or is_ip(host)):
        raise NetworkError(f"{where}: name one host exactly (api.github.com, or HOST:PORT); "
                           "wildcards are not allowed for credentials")
    if not isinstance(entry, Mapping):
        raise NetworkError(f"{where} must be a table with header and value, e.g.\n{EXAMPLE}")
    unknown = sorted(set(entry) - set(KEYS))
    if unknown:
        raise NetworkError(f"{where}: unknown key {unknown[0]!r}; the keys are {', '.join(KEYS)}")
    header, value, http = entry.get("header"), entry.get("value"), entry.get("http", False)
    if not isinstance(header, str) or not _HEADER.match(header) or header.lower() in _RESERVED:
        raise NetworkError(f"{where}: header must be a header name such as Authorization or X-Api-Key "
                           f"(not Host or a framing header), got {header!r}")
    if not isinstance(value, str) or not _PLACEHOLDER.search(value):
        raise NetworkError(f"{where}: value must take the secret from ${{env:NAME}} or ${{file:PATH}}, "
                           f'e.g. value = "Bearer ${{env:GITHUB_TOKEN}}"; a secret written in the config '
                           "itself is not accepted (config files get shared and shown)")
    literal = _PLACEHOLDER.sub("", value)
    if not _VISIBLE.fullmatch(literal) or "${" in literal:
        raise NetworkError(f"{where}: value has a malformed placeholder or a control character; "
                           "write ${env:NAME} or ${file:PATH}")
    for kind, name in _PLACEHOLDER.findall(value):
        if kind == "env" and not _ENV_NAME.match(name):
            raise NetworkError(f"{where}: {name!r} is not an environment variable name")
        if kind == "file" and not name.strip():
            raise NetworkError(f"{where}: ${{file:}} needs a path")
    if not isinstance(http, bool):
        raise NetworkError(f"{where}: http must be true or false")
    return Credential(host, header, value, port, http)


def resolve(credentials: Iterable[Credential], env: Mapping[str, str] | None = None) -> tuple[Secret, ...]:
    """Read every credential's variables and files now; NetworkError naming the host and the fix."""
    env = os.environ if env is None else env
    return tuple(Secret(c, _fill(c, env)) for c in credentials)


def _fill(credential: Credential, env: Mapping[str, str]) -> bytes:
    where = f"network credential for {credential.target}"

    def one(match: re.Match) -> str:
        kind, name = match.groups()
        if kind == "env":
            text = env.get(name)
            if not text:
                raise NetworkError(f"{where}: the environment variable {name} is {'empty' if text == '' else 'not set'}; "
                                   f"export {name}=... before starting lis-tui, or remove "
                                   f'[network.credentials."{credential.target}"] from the config')
        else:
            text = _read_secret_file(where, name)
        if not _VISIBLE.fullmatch(text):  # `match` with `$` let a final \n through
            raise NetworkError(f"{where}: the value from {kind}:{name} holds a line break or control "
                               "character, which would corrupt the request; store the bare token")
        return text

    value = _PLACEHOLDER.sub(one, credential.value)
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        raise NetworkError(f"{where}: header values must be ASCII or Latin-1") from None


def _read_secret_file(where: str, name: str) -> str:
    path = Path(name).expanduser()
    if not path.is_absolute():
        raise NetworkError(f"{where}: ${{file:{name}}} must be an absolute path (or start with ~)")
    try:
        with open(path, "rb") as file:
            links = os.fstat(file.fileno()).st_nlink
            data = file.read()
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise NetworkError(f"{where}: the file {path} does not exist; write the token there "
                           "(chmod 600), or fix the path in [network.credentials]") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise NetworkError(f"{where}: cannot read {path} ({exc}); fix its permissions or the path") from None
    if links > 1:
        # The sandbox is masked from this file by its path (layout._masked_files); another name of
        # the same file in a tree it sees (an input folder, a workspace) would show the token.
        raise NetworkError(f"{where}: the file {path} has {links} hard links; the sandbox is kept from "
                           "this name only, and another one in a folder it sees (an input folder, a "
                           "workspace) would show it the token. Remove the other links (`find / -xdev "
                           f"-samefile {path}` lists them), so the token has one name")
    text = text.strip("\r\n")
    if not text:
        raise NetworkError(f"{where}: the file {path} is empty; write the token there")
    return text


class CredentialSet:
    """The secrets one sandbox's proxy may add, looked up by destination."""

    def __init__(self, secrets: Iterable[Secret] = ()) -> None:
        self.secrets = tuple(secrets)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def for_tls(self, host: str, port: int) -> Secret | None:
        """The secret for a CONNECT to host:port (then the proxy terminates TLS), or None."""
        return next((s for s in self.secrets if s.credential.matches(host, port)), None)

    def for_plain(self, host: str, port: int) -> Secret | None:
        """The secret for a plain http:// request, only where the entry says `http = true`."""
        secret = self.for_tls(host, port)
        return secret if secret is not None and secret.credential.http else None
