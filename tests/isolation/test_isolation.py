"""What the model runs must not see or change the host: one test per promise, as root and unprivileged."""
from __future__ import annotations

import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from isolation import Limits, Sandbox, SandboxSpec, idmap

pytestmark = pytest.mark.sandbox

NAMESPACES = ("user", "mnt", "pid", "ipc", "uts", "net", "cgroup")


@pytest.mark.parametrize("ns", NAMESPACES)
def test_every_namespace_is_new(sandbox, ns):
    inside = sandbox.exec(f"readlink /proc/self/ns/{ns}").stdout.strip()
    assert inside and inside != os.readlink(f"/proc/self/ns/{ns}")


def test_host_processes_are_invisible(sandbox):
    pids = [int(p) for p in sandbox.exec("ls /proc").stdout.split() if p.isdigit()]
    assert pids and len(pids) < 10 and max(pids) < 100
    comms = sandbox.exec("cat /proc/[0-9]*/comm").stdout.split()
    assert set(comms) <= {"bwrap", "sh", "bash", "cat"}, comms


def test_host_home_tmp_and_run_are_invisible(sandbox, tmp_path):
    marker = f"lis-marker-{os.getpid()}"
    home = os.path.expanduser("~")
    created = []
    for directory in ("/tmp", home, "/run" if os.access("/run", os.W_OK) else None):
        if directory and os.access(directory, os.W_OK):
            path = os.path.join(directory, marker)
            open(path, "w").close()
            created.append(path)
    try:
        r = sandbox.exec(f"ls -a /tmp /root /run /var/run {home} 2>/dev/null; find / -name '{marker}*' 2>/dev/null")
        assert marker not in r.stdout
        # /run holds only lis-tui's own (the apt stand-ins of the host rootfs), /root the empty
        # .local that pip and npm install into, /tmp the tools' folder
        assert sandbox.exec("ls -A /run /tmp /root /root/.local").stdout.split() == [
            "/root:", ".local", "/root/.local:", "/run:", "lis-tui", "/tmp:", "lis"]
    finally:
        for path in created:
            os.unlink(path)


def test_agent_and_docker_sockets_are_invisible(tmp_path, monkeypatch):
    agent = tmp_path / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(agent))
    monkeypatch.setenv("SSH_AUTH_SOCK", str(agent))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{agent}")
    with Sandbox() as sb:
        r = sb.exec(f'env; ls -la {agent} /var/run/docker.sock /run/docker.sock 2>&1; ls "$SSH_AUTH_SOCK" 2>&1')
    server.close()
    assert "SSH_AUTH_SOCK" not in r.stdout and "DOCKER_HOST" not in r.stdout
    assert "No such file" in r.stdout and f"{agent} " not in r.stdout.replace("No such", "")


def test_environment_is_clean(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-do-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    with Sandbox(SandboxSpec(env={"ASKED_FOR": "yes"})) as sb:
        env = dict(line.split("=", 1) for line in sb.exec("env").stdout.splitlines() if "=" in line)
    assert "secret" not in " ".join(env.values())
    assert env["ASKED_FOR"] == "yes" and env["HOME"] == "/root"
    assert set(env) <= {"PATH", "HOME", "USER", "LOGNAME", "LANG", "HOSTNAME", "SHELL", "PWD", "SHLVL", "_",
                        "OLDPWD", "ASKED_FOR",
                        # the host rootfs: pip and npm install into the sandbox's own /root
                        "PIP_BREAK_SYSTEM_PACKAGES", "PIP_ROOT_USER_ACTION", "NPM_CONFIG_PREFIX"}


@pytest.mark.parametrize("target", ["/usr/lis-test", "/etc/lis-test", "/bin/lis-test", "/lib/lis-test"])
def test_host_trees_are_read_only(sandbox, target):
    assert sandbox.exec(f"echo x > {target}").exit_code != 0
    assert not os.path.exists(target)


def test_writes_anywhere_else_stay_inside(sandbox):
    hostname = socket.gethostname()
    # Root may rename its own UTS namespace, an unprivileged user may not; neither reaches the host.
    r = sandbox.exec("echo x > /lis-test && mkdir -p /var/lis && (echo changed > /proc/sys/kernel/hostname) 2>/dev/null;"
                     " cat /lis-test")
    assert r.exit_code == 0 and r.stdout == "x\n"
    assert not os.path.exists("/lis-test") and not os.path.exists("/var/lis")
    assert socket.gethostname() == hostname


def test_remounting_read_only_trees_is_refused(sandbox):
    r = sandbox.exec("mount -o remount,rw,bind /usr && touch /usr/lis-test")
    assert r.exit_code != 0 and not os.path.exists("/usr/lis-test")
    assert sandbox.exec("umount /etc/shadow 2>&1; cat /etc/shadow").exit_code != 0


def test_secrets_in_host_etc_are_masked(sandbox):
    assert sandbox.exec("cat /etc/shadow").stdout == ""


def test_no_new_privs_and_no_capabilities(sandbox):
    status = dict(line.split(":\t", 1) for line in sandbox.exec("cat /proc/self/status").stdout.splitlines()
                  if ":\t" in line)
    assert status["NoNewPrivs"].strip() == "1"
    assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0


def test_sandbox_is_uid_0_inside_but_the_invoking_user_outside(sandbox):
    assert sandbox.exec("id -u").stdout.strip() == "0"
    sandbox.exec("touch /testbed/owned")
    # the caller's uid (a root caller's: its subordinate id, idmap.py), in the layers' tmpfs
    assert os.stat(sandbox.writable / "testbed" / "owned").st_uid == idmap.sandbox_owner()[0]


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"host service")

    def log_message(self, *args):
        pass


def test_network_off_has_only_loopback_and_cannot_reach_the_host():
    server = HTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        with Sandbox() as sb:
            links = sb.exec("cat /proc/net/dev").stdout
            r = sb.exec(f"curl -sS -m 3 http://127.0.0.1:{port}/ || python3 -c \"import urllib.request as u; "
                        f"print(u.urlopen('http://127.0.0.1:{port}/', timeout=3).read())\"", timeout=30)
            dns = sb.exec("getent hosts deb.debian.org; echo rc=$?", timeout=30)
    finally:
        server.shutdown()
    interfaces = [line.split(":")[0].strip() for line in links.splitlines()[2:]]
    assert interfaces == ["lo"]
    assert "host service" not in r.stdout and r.exit_code != 0
    assert "rc=0" not in dns.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="the kernel never applies RLIMIT_NPROC to host root; "
                    "CI runs this as an unprivileged user")
def test_fork_bomb_is_contained():
    with Sandbox(SandboxSpec(limits=Limits(processes=64))) as sb:
        r = sb.exec("for i in $(seq 200); do sleep 2 & done 2>&1; wait", timeout=60)
        alive = sb.exec("ps -e --no-headers | wc -l").stdout.strip()
    assert "Resource temporarily unavailable" in r.stdout + r.stderr or "retry" in r.stdout + r.stderr
    assert int(alive) <= 66


def test_file_size_limit():
    with Sandbox(SandboxSpec(limits=Limits(file_size=1 << 20))) as sb:
        r = sb.exec("head -c 3000000 /dev/zero > /testbed/big; stat -c %s /testbed/big")
    assert int(r.stdout.split()[-1]) <= 1 << 20


def test_memory_limit():
    with Sandbox(SandboxSpec(limits=Limits(memory=256 << 20))) as sb:
        r = sb.exec("python3 -c 'x = bytearray(600 * 1024 * 1024); print(\"allocated\")'")
    assert r.exit_code != 0 and "allocated" not in r.stdout and "MemoryError" in r.stderr
