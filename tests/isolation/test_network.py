"""The egress proxy and its policy, with real clients inside real sandboxes and servers on host loopback.

Every server listens on 127.0.0.2 (loopback, so the policy refuses it unless that exact host:port is
allowed: tests allow-list it, or name it in `host_services` where the mode must still decide).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import os
import subprocess
import textwrap
import threading
import time
from dataclasses import dataclass

import pytest

from isolation import Sandbox, SandboxError, SandboxSpec
from isolation.net.proxy import PROXY_PORT
from isolation.net import (Decision, EgressProxy, HostRule, NetworkError, NetworkPolicy, ProxyHandle, QuestionAnswered,
                           is_internal)

from netfixtures import HOST, StaticServer, make_apt_repo, make_git_repo, make_pip_index, make_test_ca

pytestmark = pytest.mark.sandbox

BLOB = os.urandom(1 << 20)


# ---- servers and sandboxes -------------------------------------------------------------------


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    (root / "hello.txt").write_text("hello\n")
    (root / "blob.bin").write_bytes(BLOB)
    make_pip_index(root)
    make_git_repo(root)
    make_apt_repo(root / "apt")
    server = StaticServer(root)
    yield server
    server.close()


@pytest.fixture(scope="module")
def tls_web(tmp_path_factory):
    root = tmp_path_factory.mktemp("tls")
    (root / "hello.txt").write_text("hello over tls\n")
    make_pip_index(root)
    ca, context = make_test_ca(root / "ca")
    server = StaticServer(root, tls=context)
    server.ca = ca.read_bytes()
    yield server
    server.close()


@pytest.fixture(scope="module")
def proxy():
    egress = EgressProxy(header_timeout=1.0, connect_timeout=5.0)
    yield egress
    egress.close()


@dataclass
class Net:
    sb: Sandbox
    handle: ProxyHandle
    env: dict

    def run(self, command, timeout: float = 60):
        return self.sb.exec(command, env=self.env, timeout=timeout)

    def fetch(self, url: str, *curl_args: str) -> str:
        """The body curl got (403 refusals included), or `ERR: ...` when curl itself failed."""
        r = self.run(["curl", "-sS", "--max-time", "20", *curl_args, url])
        return r.stdout if r.exit_code == 0 else f"ERR {r.exit_code}: {r.stderr}{r.stdout}"


@pytest.fixture
def connect(proxy, sandbox):
    """attach(mode, **policy) -> Net: the sandbox fixture with a proxy port under that policy."""
    handles = []

    def attach(mode: str = "on", egress: EgressProxy | None = None, **policy) -> Net:
        handle = (egress or proxy).attach(sandbox, NetworkPolicy(mode, **policy))
        handles.append(handle)
        return Net(sandbox, handle, handle.environment(sandbox.env))

    yield attach
    for handle in handles:
        handle.detach()


# ---- off, on, and the host's own services ----------------------------------------------------


def test_without_the_proxy_nothing_outside_the_sandbox_is_reachable(sandbox, web):
    before = len(web.requests)
    r = sandbox.exec(f"curl -sS --max-time 5 --noproxy '*' {web.url}/hello.txt; "
                     "cat /proc/net/route | wc -l; awk -F: 'NR > 2 {print $1}' /proc/net/dev")
    assert "Failed to connect" in r.stderr or "Couldn't connect" in r.stderr
    assert r.stdout.split() == ["1", "lo"]  # a header line and no route; loopback only
    assert len(web.requests) == before


def test_dns_inside_resolves_nothing(sandbox):
    r = sandbox.exec("getent hosts deb.debian.org; echo rc=$?; python3 -c \"import socket\n"
                     "try: socket.getaddrinfo('pypi.org', 443)\nexcept OSError as e: print('gaierror', e)\"",
                     timeout=30)
    assert "rc=2" in r.stdout and "gaierror" in r.stdout


def test_off_refuses_even_allow_listed_hosts_and_no_request_leaves(connect, web):
    before = len(web.requests)
    net = connect("off", allow=[web.hostport])
    body = net.fetch(f"{web.url}/hello.txt")
    assert "refused because the sandbox's network is off" in body and "--network on" in body
    assert "403" in net.fetch(f"{web.url}/hello.txt", "-o", "/dev/null", "-w", "%{http_code}")
    assert len(web.requests) == before
    assert [(r.decision, r.decided_by) for r in net.handle.log] == [("deny", "mode")] * 2


def test_on_curl_http_and_https_through_connect(connect, web, tls_web):
    net = connect("on", allow=[web.hostport, tls_web.hostport])
    net.sb.write_file("/tmp/ca.pem", tls_web.ca)
    assert net.fetch(f"{web.url}/hello.txt") == "hello\n"
    assert net.fetch(f"{tls_web.url}/hello.txt", "--cacert", "/tmp/ca.pem") == "hello over tls\n"
    http, https = list(net.handle.log)
    assert (http.method, http.decision, http.decided_by, http.status, http.address) == \
        ("GET", "allow", "allow-list", 200, HOST)
    assert (https.method, https.status, https.port) == ("CONNECT", 200, tls_web.port)
    assert http.bytes_up > 0 and http.bytes_down > len("hello\n") and https.bytes_down > 500


def test_loopback_service_is_refused_under_on_unless_exactly_allow_listed(connect, web):
    net = connect("on", allow=["*", f"{HOST}:{web.port + 1}", f"*.{HOST}:{web.port}"])
    body = net.fetch(f"{web.url}/hello.txt")
    assert f"resolves to {HOST}" in body and f"--allow-host {HOST}:{web.port}" in body
    assert net.handle.log[-1].decided_by == "host-internal"
    net.handle.policy.add_allow(f"{HOST}:{web.port}")
    assert net.fetch(f"{web.url}/hello.txt") == "hello\n"


def test_python_urllib_uses_the_proxy(connect, web):
    net = connect("on", allow=[web.hostport])
    script = f"import urllib.request; print(urllib.request.urlopen('{web.url}/hello.txt', timeout=20).read())"
    r = net.run(["python3", "-c", script])
    assert r.stdout == "b'hello\\n'\n", r.stderr


def test_pip_download_from_a_loopback_index(connect, web):
    net = connect("on", allow=[web.hostport])
    r = net.run(["python3", "-m", "pip", "download", "--no-cache-dir", "--disable-pip-version-check",
                 "--index-url", f"{web.url}/simple/", "--trusted-host", HOST, "--no-deps", "-d", "/tmp/dl",
                 "lisdemo"], timeout=120)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert net.run("ls /tmp/dl").stdout.split() == ["lisdemo-1.0-py3-none-any.whl"]


def _pip_download(net: Net, index: str, ca: bytes):
    net.sb.write_file("/tmp/ca.pem", ca)
    return net.run(["python3", "-m", "pip", "download", "--no-cache-dir", "--disable-pip-version-check",
                    "--retries", "1", "--cert", "/tmp/ca.pem", "--index-url", f"{index}/simple/",
                    "--no-deps", "-d", "/tmp/dl", "lisdemo"], timeout=120)


def test_pip_over_https_works_and_sees_why_it_was_refused(connect, tls_web):
    net = connect("on", allow=[tls_web.hostport])
    r = _pip_download(net, tls_web.url, tls_web.ca)
    assert r.exit_code == 0 and "Saved /tmp/dl/lisdemo-1.0-py3-none-any.whl" in r.stdout, r.stderr
    net.handle.set_mode("ask")  # with no one to answer; and the allow list no longer names it
    net.handle.policy.allow.clear()
    net.handle.policy.host_services.append(HostRule.parse(tls_web.hostport))  # reachable, if allowed
    r = _pip_download(net, tls_web.url, tls_web.ca)
    assert r.exit_code != 0 and f"403 Network access to {HOST}:{tls_web.port} was refused because no one is " \
        f"there to approve it (network mode `ask` without a person); the user can allow it with " \
        f"`--allow-host {HOST}`" in r.stderr


def test_git_clone_over_http(connect, web):
    net = connect("on", allow=[web.hostport])
    assert "http.proxy=http://127.0.0.1:" in net.run("git config --list").stdout
    r = net.run(f"git clone -q {web.url}/demo.git /tmp/demo && cat /tmp/demo/README", timeout=120)
    assert r.stdout == "hello from a loopback git server\n", r.stderr


def test_git_clone_refused_says_so(connect, web):
    net = connect("off")
    r = net.run(f"git clone -q {web.url}/demo.git /tmp/demo", timeout=60)
    assert r.exit_code != 0 and "403" in r.stderr


def test_apt_get_update_from_a_loopback_mirror(debian_rootfs, proxy, web):
    spec = SandboxSpec(rootfs=str(debian_rootfs.rootfs.path))
    with Sandbox(spec) as sb:
        handle = proxy.attach(sb, NetworkPolicy("on", allow=[web.hostport]))
        try:
            sb.write_file("/etc/apt/sources.list.d/lis.list", f"deb [trusted=yes] {web.url}/apt/ ./\n".encode())
            sb.exec("rm -f /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list")
            r = sb.exec("apt-get update -o Debug::NoLocking=1 && apt-cache policy lis-demo",
                        env=handle.environment(sb.env), timeout=120)
        finally:
            handle.detach()
    assert r.exit_code == 0 and "Candidate: 1.0" in r.stdout, r.stdout + r.stderr


# ---- ask -------------------------------------------------------------------------------------


def _asker(answer, asked: list):
    def decide(request):
        asked.append(request)
        return answer
    return decide


def test_ask_allow_once_asks_for_every_request(connect, web):
    asked = []
    net = connect("ask", decide=_asker("allow_once", asked), host_services=[web.hostport])
    assert [net.fetch(f"{web.url}/hello.txt") for _ in range(2)] == ["hello\n"] * 2
    assert [(a.host, a.port, a.method) for a in asked] == [(HOST, web.port, "GET")] * 2
    assert [(r.decided_by, r.answer) for r in net.handle.log] == [("user", "allow_once")] * 2


def test_ask_allow_session_asks_once(connect, web):
    asked = []
    net = connect("ask", decide=_asker("allow_session", asked), host_services=[web.hostport])
    assert [net.fetch(f"{web.url}/hello.txt") for _ in range(3)] == ["hello\n"] * 3
    assert len(asked) == 1 and [r.decided_by for r in net.handle.log] == ["user", "session", "session"]


def test_ask_allow_always_is_saved_through_the_callback(connect, web):
    asked, saved, notes = [], [], []
    net = connect("ask", decide=_asker("allow_always", asked), host_services=[web.hostport],
                  on_allow_always=lambda rule: saved.append(rule) or "/cfg/config.toml", on_note=notes.append)
    assert [net.fetch(f"{web.url}/hello.txt") for _ in range(2)] == ["hello\n"] * 2
    assert len(asked) == 1 and saved == [HOST]  # the host, as the dialog says: every port
    # the answer is noted, with who gave it (a callback that returned the answer alone) and where it went
    assert notes == [QuestionAnswered(HOST, web.port, "allow_always", "approver",
                                      saved="/cfg/config.toml", sandbox=notes[0].sandbox)]


def test_a_session_approval_is_for_its_host_and_port_alone():
    """"Allow for this session" of example.com:443 allowed ports 22, 25 and 6379 of it too."""
    asked = []
    policy = NetworkPolicy("ask", decide=_asker("allow_session", asked))
    decision = asyncio.run(policy.decide("Example.com", 443))
    assert decision == Decision(True, "user", "allow_session") and len(asked) == 1
    assert policy.check("example.com", 443) == Decision(True, "session")
    for port in (22, 25, 80, 6379):
        assert policy.check("example.com", port) is None  # asked again, not allowed
    assert not policy.may_reach_internal("example.com", 443)  # nor a host-internal address it resolves to


def test_a_session_approval_through_the_proxy_opens_no_other_port(connect, web, tmp_path):
    """The model had one port approved and tries another service of the same host: the person
    is asked again (and says no here), and it gets nothing."""
    (tmp_path / "secret.txt").write_text("other service\n")
    other = StaticServer(tmp_path)
    asked = []

    def decide(request):
        asked.append(request.port)
        return "allow_session" if request.port == web.port else "deny"

    try:
        net = connect("ask", decide=decide, host_services=[web.hostport, other.hostport])
        assert net.fetch(f"{web.url}/hello.txt") == "hello\n"
        refused = net.fetch(f"{other.url}/secret.txt")
        again = net.fetch(f"{web.url}/hello.txt")
    finally:
        other.close()
    assert "was refused by the user" in refused and not other.requests  # the attack was made, and met a no
    assert again == "hello\n" and asked == [web.port, other.port]  # the approved port asked once


def test_ask_deny_and_no_answer_and_no_person_are_refusals_that_say_who(connect, web):
    before = len(web.requests)
    net = connect("ask", decide=_asker("deny", []), host_services=[web.hostport])
    assert "was refused by the user" in net.fetch(f"{web.url}/hello.txt")
    net.handle.detach()
    never = concurrent.futures.Future()
    net = connect("ask", decide=lambda request: never, host_services=[web.hostport], ask_timeout=0.5)
    assert "did not answer in time" in net.fetch(f"{web.url}/hello.txt")
    net.handle.detach()
    net = connect("ask", host_services=[web.hostport])
    assert "no one is there to approve it" in net.fetch(f"{web.url}/hello.txt")
    assert len(web.requests) == before


def test_ask_callbacks_may_be_coroutines_or_return_futures_and_share_one_question(connect, web):
    asked = []

    async def decide(request):
        asked.append(request)
        for _ in range(200):  # until all ten wait on this one question (a loaded machine is slow)
            if sum(q.waiting for q in net.handle.policy._pending.values()) == 10:
                break
            await asyncio.sleep(0.05)
        return "allow_once"

    net = connect("ask", decide=decide, host_services=[web.hostport])
    r = net.run(f"seq 10 | xargs -P 10 -I{{}} curl -sS --max-time 20 {web.url}/hello.txt")
    assert r.stdout == "hello\n" * 10 and len(asked) == 1
    net.handle.detach()

    def later(request):
        future = concurrent.futures.Future()
        threading.Timer(0.1, future.set_result, ["allow_once"]).start()
        return future

    net = connect("ask", decide=later, host_services=[web.hostport])
    assert net.fetch(f"{web.url}/hello.txt") == "hello\n"


# ---- rules -----------------------------------------------------------------------------------


def test_deny_list_beats_allow_list(connect, web):
    net = connect("on", allow=[web.hostport, "*"], deny=[f"{HOST}:{web.port}"])
    assert "deny list" in net.fetch(f"{web.url}/hello.txt")
    net.handle.detach()
    net = connect("on", allow=[web.hostport], deny=["*:25"])
    assert net.fetch(f"{web.url}/hello.txt") == "hello\n"
    r = net.run(f"curl -sS -p --max-time 5 -o /dev/null -w '%{{http_connect}}' http://{HOST}:25/")
    assert r.stdout == "403" and net.handle.log[-1].decided_by == "deny-list"


def test_host_rules_parse_and_match():
    rule = HostRule.parse("*.Example.COM.:443")
    assert (rule.host, rule.port, rule.exact) == ("*.example.com", 443, False)
    assert rule.matches("a.b.example.com", 443) and not rule.matches("example.com", 443)
    assert not rule.matches("a.example.com", 80)
    assert HostRule.parse("[::1]:8080").matches("::1", 8080) and HostRule.parse("[::1]:8080").exact
    assert HostRule.parse("*").matches("anything", 1) and not HostRule.parse("*").exact
    for bad in ("http://x", "a b", "x:99999", "x:", "*x.com"):
        with pytest.raises(NetworkError, match="bad"):
            HostRule.parse(bad)


def test_refusals_are_said_once_each_and_a_flood_of_them_is_not_listed():
    """A model trying port after port must not grow the transcript and the trajectory without end."""
    from isolation.net import Refusal
    from isolation.net.policy import MAX_REFUSALS_SAID

    notes = []
    policy = NetworkPolicy("on", on_note=notes.append)
    for port in [1, 1, 2, *range(3, 3 + 2 * MAX_REFUSALS_SAID)]:
        policy.refused(Refusal("10.0.0.1", port, "host-internal", f"port {port}"), "10.0.0.1")
    assert [str(n) for n in notes[:2]] == ["port 1", "port 2"] and len(notes) == MAX_REFUSALS_SAID + 1
    assert f"more than {MAX_REFUSALS_SAID} refusals" in str(notes[-1])


def test_policy_order_and_modes():
    policy = NetworkPolicy("on", allow=["*.ok.test"], deny=["bad.ok.test"])
    assert policy.check("bad.ok.test", 443).by == "deny-list"
    assert policy.check("x.ok.test", 1).by == "allow-list"
    assert policy.check("other.test", 443).by == "mode"
    policy.set_mode("ask")
    assert policy.check("other.test", 443).by == "headless"
    policy.set_mode("off")
    assert not policy.check("x.ok.test", 1).allowed
    with pytest.raises(NetworkError, match="one of off, ask, on"):
        policy.set_mode("maybe")


def test_internal_addresses():
    for address in ("127.0.0.2", "10.1.2.3", "192.168.1.1", "172.16.0.1", "169.254.169.254", "100.64.0.1",
                    "224.0.0.251", "0.0.0.0", "::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1"):
        assert is_internal(address), address
    for address in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"):
        assert not is_internal(address), address


def test_names_are_resolved_once_and_checked_on_the_address_used(sandbox, web):
    # A name that resolves to loopback (as a rebinding DNS would answer) is refused under `on`
    # and `*.suffix` does not open it; only the exact name:port does.
    names = {"rebind.lis.test": [HOST], "mixed.lis.test": ["8.8.8.8", HOST]}
    egress = EgressProxy(resolve=lambda host, port: names[host])
    try:
        policy = NetworkPolicy("on", allow=["*.lis.test"])
        handle = egress.attach(sandbox, policy)
        env = handle.environment(sandbox.env)
        r = sandbox.exec(f"curl -sS --max-time 10 http://rebind.lis.test:{web.port}/hello.txt", env=env)
        assert f"resolves to {HOST}" in r.stdout
        policy.add_allow(f"rebind.lis.test:{web.port}")
        r = sandbox.exec(f"curl -sS --max-time 10 http://rebind.lis.test:{web.port}/hello.txt", env=env)
        assert r.stdout == "hello\n"
        assert egress.run(egress.addresses_for("mixed.lis.test", 80, policy)) == ["8.8.8.8"]
    finally:
        egress.close()


# ---- refusals that say why and how, and questions about internal addresses -------------------


def _named(names: dict) -> EgressProxy:
    """A proxy whose DNS is `names`, as a package mirror on 10.x or 203.0.113.x would answer."""
    return EgressProxy(header_timeout=1.0, connect_timeout=5.0, resolve=lambda host, port: names[host])


def test_an_allowed_request_that_fails_upstream_says_why_once(connect):
    """A name that does not resolve, and a port where nothing listens: not a bare "response 502" but
    why, in the status line (curl -v, pip) and the body, and said once to the person and the model."""
    import socket

    def resolve(host, port):
        if host == "nosuch.lis.test":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [HOST]

    with socket.socket() as closed:  # a port of loopback's where nothing listens
        closed.bind((HOST, 0))
        port = closed.getsockname()[1]
    egress, notes = EgressProxy(header_timeout=1.0, connect_timeout=5.0, resolve=resolve), []
    try:
        net = connect("on", egress=egress, on_note=notes.append, allow=(f"gone.lis.test:{port}",))
        curl = net.run("curl -sS -v --max-time 10 https://nosuch.lis.test/ 2>&1; "
                       "curl -sS -v --max-time 10 https://nosuch.lis.test/ 2>&1; "
                       f"curl -sS --max-time 10 http://gone.lis.test:{port}/x 2>&1")
    finally:
        egress.close()
    unresolved = ("Network access to nosuch.lis.test:443 was allowed, but the proxy could not resolve "
                  "nosuch.lis.test ([Errno -2] Name or service not known)")
    assert f"< HTTP/1.1 502 {unresolved}" in curl.stdout, curl.stdout
    assert f"lis-tui: Network access to gone.lis.test:{port} was allowed, but the proxy could not connect to it" \
        in curl.stdout, curl.stdout
    said = [str(n) for n in notes]
    assert len(said) == 2 and said[0] == unresolved and f"gone.lis.test:{port}" in said[1], said  # once each


def test_an_internal_address_refusal_says_why_and_the_exact_fix_once(connect, tls_web, web):
    """`on` with a name that resolves to an internal address (the mirror case): pip and curl
    see why and the exact --allow-host, never "ask the user"; the log hears it once."""
    egress, notes = _named({"pypi.lis.test": [HOST]}), []
    try:
        net = connect("on", egress=egress, on_note=notes.append)
        r = _pip_download(net, f"https://pypi.lis.test:{tls_web.port}", tls_web.ca)
        curl = net.run(f"curl -sS -v --max-time 10 https://pypi.lis.test:{tls_web.port}/ 2>&1; "
                       f"curl -sS --max-time 10 http://pypi.lis.test:{web.port}/hello.txt")
    finally:
        egress.close()
    why = (f"resolves to {HOST}, a private or internal address (this machine or its network); the user "
           f"can allow exactly this service with `--allow-host pypi.lis.test:{tls_web.port}`")
    assert r.exit_code != 0 and f"403 Network access to pypi.lis.test:{tls_web.port} was refused: it {why}" \
        in r.stderr, r.stderr
    assert "ask the user" not in r.stderr + curl.stdout
    assert f"< HTTP/1.1 403 Network access to pypi.lis.test:{tls_web.port} was refused: it {why}" in curl.stdout
    assert f"lis-tui: Network access to pypi.lis.test:{web.port} was refused: it resolves to {HOST}" in curl.stdout
    said = [str(n) for n in notes]
    assert len(said) == 2 and why in said[0] and f"pypi.lis.test:{web.port}" in said[1], said  # pip tried twice


def test_an_allowed_host_at_an_internal_address_gets_a_second_question_for_that_address_alone(connect, web):
    """`ask`: "allow" for a host that resolves to an internal address asks again, about the
    address; the answer covers that host and port at that address, not internal addresses."""
    egress, asked = _named({"mirror.lis.test": [HOST], "other.lis.test": [HOST]}), []

    def decide(request):
        asked.append((request.host, request.address))
        if request.host == "other.lis.test":
            return "allow_once" if not request.address else "deny"
        return "allow_session"

    try:
        net = connect("ask", egress=egress, decide=decide)
        first = net.fetch(f"http://mirror.lis.test:{web.port}/hello.txt")
        again = net.fetch(f"http://mirror.lis.test:{web.port}/hello.txt")
        other = net.fetch(f"http://other.lis.test:{web.port}/hello.txt")
    finally:
        egress.close()
    assert first == again == "hello\n"
    assert asked == [("mirror.lis.test", ""), ("mirror.lis.test", HOST), ("other.lis.test", ""),
                     ("other.lis.test", HOST)]  # the session answer covered mirror at HOST, nothing else
    assert f"resolves to {HOST}" in other and "the user refused that address for it" in other
    assert net.handle.policy.addresses_approved == {("mirror.lis.test", web.port, HOST)}


def test_a_question_is_withdrawn_when_its_request_ends_and_a_late_answer_saves_nothing(connect, web, sandbox):
    """curl gives up while the person is asked, then a sandbox goes while another question is
    open: each question's future is cancelled (the dialog closes on that), the log says so,
    and "always" answered afterwards neither allows nor saves the host."""
    questions, notes, saved = [], [], []

    def decide(request):
        future = concurrent.futures.Future()
        questions.append(future)
        return future

    net = connect("ask", decide=decide, host_services=[web.hostport], on_note=notes.append,
                  on_allow_always=saved.append)
    gives_up = threading.Thread(target=net.run, args=(f"curl -sS --max-time 60 {web.url}/hello.txt & pid=$!; "
                                                      "until [ -e /tmp/give-up ]; do sleep 0.1; done; kill $pid",))
    gives_up.start()
    _wait_for(lambda: len(questions) == 1)
    net.sb.write_file("/tmp/give-up", b"")  # curl gives up (is killed) while the person is asked
    _wait_for(lambda: questions[0].cancelled())
    gives_up.join(30)
    with pytest.raises(concurrent.futures.InvalidStateError):
        questions[0].set_result("allow_always")
    # the question is settled (no one's answer: a deny), and the refusal says why
    assert [(type(n).__name__, n.by) for n in notes] == [("QuestionAnswered", "gone"), ("Refusal", "gone")]
    assert notes[0].answer == "deny" and "ended before an answer" in str(notes[1])
    assert net.handle.log[-1].decided_by == "gone"
    results = []
    for end in (net.handle.withdraw_questions, net.handle.detach):  # the task ended; the sandbox went
        running = threading.Thread(target=lambda: results.append(net.fetch(f"{web.url}/hello.txt")))
        running.start()
        _wait_for(lambda: len(questions) == len(results) + 2)
        end()
        _wait_for(lambda: questions[-1].cancelled())
        running.join(30)
    assert "the task it was asked for ended before the user answered" in results[0]
    assert results[1].startswith("ERR") and "hello" not in "".join(results)
    policy = net.handle.policy
    assert not policy.allow and not policy.session_approved and not saved
    # each withdrawn question is said on the proxy's loop once its cancel reaches it, which after a
    # detach may come after the request already failed
    _wait_for(lambda: len(notes) >= 6)
    assert [(type(n).__name__, n.by) for n in notes] == [("QuestionAnswered", "gone"), ("Refusal", "gone")] * 3


# ---- live changes, load, abuse -----------------------------------------------------------------


def _wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize("tunnel", [True, False], ids=["connect", "plain"])
def test_mode_changes_live_and_off_closes_open_connections(connect, web, tunnel):
    net = connect("on", allow=[web.hostport])
    net.run("sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/bg")
    args = ["-p"] if tunnel else []
    stream = net.sb.popen(["curl", "-sS", *args, "-o", "/tmp/stream", f"{web.url}/stream"], env=net.env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    size = lambda: int(net.run("stat -c %s /tmp/stream 2>/dev/null || echo 0").stdout)  # noqa: E731
    _wait_for(lambda: size() > 2048)
    net.handle.set_mode("off")
    assert stream.wait(10) != 0
    _wait_for(lambda: not net.handle.connections)  # the proxy's side may end just after curl's
    assert "network is off" in net.fetch(f"{web.url}/hello.txt")
    net.handle.set_mode("on")
    assert net.fetch(f"{web.url}/hello.txt") == "hello\n"
    assert net.run("kill -0 $(cat /tmp/bg)").exit_code == 0  # the sandbox kept its state


def test_fifty_parallel_downloads(connect, web):
    net = connect("on", allow=[web.hostport])
    script = textwrap.dedent(f"""\
        mkdir /tmp/d
        seq 50 | xargs -P 50 -I{{}} sh -c 'curl -sS --max-time 60 $([ $(({{}} % 2)) = 0 ] && echo -p) \
            -o /tmp/d/{{}} {web.url}/blob.bin'
        ls /tmp/d | wc -l; sha256sum /tmp/d/* | cut -d" " -f1 | sort -u""")
    r = net.run(script, timeout=120)
    assert r.stdout.split() == ["50", hashlib.sha256(BLOB).hexdigest()], r.stderr
    assert sum(rec.bytes_down for rec in net.handle.log) >= 50 * len(BLOB)
    _wait_for(lambda: not net.handle.connections)


ABUSE = r'''
import socket, sys, time
port = int(sys.argv[1])
def talk(data, wait=8.0, hold=None):
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(wait)
    try:
        if data:
            s.sendall(data)
        out = b""
        while b"\r\n" not in out:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except OSError as exc:
        return f"error {exc}"
    finally:
        if hold is None:
            s.close()
        else:
            hold.append(s)
    return out.split(b"\r\n", 1)[0].decode(errors="replace")
print("junk", talk(b"\x16\x03\x01" + bytes(range(256)) + b"\r\n\r\n"))
print("line", talk(b"GET\r\n\r\n"))
print("self", talk(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
print("own", talk(b"GET http://127.0.0.1:%d/ HTTP/1.1\r\n\r\n" % port))
print("huge", talk(b"GET http://x.test/ HTTP/1.1\r\nX: " + b"a" * 200000 + b"\r\n\r\n"))
t = time.monotonic(); print("slow", talk(b"GET http://x.test/ HT"), round(time.monotonic() - t))
print("port", talk(b"CONNECT 127.0.0.2:25 HTTP/1.1\r\n\r\n"))
time.sleep(1)  # the connections above are gone by now
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
time.sleep(0.3)  # well inside the proxy's 1 s header timeout
firsts = []
for s in socks:
    s.setblocking(False)
    try:
        firsts.append(s.recv(100).split(b"\r\n")[0].decode())
    except BlockingIOError:
        firsts.append("waiting")
print("crowd", sorted(set(firsts)), firsts.count("waiting"))
'''


def test_abuse_is_answered_cleanly_and_the_proxy_stays_up(connect, web):
    egress = EgressProxy(header_timeout=1.0, max_connections=16)
    try:
        net = connect("on", egress=egress, allow=[web.hostport], deny=["*:25"])
        net.sb.write_file("/tmp/abuse.py", ABUSE.encode())
        r = net.run(["python3", "/tmp/abuse.py", str(net.handle.port)], timeout=60)
        lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
        assert lines["junk"].startswith("HTTP/1.1 400") and lines["line"].startswith("HTTP/1.1 400"), r
        assert lines["self"].startswith("HTTP/1.1 400") and lines["own"].startswith("HTTP/1.1 403")
        assert lines["huge"].startswith("HTTP/1.1 431")
        assert lines["slow"] == "HTTP/1.1 408 Request Timeout 1"
        assert lines["port"].startswith("HTTP/1.1 403")
        assert lines["crowd"] == "['HTTP/1.1 503 Service Unavailable', 'waiting'] 16"
        bad = sorted(r.status for r in net.handle.log if r.decided_by == "bad-request")
        assert bad[:5] == [400, 400, 400, 408, 431]  # then the crowd's, timed out at the end
        _wait_for(lambda: not net.handle.connections)
        assert net.fetch(f"{web.url}/hello.txt") == "hello\n"
        assert egress.open_connections == 0 or _wait_for(lambda: egress.open_connections == 0) is None
    finally:
        egress.close()


# ---- set-up ----------------------------------------------------------------------------------


def test_env_points_every_tool_at_the_proxy(proxy, sandbox):
    handle = proxy.attach(sandbox, NetworkPolicy("on"))
    try:
        env = handle.environment({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "a.b", "GIT_CONFIG_VALUE_0": "c"})
        url = f"http://127.0.0.1:{handle.port}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
                     "npm_config_proxy", "npm_config_https_proxy", "GIT_CONFIG_VALUE_1"):
            assert env[name] == url, name
        assert env["NO_PROXY"] == "localhost,127.0.0.1,::1" and env["GIT_CONFIG_COUNT"] == "2"
        assert handle.port == PROXY_PORT
        views = "git config --get http.proxy; git config --get a.b; " \
                "python3 -c 'import urllib.request as u; print(u.getproxies()[\"https\"])'"
        if sandbox.exec("command -v npm").exit_code == 0:
            views += "; npm config get https-proxy"
        lines = sandbox.exec(views, env=env, timeout=60).stdout.split()
        assert lines == [url, "c", url] + ([url] if "npm" in views else [])
    finally:
        handle.detach()


def test_attach_to_a_dead_sandbox_says_so(proxy):
    with Sandbox() as sb:
        pass
    with pytest.raises(SandboxError, match="not running"):
        proxy.attach(sb, NetworkPolicy("on"))


def test_sandbox_network_wiring(web):
    if not hasattr(Sandbox, "set_network"):
        pytest.skip("Sandbox.set_network is not wired in yet (see isolation/net/)")
    with Sandbox(SandboxSpec(network="on", allow_hosts=(web.hostport,))) as sb:
        assert sb.exec(f"curl -sS --max-time 20 {web.url}/hello.txt").stdout == "hello\n"
        sb.set_network("off")
        assert "network is off" in sb.exec(f"curl -sS --max-time 20 {web.url}/hello.txt").stdout
    with Sandbox() as sb:
        assert "HTTP_PROXY" not in sb.env
        sb.set_network("on")
        assert sb.env["HTTP_PROXY"].startswith("http://127.0.0.1:")


def test_turning_the_network_on_mid_session_reaches_a_running_shell(web):
    from tools.shell import Shell

    target = f"{HOST}:{web.port}"
    with Sandbox(SandboxSpec(allow_hosts=(target,))) as sb, Shell(sb) as shell:
        shell.run("export KEEP=me")
        assert shell.run(f"curl -s -m 5 http://{target}/hello.txt >/dev/null; echo $?").output.strip() != "0"
        sb.set_network("on")
        shell.export(sb.network.env)
        r = shell.run(f"curl -s -m 5 -o /dev/null -w '%{{http_code}}' http://{target}/hello.txt; echo \" $KEEP\"")
        assert r.output.strip() == "200 me"
