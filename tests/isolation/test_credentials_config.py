"""`[network.credentials]` read and resolved: shapes that are refused, and where values may come from."""
from __future__ import annotations

import os

import pytest

from isolation.net.credentials import CredentialSet, parse_credentials, resolve
from isolation.net.policy import NetworkError


def _one(entry: dict, host: str = "api.github.com"):
    return parse_credentials({host: entry})


@pytest.mark.parametrize("entry, says", [
    ({"header": "Authorization", "value": "Bearer ghp_literal"}, "${env:NAME} or ${file:PATH}"),
    ({"header": "Host", "value": "${env:X}"}, "header must be a header name"),
    ({"header": "Bad Header", "value": "${env:X}"}, "header must be a header name"),
    ({"header": "Authorization", "value": "${env:1X}"}, "not an environment variable name"),
    ({"header": "Authorization", "value": "a\r\nb ${env:X}"}, "control character"),
    ({"header": "Authorization", "value": "${env:X}", "heder": 1}, "unknown key 'heder'"),
    ({"header": "Authorization", "value": "${env:X}", "http": "yes"}, "http must be true or false"),
])
def test_malformed_entries_are_refused_naming_the_host(entry, says):
    with pytest.raises(NetworkError) as caught:
        _one(entry)
    assert says in str(caught.value) and "api.github.com" in str(caught.value)


def test_wildcards_are_refused():
    with pytest.raises(NetworkError, match="wildcards are not allowed"):
        _one({"header": "Authorization", "value": "${env:X}"}, "*.github.com")


def test_values_come_from_the_environment_and_files(tmp_path):
    token = tmp_path / "token"
    token.write_text("from-a-file\n")
    creds = parse_credentials({"api.github.com": {"header": "Authorization", "value": "Bearer ${env:TOK}"},
                               "pypi.example:8443": {"header": "X-Key", "value": f"${{file:{token}}}"}})
    secrets = resolve(creds, env={"TOK": "from-env"})
    assert [s.value for s in secrets] == [b"Bearer from-env", b"from-a-file"]
    assert "from-env" not in repr(secrets) and "from-a-file" not in repr(secrets)
    found = CredentialSet(secrets)
    assert found.for_tls("api.github.com", 443) is secrets[0]
    assert found.for_tls("pypi.example", 443) is None and found.for_tls("pypi.example", 8443) is secrets[1]
    assert found.for_plain("api.github.com", 80) is None  # http = false: never in the clear
    assert found.for_tls("api.github.com.evil.example", 443) is None


@pytest.mark.parametrize("env, says", [({}, "TOK is not set"), ({"TOK": ""}, "TOK is empty"),
                                       ({"TOK": "a\nb"}, "line break")])
def test_bad_variables_are_clear_errors(env, says):
    creds = _one({"header": "Authorization", "value": "Bearer ${env:TOK}"})
    with pytest.raises(NetworkError) as caught:
        resolve(creds, env=env)
    assert says in str(caught.value) and "api.github.com" in str(caught.value)


def test_a_missing_file_is_a_clear_error(tmp_path):
    creds = _one({"header": "Authorization", "value": f"${{file:{tmp_path}/nope}}"})
    with pytest.raises(NetworkError, match="does not exist; write the token there"):
        resolve(creds, env={})


def test_without_cryptography_credentials_stop_the_start_with_the_pip_line(tmp_path):
    import subprocess
    import sys

    (tmp_path / "c.toml").write_text('[network.credentials."api.github.com"]\nheader = "Authorization"\n'
                                     'value = "Bearer ${env:TOK}"\n')
    code = ("import sys; sys.modules['cryptography'] = None\n"  # as if the extra were not installed
            "from lis_tui.config.settings import ConfigError, load_config, network_credentials\n"
            f"config = load_config(env={{}}, paths=[{str(tmp_path / 'c.toml')!r}])\n"
            "try:\n    network_credentials(config)\nexcept ConfigError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"TOK": "x", "PATH": "/usr/bin"},
                         timeout=60)
    assert "-m pip install " in out.stdout and "[tls]" in out.stdout, out.stdout + out.stderr  # a pip that works here


def test_a_token_file_with_another_hard_link_is_refused_naming_it_and_the_fix(tmp_path):
    token = tmp_path / "token"
    token.write_text("tok\n")
    creds = _one({"header": "Authorization", "value": f"${{file:{token}}}"})
    assert [s.value for s in resolve(creds, env={})] == [b"tok"]
    os.link(token, tmp_path / "elsewhere")
    with pytest.raises(NetworkError) as caught:
        resolve(creds, env={})
    said = str(caught.value)
    assert f"the file {token} has 2 hard links" in said and f"-samefile {token}" in said, said
    assert "api.github.com" in said
