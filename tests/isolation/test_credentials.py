"""Credentials the proxy adds: a loopback HTTPS server stands in for the API and sees the header;
another host never does; nothing inside the sandbox holds the secret; curl and pip inside trust the
sandbox CA; an upstream whose certificate does not verify gets nothing."""
from __future__ import annotations

import os
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from isolation import Sandbox, SandboxError, SandboxSpec
from isolation.net.ca import SandboxCA
from isolation.net.credentials import Credential
from isolation.net import NetworkPolicy
from isolation.net.proxy import default_proxy

from netfixtures import HOST, StaticServer, make_pip_index, make_test_ca

pytestmark = pytest.mark.sandbox

SECRET = "lis-secret-7f3a9b2c41"
# A pattern that matches SECRET without holding it, so the grep's own command line matches nothing.
PATTERN = "lis-secret-7f3a9b2c4[1]"
ENV = "LIS_TEST_API_TOKEN"


@pytest.fixture(scope="module")
def test_ca(tmp_path_factory):
    return make_test_ca(tmp_path_factory.mktemp("test-ca"))


@pytest.fixture(scope="module")
def servers(tmp_path_factory, test_ca):
    """The API (HTTPS, with a credential), another HTTPS host, and two plain HTTP hosts."""
    root = tmp_path_factory.mktemp("www")
    (root / "hello").write_text("hello\n")
    make_pip_index(root, "liscreddemo")
    made = {"api": StaticServer(root, tls=test_ca[1]), "other": StaticServer(root, tls=test_ca[1]),
            "plain": StaticServer(root), "plain_no": StaticServer(root)}
    yield made
    for server in made.values():
        server.close()


@pytest.fixture
def proxy_trust(tmp_path, test_ca, monkeypatch):
    """A CA of this test's own, and an upstream check that also trusts the loopback servers' test CA
    (an option set in this process: nothing a sandbox can set)."""
    proxy = default_proxy()
    before = proxy._ca, proxy._upstream_tls
    proxy.ca = SandboxCA(tmp_path / "sandbox-ca")
    upstream = ssl.create_default_context(cafile=str(test_ca[0]))
    proxy.upstream_tls = upstream
    monkeypatch.setenv(ENV, SECRET)
    yield proxy
    proxy._ca, proxy._upstream_tls = before


def _credentials(servers) -> tuple[Credential, ...]:
    return (Credential(HOST, "Authorization", f"Bearer ${{env:{ENV}}}", servers["api"].port),
            Credential(HOST, "X-Api-Key", f"${{env:{ENV}}}", servers["plain"].port, http=True),
            Credential(HOST, "X-Api-Key", f"${{env:{ENV}}}", servers["plain_no"].port))


def _spec(servers, rootfs: str = "host") -> SandboxSpec:
    return SandboxSpec(rootfs=rootfs, network="on", credentials=_credentials(servers),
                       allow_hosts=tuple(s.hostport for s in servers.values()))


def _sent(server: StaticServer, name: str) -> list[str]:
    return [h.get_all(name) or [] for h in server.headers]


def test_the_api_gets_the_header_and_no_other_host_does(servers, proxy_trust):
    uses = []
    policy = NetworkPolicy("on", allow=[s.hostport for s in servers.values()], on_note=uses.append)
    api, other = servers["api"], servers["other"]
    for s in servers.values():
        s.headers.clear()
    with Sandbox(_spec(servers), network=policy) as sb:
        # Two requests on one kept-alive connection, the first with a header of the same name the
        # sandbox made up: each gets the credential, once. No -k: curl must trust the sandbox CA.
        r = sb.exec(f"curl -sS -H 'Authorization: Bearer forged' {api.url}/echo-headers {api.url}/hello", timeout=60)
        o = sb.exec(f"curl -sSk -H 'Authorization: Bearer mine' {other.url}/echo-headers", timeout=60)
        p = sb.exec(f"curl -sS {servers['plain'].url}/hello {servers['plain_no'].url}/hello", timeout=60)
        # Without the variables too: the system bundle itself was replaced by one that has our CA.
        bare = sb.exec(f'env -i PATH="$PATH" HTTPS_PROXY="$HTTPS_PROXY" curl -sS {api.url}/hello', timeout=60)
        records = sb.network.records()
    assert r.exit_code == 0, r.stderr
    assert r.stdout.count(f"Authorization: Bearer {SECRET}") == 1 and "forged" not in r.stdout
    assert _sent(api, "Authorization") == [[f"Bearer {SECRET}"]] * 3
    assert o.exit_code == 0 and SECRET not in o.stdout and "Bearer mine" in o.stdout
    assert _sent(other, "Authorization") == [["Bearer mine"]]
    assert p.exit_code == 0, p.stderr
    assert bare.exit_code == 0 and bare.stdout == "hello\n", bare.stderr
    assert _sent(servers["plain"], "X-Api-Key") == [[SECRET]]
    assert _sent(servers["plain_no"], "X-Api-Key") == [[]]  # http = false: not sent in the clear
    assert [(u.host, u.port, u.method, u.header) for u in uses] == [
        (HOST, api.port, "GET", "Authorization")] * 2 + [(HOST, servers["plain"].port, "GET", "X-Api-Key"),
                                                         (HOST, api.port, "GET", "Authorization")]
    by_port = {(rec["port"], rec["method"]): rec["credential"] for rec in records}
    assert by_port[(api.port, "CONNECT")] == "Authorization"
    assert by_port[(other.port, "CONNECT")] == ""  # a plain tunnel: TLS end to end
    assert SECRET not in repr(records) and all(SECRET not in str(u) for u in uses)


def test_nothing_inside_holds_the_secret_or_the_ca_key(servers, proxy_trust, debian_rootfs):
    key_line = proxy_trust.ca._key_path.read_text().splitlines()[1]
    key_pattern = key_line[:-1] + f"[{key_line[-1]}]"
    spec = _spec(servers, str(debian_rootfs.rootfs.path))
    with Sandbox(spec) as sb:
        r = sb.exec(f"curl -sS {servers['api'].url}/echo-headers", timeout=60)
        assert r.exit_code == 0 and r.stdout.count(SECRET) == 1, r.stderr  # it was in use just now
        sleeper = sb.popen(["sleep", "30"])
        try:
            found = sb.exec(f"grep -rlsI --devices=skip -e '{PATTERN}' -e '{key_pattern}' / "
                            "--exclude-dir=proc --exclude-dir=sys; "
                            f"cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline | grep -ac -e '{PATTERN}' -e '{key_pattern}'; "
                            "env | grep -c SSL_CERT_FILE; ls /proc | grep -c '^[0-9]'", timeout=120)
        finally:
            sleeper.kill()
            sleeper.wait()
    lines = found.stdout.split()
    assert lines[:2] == ["0", "1"], found.stdout + found.stderr  # no file, no environment; the CA is set
    assert int(lines[2]) >= 3  # the environments read were really there (init, the shell, sleep)
    assert stat.S_IMODE(os.stat(proxy_trust.ca._key_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(proxy_trust.ca.directory).st_mode) == 0o700


def test_pip_inside_trusts_the_sandbox_ca(servers, proxy_trust):
    api = servers["api"]
    api.headers.clear()
    with Sandbox(_spec(servers)) as sb:  # no --trusted-host, no --cert: PIP_CERT does it
        r = sb.exec(f"python3 -m pip download -q --no-cache-dir --disable-pip-version-check --no-deps "
                    f"-d /tmp/dl --index-url {api.url}/simple/ liscreddemo && ls /tmp/dl", timeout=120)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "liscreddemo-1.0-py3-none-any.whl" in r.stdout
    assert len(api.headers) >= 2 and _sent(api, "Authorization") == [[f"Bearer {SECRET}"]] * len(api.headers)


def test_an_upstream_that_fails_verification_gets_nothing(servers, proxy_trust):
    proxy_trust.upstream_tls = ssl.create_default_context()  # the system store: the test CA is unknown
    api = servers["api"]
    api.requests.clear()
    with Sandbox(_spec(servers)) as sb:
        r = sb.exec(f"curl -sS {api.url}/echo-headers", timeout=60)
        records = sb.network.records()
    assert r.exit_code != 0 and "502" in r.stderr, r.stderr
    assert api.requests == []  # the server saw no request, so no credential
    record = records[-1]
    assert record["status"] == 502 and "certificate verify failed" in record["error"], record


def test_a_missing_variable_stops_the_start_naming_host_and_fix(servers, proxy_trust, monkeypatch):
    monkeypatch.delenv(ENV)
    with pytest.raises(SandboxError) as caught:
        Sandbox(_spec(servers)).start()
    assert f"{HOST}:{servers['api'].port}" in str(caught.value) and f"export {ENV}=" in str(caught.value)


def test_the_cli_refuses_to_start_with_a_missing_variable(tmp_path):
    config = tmp_path / "config" / "lis-tui"
    config.mkdir(parents=True)
    (config / "config.toml").write_text('[network.credentials."api.github.com"]\nheader = "Authorization"\n'
                                        f'value = "Bearer ${{env:{ENV}_MISSING}}"\n')
    env = {k: v for k, v in os.environ.items() if k != f"{ENV}_MISSING"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    r = subprocess.run([sys.executable, "-c", "import sys; from lis_tui.cli import main; sys.exit(main())", "exec", "--", "true"], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "api.github.com" in r.stderr and f"export {ENV}_MISSING=" in r.stderr
    assert Path(tmp_path).joinpath("lis-output").exists() is False


def test_run_logs_each_request_that_got_a_credential_never_the_value(tmp_path, servers):
    from fakes.openai_server import FakeOpenAI, call, reply, submit

    plain = servers["plain"]
    plain.headers.clear()
    (tmp_path / "lis-tui.toml").write_text(
        f'[model]\nmodel = "m"\n[network]\nmode = "on"\nallow = ["{plain.hostport}"]\n'
        f'[network.credentials."{plain.hostport}"]\nheader = "X-Api-Key"\nvalue = "${{env:{ENV}}}"\nhttp = true\n')
    from lis_tui.config import trust  # noqa: PLC0415

    trust.trust(tmp_path, env={"XDG_STATE_HOME": str(tmp_path / "state")})  # the person wrote it
    command = f"curl -sS {plain.url}/hello {plain.url}/hello"
    env = {**os.environ, ENV: SECRET, "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "XDG_STATE_HOME": str(tmp_path / "state")}
    with FakeOpenAI([reply(tool_calls=[call("execute_bash", {"command": command})]), submit()]) as server:
        done = subprocess.run([sys.executable, "-c", "import sys; from lis_tui.cli import main; sys.exit(main())",
                               "run", "--base-url", server.base_url, "--rootfs", "host", "--output-dir", "out", "go"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if "credential added" in line]
    assert lines == [f"      network: credential added for {HOST} (X-Api-Key, GET)"] * 2, done.stderr
    assert _sent(plain, "X-Api-Key") == [[SECRET]] * 2
    saved = "".join(p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert SECRET not in done.stderr + done.stdout + saved


# Raw HTTP inside the tunnel, from python in the sandbox: CONNECT through the proxy, TLS with the
# sandbox's bundle, then the bytes given, and what comes back.
RAW_CLIENT = r'''
import os, socket, ssl, sys
host, port, payload = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode().decode("unicode_escape").encode()
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
assert s.recv(4096).startswith(b"HTTP/1.1 200")
t = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"]).wrap_socket(s, server_hostname=host)
t.sendall(payload)
data = b""
t.settimeout(5)
try:
    while chunk := t.recv(65536):
        data += chunk
except (socket.timeout, ssl.SSLError, OSError):
    pass
sys.stdout.write(data.decode("latin-1"))
'''


@pytest.mark.parametrize("payload, status", [
    ("GET /echo-headers HTTP/1.1\\r\\nHost: elsewhere.example\\r\\n\\r\\n", "421"),
    ("POST /x HTTP/1.1\\r\\nHost: {host}\\r\\nContent-Length: 4\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\n", "400"),
    ("GET http://{host}/echo-headers HTTP/1.1\\r\\nHost: {host}\\r\\n\\r\\n", "400"),
    # A bare LF ends the head for a lenient server (Python's, nginx): the header the proxy adds
    # after it would land in the next request, or in a body the server stores and hands back.
    ("GET /hello HTTP/1.1\\r\\nHost: {host}\\r\\nX-A: a\\nContent-Length: 0\\n\\n"
     "GET /smuggled HTTP/1.1\\nHost: {host}\\nX-B: b\\r\\n\\r\\n", "400"),
    ("GET /hello HTTP/1.1\\r\\nHost: {host}\\r\\nX-A: a\\rX-B: b\\r\\n\\r\\n", "400"),
    ("GET /hello HTTP/1.1\\r\\nHost: {host}\\r\\nX-A: a\\x00b\\r\\n\\r\\n", "400"),
    ("GET /hello\\nX-A:b HTTP/1.1\\r\\nHost: {host}\\r\\n\\r\\n", "400"),
    ("GET /hello HTTP/1.1\\n\\r\\nHost: {host}\\r\\n\\r\\n", "400"),
])
def test_requests_the_proxy_cannot_read_safely_are_refused_unsent(servers, proxy_trust, payload, status):
    api = servers["api"]
    api.requests.clear()
    with Sandbox(_spec(servers)) as sb:
        sb.write_file("/tmp/raw.py", RAW_CLIENT.encode())
        r = sb.exec(["python3", "/tmp/raw.py", HOST, str(api.port), payload.format(host=api.hostport)], timeout=60)
    assert r.stdout.startswith(f"HTTP/1.1 {status} "), r.stdout + r.stderr
    assert api.requests == [] and SECRET not in r.stdout


class _RawSink:
    """A TLS server that answers nothing and keeps every byte it is sent: what a lenient server
    would parse, seen exactly as the proxy wrote it."""

    def __init__(self, context: ssl.SSLContext) -> None:
        import socket
        import threading

        self._listener = socket.create_server((HOST, 0))
        self.port, self.data = self._listener.getsockname()[1], b""
        self._context = context
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._listener.settimeout(30)
        try:
            conn, _ = self._listener.accept()
            conn.settimeout(15)  # the proxy ends the connection once it refuses; this is a bound
            with self._context.wrap_socket(conn, server_side=True) as tls:
                while chunk := tls.recv(65536):
                    self.data += chunk
        except OSError:  # a timeout included: the test then sees what came, or nothing
            pass

    def close(self) -> bytes:
        self._thread.join(30)
        self._listener.close()
        return self.data


def test_a_bare_lf_in_a_chunked_trailer_is_refused_before_the_next_head(proxy_trust, test_ca):
    """The trailer would end the message early for a lenient server, and the smuggled head's
    Content-Length would take the proxy's next head, credential and all, as its body. The
    server here records bytes and answers nothing, so the proxy's part alone is seen."""
    sink = _RawSink(test_ca[1])
    where = f"{HOST}:{sink.port}"
    first = (f"POST /a HTTP/1.1\\r\\nHost: {where}\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
             f"0\\r\\nX-T: a\\n\\nPOST /store HTTP/1.1\\nHost: {where}\\nContent-Length: 300\\r\\n\\r\\n")
    then = f"GET /b HTTP/1.1\\r\\nHost: {where}\\r\\n\\r\\n"
    spec = SandboxSpec(rootfs="host", network="on", allow_hosts=(where,),
                       credentials=(Credential(HOST, "Authorization", f"Bearer ${{env:{ENV}}}", sink.port),))
    try:
        with Sandbox(spec) as sb:
            sb.write_file("/tmp/raw.py", RAW_CLIENT.encode())
            r = sb.exec(["python3", "/tmp/raw.py", HOST, str(sink.port), first + then], timeout=60)
    finally:
        seen = sink.close()
    assert seen.startswith(b"POST /a HTTP/1.1\r\n") and f"Bearer {SECRET}".encode() in seen  # it ran
    assert seen.count(SECRET.encode()) == 1 and b"GET /b" not in seen, seen  # no next head after it
    assert r.stdout.startswith("HTTP/1.1 400 "), r.stdout + r.stderr


def test_a_bare_lf_in_a_plain_request_is_refused_unsent(servers, proxy_trust):
    """The same for plain http:// with `http = true`: nothing reaches the server."""
    plain = servers["plain"]
    plain.requests.clear()
    raw = (f"GET http://{plain.hostport}/hello HTTP/1.1\\r\\nX-A: a\\nContent-Length: 0\\n\\n"
           f"GET /smuggled HTTP/1.1\\nX-B: b\\r\\n\\r\\n")
    client = ("import socket, sys\n"
              "s = socket.create_connection(('127.0.0.1', 3128))\n"
              "s.sendall(sys.argv[1].encode().decode('unicode_escape').encode())\n"
              "sys.stdout.write(s.recv(65536).decode('latin-1'))\n")
    with Sandbox(_spec(servers)) as sb:
        ok = sb.exec(f"curl -sS {plain.url}/hello", timeout=60)
        r = sb.exec(["python3", "-c", client, raw], timeout=60)
    assert ok.stdout == "hello\n", ok.stderr  # the way through works: the refusal is the proxy's
    assert r.stdout.startswith("HTTP/1.1 400 "), r.stdout + r.stderr
    assert plain.requests == ["/hello"]


def test_pipelined_requests_each_get_the_credential(servers, proxy_trust):
    api = servers["api"]
    api.headers.clear()
    one = f"GET /echo-headers HTTP/1.1\\r\\nHost: {api.hostport}\\r\\nAuthorization: mine\\r\\n\\r\\n"
    last = f"GET /echo-headers HTTP/1.1\\r\\nHost: {api.hostport}\\r\\nConnection: close\\r\\n\\r\\n"
    with Sandbox(_spec(servers)) as sb:
        sb.write_file("/tmp/raw.py", RAW_CLIENT.encode())
        r = sb.exec(["python3", "/tmp/raw.py", HOST, str(api.port), one + one + last], timeout=60)
    assert r.stdout.count("HTTP/1.0 200") + r.stdout.count("HTTP/1.1 200") == 3, r.stdout + r.stderr
    assert r.stdout.count(f"Authorization: Bearer {SECRET}") == 3 and "mine" not in r.stdout


def test_a_token_file_in_a_tree_the_sandbox_sees_is_masked_inside(servers, proxy_trust, tmp_path):
    """`${file:PATH}` in the workspace or an input folder (or /etc under the host rootfs): the
    sandbox runs as the user's uid, so it could read the file the proxy reads, unless masked."""
    work, inputs = tmp_path / "ws", tmp_path / "in"
    for folder in (work, inputs):
        (folder / "keys").mkdir(parents=True)
        (folder / "keys" / "token").write_text(SECRET + "\n")
        (folder / "keys" / "other").write_text("readable\n")
    api = servers["api"]
    api.headers.clear()
    credentials = (Credential(HOST, "Authorization", f"Bearer ${{file:{work}/keys/token}}", api.port),
                   Credential(HOST, "X-Api-Key", f"${{file:{inputs}/keys/token}}", servers["other"].port))
    spec = SandboxSpec(rootfs="host", network="on", credentials=credentials, workspace=str(work),
                       input_dir=str(inputs), allow_hosts=(api.hostport, servers["other"].hostport))
    with Sandbox(spec) as sb:
        seen = sb.exec(f"ls /testbed/keys /agent/input/keys; cat /testbed/keys/other; "
                       f"cat /testbed/keys/token /agent/input/keys/token {work}/keys/token; "  # the project's own path too
                       f"grep -r '{PATTERN}' /testbed /agent {work}; curl -sS {api.url}/echo-headers", timeout=60)
        assert sb.spec.places.working == str(work)
    assert seen.stdout.count("token") == 2 and "readable" in seen.stdout  # there, and the rest reads
    assert seen.stdout.count(SECRET) == 1 and f"Authorization: Bearer {SECRET}" in seen.stdout, seen.stdout
    assert _sent(api, "Authorization") == [[f"Bearer {SECRET}"]]  # the proxy still read it


def test_a_hard_link_to_the_token_file_in_a_tree_the_sandbox_sees_is_refused(servers, proxy_trust, tmp_path):
    """The mask covers the token file's path; a hard link is the same file under another name, in
    the input folder here, where no mask reaches. Such a file is refused at the start, naming it."""
    keys, inputs = tmp_path / "keys", tmp_path / "in"
    keys.mkdir()
    inputs.mkdir()
    (keys / "token").write_text(SECRET + "\n")
    os.link(keys / "token", inputs / "notes.txt")
    api = servers["api"]
    spec = SandboxSpec(rootfs="host", network="on", input_dir=str(inputs), allow_hosts=(api.hostport,),
                       credentials=(Credential(HOST, "Authorization", f"Bearer ${{file:{keys}/token}}", api.port),))
    try:
        sandbox = Sandbox(spec).start()
    except SandboxError as exc:
        said = str(exc)
    else:
        try:
            leaked = sandbox.exec("cat /testbed/input/notes.txt", timeout=60).stdout
        finally:
            sandbox.close()
        pytest.fail(f"the sandbox started, and reads the token through the link: {SECRET in leaked}")
    assert f"the file {keys / 'token'} has 2 hard links" in said and "-samefile" in said, said
    assert f"{HOST}:{api.port}" in said and SECRET not in said
