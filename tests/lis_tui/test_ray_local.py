"""The local cluster `--ray auto` starts when none runs, with the real Ray: what it listens on,
who may read its token and session, and that a client without the token is turned away.

Run in a child interpreter of its own (Ray's state is per process) in a pid namespace of its own
(`--ray auto` joins any Ray cluster whose processes it sees: another test's, another user's),
with its own HOME, runtime dir and RAY_TMPDIR, so it leaves nothing outside."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
DRIVER = r"""
import json, os, socket, stat, subprocess, sys
sys.path[:0] = [{tests!r}]
from proctree import descendants
from lis_tui.ray import connect
assert connect("auto", print)
import ray

def listening(pids):
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{{pid}}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{{pid}}/fd/{{fd}}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        for line in open(f"/proc/net/{{table}}").read().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes and (fields[3] == "0A" or table.startswith("udp")):
                raw = bytes.fromhex(fields[1].split(":")[0])
                if len(raw) == 4:
                    found.append(socket.inet_ntop(socket.AF_INET, raw[::-1]))
                else:
                    found.append(socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))))
    return found

pids = [os.getpid()] + descendants(os.getpid())
token = os.environ.get("RAY_AUTH_TOKEN_PATH", "")
gcs = ray.get_runtime_context().gcs_address
servers = {{}}  # what the GCS and raylet run with: their token mode and token file
for pid in pids:
    try:
        name = open(f"/proc/{{pid}}/cmdline", "rb").read().split(b"\0")[0].rsplit(b"/", 1)[-1].decode()
        environ = dict(e.split("=", 1) for e in open(f"/proc/{{pid}}/environ").read().split("\0") if "=" in e)
    except OSError:
        continue
    if name in ("gcs_server", "raylet"):
        servers[name] = [environ.get("RAY_AUTH_MODE"), environ.get("RAY_AUTH_TOKEN_PATH")]
print("RESULT", json.dumps({{"listening": listening(pids), "token": token, "gcs": gcs, "servers": servers,
                            "answer": ray.get(ray.remote(lambda: 42).remote())}}))
ray.shutdown()
"""


@pytest.fixture
def short_tmp():
    """A folder with a short path: Ray's socket paths under it must fit 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="lisrl", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_local_cluster_listens_on_loopback_only_and_keeps_its_token_and_session_private(short_tmp):
    home, runtime, ray_tmp = short_tmp / "home", short_tmp / "run", short_tmp / "raytmp"
    for folder in (home, runtime, ray_tmp):
        folder.mkdir(mode=0o700)
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime),
           "RAY_TMPDIR": str(ray_tmp), "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    if not shutil.which("unshare"):
        pytest.skip("needs unshare (util-linux) for a pid namespace that hides other Ray clusters")
    r = subprocess.run(["unshare", "--user", "--map-current-user", "--pid", "--fork", "--mount-proc",
                        sys.executable, "-c", DRIVER.format(tests=str(ROOT / "tests"))], env=env,
                       capture_output=True, text=True, timeout=300)
    lines = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(lines[0][len("RESULT "):])
    assert got["answer"] == 42  # the cluster ran a task
    # The GCS, raylet, workers and the driver listen (the attack's target exists)...
    assert len(got["listening"]) >= 3, got
    assert set(got["listening"]) <= {"127.0.0.1", "::ffff:127.0.0.1"}, got  # ...on loopback alone
    assert got["gcs"].startswith("127.0.0.1:")
    # Token auth, with our token, though the caller's environment said RAY_AUTH_MODE=disabled
    assert got["servers"] == dict.fromkeys(("gcs_server", "raylet"), ["token", got["token"]]), got
    folder = runtime / "lis-ray"
    token = Path(got["token"])
    assert token.parent == folder and token.stat().st_size > 0
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(token.stat().st_mode) == 0o600
    assert any((folder / "session").iterdir())  # the session is in the private folder...
    assert not (home / ".ray").exists() and not any(ray_tmp.iterdir())  # ...and nothing went elsewhere


def test_a_private_folder_someone_else_could_open_is_refused(tmp_path, monkeypatch):
    from lis_tui.ray import ClusterError
    from lis_tui.ray.local import private_dir, token_file

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    tmp_path.chmod(0o700)
    folder = private_dir()
    assert folder == tmp_path / "lis-ray" and stat.S_IMODE(folder.stat().st_mode) == 0o700
    token = token_file(folder)
    assert token_file(folder) == token and stat.S_IMODE(token.stat().st_mode) == 0o600  # made once
    token.chmod(0o644)
    with pytest.raises(ClusterError, match="only you can read"):
        token_file(folder)
    folder.chmod(0o755)
    with pytest.raises(ClusterError, match="chmod 700"):
        private_dir()
    tmp_path.chmod(0o755)  # a runtime dir others may open is not used: /tmp/lis-ray-UID instead
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    assert private_dir() == tmp_path / "tmp" / f"lis-ray-{os.getuid()}"


def _raylet_lookalike(gcs: str, as_user: list[str]) -> subprocess.Popen:
    """A process a process list shows as a raylet of the cluster at `gcs` (its argv[0], and the
    flag Ray reads the address from), run by `as_user` (a setpriv prefix, or nobody else)."""
    body = f"sleep 60; : --gcs-address={gcs}"  # bash forks sleep; its own cmdline keeps the flag
    return subprocess.Popen([*as_user, "/bin/bash", "-c", f'exec -a /opt/ray/raylet/raylet /bin/bash -c "{body}"'],
                            start_new_session=True)


def _wait_seen(address: str) -> None:
    from ray._private.services import find_gcs_addresses

    for _ in range(100):
        find_gcs_addresses.cache_clear()
        if address in find_gcs_addresses():
            return
        time.sleep(0.05)
    raise AssertionError(f"Ray's own finder never saw {address}")


def test_auto_finds_a_cluster_of_ours_by_its_raylet(monkeypatch):
    from lis_tui.ray.local import own_cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    mine = _raylet_lookalike("127.0.0.1:9", [])
    try:
        _wait_seen("127.0.0.1:9")
        assert own_cluster() == "127.0.0.1:9"
    finally:
        os.killpg(mine.pid, signal.SIGKILL)
        mine.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="runs a process as another user: needs root")
def test_auto_never_joins_another_users_cluster(monkeypatch):
    from lis_tui.ray import ClusterError, connect
    from lis_tui.ray.local import own_cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    theirs = _raylet_lookalike("127.0.0.1:9", ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    try:
        _wait_seen("127.0.0.1:9")  # Ray's own "auto" would join it...
        assert own_cluster() is None  # ...ours does not
        with pytest.raises(ClusterError, match="no Ray cluster of yours on this machine or at RAY_ADDRESS"):
            connect("auto", start_local=False)
    finally:
        os.killpg(theirs.pid, signal.SIGKILL)
        theirs.wait()
