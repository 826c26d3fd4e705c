"""The rootfs store, with real mmdebstrap, real tarballs and a real loopback HTTP server."""
from __future__ import annotations

import argparse
import bz2
import functools
import gzip
import hashlib
import http.server
import io
import lzma
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from isolation.rootfs import HOST, RootfsError, RootfsExists, RootfsNotFound, RootfsStore, UnsafeArchive
from isolation.rootfs.pull import machine_arch
from isolation.rootfs.tar import open_archive
from lis_tui.commands import rootfs as rootfs_cli

pytestmark = pytest.mark.sandbox
REPO = Path(__file__).resolve().parents[2]


# -- tarballs made by the tests ----------------------------------------------------------------

def member(name: str, kind: str = "file", data: bytes = b"", mode: int | None = None, link: str = ""):
    """One tar member: kind is file, dir, symlink, hardlink, fifo or chardev."""
    info = tarfile.TarInfo(name)
    info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                 "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE, "chardev": tarfile.CHRTYPE}[kind]
    info.mode = mode if mode is not None else (0o755 if kind == "dir" else 0o644)
    info.linkname, info.mtime, info.uid, info.gid = link, 1_700_000_000, 1234, 1234
    info.size = len(data) if kind == "file" else 0
    return info, (data if kind == "file" else None)


def base_members() -> list:
    """The smallest tree the store takes for a root filesystem: /bin/sh and /etc/apt."""
    return [member("./", "dir"), member("./usr", "dir"), member("./usr/bin", "dir"),
            member("./usr/bin/dash", data=b"#!fake shell\n", mode=0o755),
            member("./usr/bin/sh", "symlink", link="dash"), member("./bin", "symlink", link="usr/bin"),
            member("./etc", "dir"), member("./etc/apt", "dir")]


def write_tar(path: Path, members: list, compression: str = "") -> Path:
    with tarfile.open(path, f"w:{compression}", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def assert_empty(store: RootfsStore) -> None:
    """Nothing but `host`, and no staging or trash left in the store directory."""
    assert [r.name for r in store.list()] == [HOST]
    assert not list(store.root.glob(".*"))


def tree(root: Path) -> dict[str, tuple]:
    """path -> (type, mode, link target or content hash), for comparing trees."""
    out = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            out[str(path.relative_to(root))] = ("link", os.readlink(path))
        elif stat.S_ISDIR(info.st_mode):
            out[str(path.relative_to(root))] = ("dir", stat.S_IMODE(info.st_mode))
        else:
            out[str(path.relative_to(root))] = ("file", stat.S_IMODE(info.st_mode),
                                                hashlib.sha256(path.read_bytes()).hexdigest())
    return out


# -- the Debian rootfs built with mmdebstrap ---------------------------------------------------

def test_debian_rootfs_is_owned_by_us_and_ready_for_a_single_uid_sandbox(debian_rootfs):
    found = debian_rootfs.rootfs
    assert found.kind == "dir" and found.path.name == "root"
    not_ours = [p for p in found.path.rglob("*") if p.lstat().st_uid != os.getuid()]
    setid = [p for p in found.path.rglob("*") if p.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)
             and not p.is_symlink()]
    assert not_ours == [] and setid == []
    assert (found.path / "testbed").is_dir()
    assert 'APT::Sandbox::User "root";' in (found.path / "etc/apt/apt.conf.d/99lis-tui-sandbox").read_text()
    meta = found.meta
    assert {"python3", "apt", "git", "curl", "ca-certificates", "python3-pip"} <= set(meta["packages"])
    assert "bookworm" in meta["source"] and len(meta["sha256"]) == 64
    assert 10 << 20 < meta["size"] < 300 << 20
    assert meta["skipped_count"] > 0  # /dev nodes from the tarball


def test_debian_rootfs_runs_python_and_apt_as_uid_0(debian_rootfs):
    root = debian_rootfs.rootfs.path
    if subprocess.run(["unshare", "--user", "--map-root-user", "true"], capture_output=True).returncode:
        pytest.skip("unprivileged user namespaces are off here")
    # chroot lives in /usr/sbin, which an ordinary user's PATH does not name
    chroot = shutil.which("chroot") or shutil.which("chroot", path="/usr/sbin:/sbin")
    script = f"{chroot} {root} python3 -c 'import os; print(os.getuid())' && {chroot} {root} apt-config dump"
    done = subprocess.run(["unshare", "--user", "--map-root-user", "sh", "-c", script],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("0\n") and 'APT::Sandbox::User "root";' in done.stdout


def test_build_with_an_unknown_suite_names_it_and_leaves_nothing(store, debian_mirror):
    with pytest.raises(RootfsError) as err:
        store.build("x", suite="no-such-suite", mirror=debian_mirror)
    assert "no-such-suite" in str(err.value) and "Fix:" in str(err.value)
    assert_empty(store)


def test_build_from_an_unreachable_mirror_names_the_url(store):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        mirror = f"http://127.0.0.1:{sock.getsockname()[1]}/debian"
    with pytest.raises(RootfsError) as err:
        store.build("x", suite="bookworm", mirror=mirror)
    assert mirror in str(err.value) and "could not be reached" in str(err.value)
    assert_empty(store)


def test_ctrl_c_during_a_build_leaves_no_half_rootfs(store, debian_mirror):
    code = ("from isolation.rootfs import RootfsStore\n"
            f"RootfsStore({str(store.root)!r}).build('x', suite='bookworm', mirror={debian_mirror!r},"
            " progress=lambda line: print(line, flush=True))")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group, as a terminal's job
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "downloading packages" in line or "extracting archives" in line:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
            break
    proc.stdout.read()
    assert proc.wait(timeout=120) != 0, "".join(seen)
    assert_empty(store)
    tempdirs = [line.split()[2] for line in seen if line.startswith("I: using ") and "as tempdir" in line]
    assert tempdirs and not any(os.path.exists(Path(path).parent) for path in tempdirs)  # its TMPDIR too


def test_sigterm_during_a_build_leaves_no_process_and_no_half_rootfs(store, debian_mirror):
    """`kill` of `lis-tui rootfs build` (a service manager, a CI timeout) stops it as Ctrl-C does:
    mmdebstrap and its apt children are gone with it, and so are the half-made rootfs and TMPDIR."""
    argv = [sys.executable, "-m", "lis_tui.cli", "rootfs", "--store", str(store.root), "build", "x",
            "--suite", "bookworm", "--mirror", debian_mirror]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "downloading packages" in line or "extracting archives" in line:
            proc.terminate()  # SIGTERM to lis-tui alone, as `kill PID` sends it
            break
    seen.append(proc.stderr.read())
    assert proc.wait(timeout=120) == 130, "".join(seen)
    assert "interrupted" in seen[-1]
    tempdirs = [line.split()[2] for line in seen if "I: using " in line and "as tempdir" in line]
    assert tempdirs and not any(os.path.exists(Path(path).parent) for path in tempdirs)
    scratch = {f"TMPDIR={Path(path).parent}" for path in tempdirs}  # mmdebstrap's, and so its children's
    left = [pid for pid in os.listdir("/proc") if pid.isdigit() and scratch & set(_environ(pid).split("\0"))]
    assert left == []
    assert_empty(store)


def _environ(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_build_refuses_unknown_presets_and_bad_names(store):
    with pytest.raises(RootfsError, match="preset"):
        store.build("x", preset="huge")
    for name in ("a/b", "..", "", "host", ".hidden", "-x", "x" * 65):
        with pytest.raises(RootfsError, match="cannot name a rootfs"):
            store.build(name)
    assert not store.root.exists() or not any(store.root.iterdir())


# -- import ------------------------------------------------------------------------------------

def test_import_keeps_modes_and_links_drops_setid_and_device_nodes(store, tmp_path):
    members = base_members() + [
        member("./etc/secret", data=b"s", mode=0o600), member("./usr/bin/su", data=b"su", mode=0o4755),
        member("./usr/bin/wall", data=b"w", mode=0o2755), member("./proc", "dir", mode=0o555),
        member("./tmp", "dir", mode=0o1777), member("./etc/alt", "symlink", link="/usr/bin/python3"),
        member("./etc/out", "symlink", link="../../../../etc/passwd"),
        member("./usr/bin/dash2", "hardlink", link="./usr/bin/dash"),
        member("./dev", "dir"), member("./dev/null", "chardev"), member("./dev/pipe", "fifo")]
    found = store.import_tar("t", write_tar(tmp_path / "t.tar.gz", members, "gz"))
    root = found.path
    mode = lambda rel: stat.S_IMODE((root / rel).lstat().st_mode)  # noqa: E731
    assert (mode("etc/secret"), mode("usr/bin/su"), mode("usr/bin/wall")) == (0o600, 0o755, 0o755)
    assert (mode("proc"), mode("tmp")) == (0o555, 0o1777)
    assert os.readlink(root / "etc/alt") == "/usr/bin/python3"
    assert os.readlink(root / "etc/out") == "../../../../etc/passwd"
    assert (root / "usr/bin/dash2").stat().st_ino == (root / "usr/bin/dash").stat().st_ino
    assert not os.path.lexists(root / "dev/null") and not os.path.lexists(root / "dev/pipe")
    assert found.meta["skipped"] == ["./dev/null", "./dev/pipe"]
    assert all(p.lstat().st_uid == os.getuid() for p in root.rglob("*"))
    assert (root / "usr/bin/dash").stat().st_mtime == 1_700_000_000
    assert (root / "testbed").is_dir() and (root / "etc/apt/apt.conf.d/99lis-tui-sandbox").is_file()
    assert found.meta["sha256"] == hashlib.sha256((tmp_path / "t.tar.gz").read_bytes()).hexdigest()
    assert found.meta["packages"] is None and found.source.startswith("import ")


@pytest.mark.parametrize("evil", [
    [member("../escape", data=b"x")],
    [member("./usr/../../escape", data=b"x")],
    [member("/escape", data=b"x")],
    [member("./h", "hardlink", link="../../escape")],
    [member("./h", "hardlink", link="/etc/passwd")],
    [member("./a", "symlink", link="OUTSIDE"), member("./a/escape", data=b"x")],
    [member("./a", "symlink", link="OUTSIDE"), member("./a/sub", "dir"), member("./a/sub/escape", data=b"x")],
    [member("./a", "symlink", link="OUTSIDE"), member("./a/escape", "symlink", link="/")],
    [member("./a", "symlink", link="OUTSIDE"), member("./h", data=b"x"), member("./a/escape", "hardlink", link="./h")],
    [member("./d", "dir"), member("./d", "symlink", link="OUTSIDE"), member("./d/escape", data=b"x")],
], ids=["dotdot", "dotdot-inner", "absolute", "hardlink-dotdot", "hardlink-absolute", "through-symlink",
        "dir-through-symlink", "symlink-through-symlink", "hardlink-through-symlink", "dir-replaced-by-symlink"])
def test_import_refuses_members_that_would_land_outside(store, tmp_path, evil):
    outside = tmp_path / "outside"
    outside.mkdir()
    for info, _ in evil:
        info.linkname = info.linkname.replace("OUTSIDE", str(outside))
    with pytest.raises(UnsafeArchive):
        store.import_tar("evil", write_tar(tmp_path / "evil.tar", base_members() + evil))
    assert list(outside.iterdir()) == [] and not (tmp_path / "escape").exists()
    assert_empty(store)


def test_import_replacing_a_hard_link_does_not_write_into_its_target(store, tmp_path):
    members = base_members() + [member("./f", data=b"original"), member("./h", "hardlink", link="./f"),
                                member("./h", data=b"replacement")]
    root = store.import_tar("t", write_tar(tmp_path / "t.tar", members)).path
    assert (root / "f").read_bytes() == b"original" and (root / "h").read_bytes() == b"replacement"


def test_import_needs_a_root_filesystem(store, tmp_path):
    with pytest.raises(RootfsError, match="no /bin/sh"):
        store.import_tar("t", write_tar(tmp_path / "t.tar", [member("./README", data=b"hi")]))
    assert_empty(store)


def test_disk_full_while_unpacking_says_so_and_leaves_nothing(tmp_path):
    if subprocess.run(["unshare", "--user", "--map-root-user", "true"], capture_output=True).returncode:
        pytest.skip("unprivileged user namespaces are off here")
    tar = write_tar(tmp_path / "big.tar", base_members() + [member("./big", data=os.urandom(3 << 20))])
    small = tmp_path / "small"
    small.mkdir()
    code = ("import os; from isolation.rootfs import RootfsStore, RootfsError\n"
            f"try: RootfsStore({str(small)!r}).import_tar('t', {str(tar)!r})\n"
            "except RootfsError as exc: print('ERROR', exc)\n"
            f"print('LEFT', os.listdir({str(small)!r}))")
    mount_and_run = 'mount -t tmpfs -o size=1m tmpfs "$1" && exec "$2" -c "$3"'
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mount_and_run, "sh",
                           str(small), sys.executable, code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "ERROR disk full while unpacking" in done.stdout and "LEFT []" in done.stdout, done.stdout + done.stderr


def _damaged(tar: Path, case: str) -> bytes:
    data = tar.read_bytes()
    kind, _, how = case.partition("-")
    if kind == "zst":
        data = subprocess.run(["zstd", "-c", str(tar)], capture_output=True, check=True).stdout
    elif kind != "tar":
        data = {"gz": gzip.compress, "xz": lzma.compress, "bz2": bz2.compress}[kind](data)
    if how == "no-end-blocks":  # cut exactly after the last member: only the end marker is missing
        with tarfile.open(tar) as whole:
            return data[: whole.getmembers()[-1].offset_data]
    return {"half": data[: len(data) // 2], "empty": b"", "garbage": os.urandom(4096)}[how]


@pytest.mark.parametrize("case", ["gz-half", "xz-half", "bz2-half", "zst-half", "tar-half", "tar-no-end-blocks",
                                  "tar-empty", "tar-garbage"])
def test_corrupt_or_truncated_tarballs_are_refused_and_leave_nothing(store, tmp_path, case):
    if case.startswith("zst") and not shutil.which("zstd"):
        pytest.skip("no zstd binary")
    bad = tmp_path / "bad.tar"
    members = base_members() + [member("./big", data=os.urandom(30_000))]  # so half a tar is not padding
    bad.write_bytes(_damaged(write_tar(tmp_path / "ok.tar", members), case))
    with pytest.raises(RootfsError, match="Fix:"):
        store.import_tar("t", bad)
    assert_empty(store)


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar.zst"])
def test_export_and_import_round_trip(store, tmp_path, suffix):
    if suffix == ".tar.zst" and not shutil.which("zstd"):
        pytest.skip("no zstd binary")
    members = base_members() + [member("./etc/x", data=b"x" * 5000, mode=0o640), member("./proc", "dir", mode=0o555),
                                member("./etc/l", "symlink", link="/nowhere")]
    first = store.import_tar("first", write_tar(tmp_path / "t.tar", members))
    out = store.export("first", tmp_path / f"out{suffix}")
    second = store.import_tar("second", out)
    assert tree(first.path) == tree(second.path)
    with open_archive(out) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        assert {(m.uid, m.gid, m.uname) for m in tar} == {(0, 0, "root")}


def test_zstd_without_the_binary_says_how_to_fix_it(store, tmp_path, monkeypatch):
    file = tmp_path / "t.tar.zst"
    file.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 64)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RootfsError, match="install zstd"):
        store.import_tar("t", file)
    assert_empty(store)


def test_name_clash_is_refused_unless_forced(store, tmp_path):
    store.import_tar("t", write_tar(tmp_path / "a.tar", base_members() + [member("./v", data=b"1")]))
    second = write_tar(tmp_path / "b.tar", base_members() + [member("./v", data=b"2")])
    with pytest.raises(RootfsExists, match="--force"):
        store.import_tar("t", second)
    assert (store.resolve("t").path / "v").read_bytes() == b"1"
    assert (store.import_tar("t", second, force=True).path / "v").read_bytes() == b"2"
    assert [r.name for r in store.list()] == [HOST, "t"]


def test_leftovers_of_killed_processes_are_swept(store, tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    leftover = store.root / f".tmp-x-{dead.pid}-abc123"
    (leftover / "root/usr").mkdir(parents=True)
    (leftover / "root").chmod(0o555)  # as a tarball's /proc would be
    store.import_tar("t", write_tar(tmp_path / "t.tar", base_members()))
    assert not leftover.exists()


# -- list, default, rm, export, resolve --------------------------------------------------------

def test_list_default_rm_round_trip(store, tmp_path):
    tar = write_tar(tmp_path / "t.tar", base_members())
    store.import_tar("b", tar)
    store.import_tar("a", tar)
    assert [r.name for r in store.list()] == [HOST, "a", "b"] and store.get_default() == HOST
    store.set_default("b")
    assert store.get_default() == "b" and store.resolve().name == "b"
    assert RootfsStore(store.root).get_default() == "b"  # persisted
    with pytest.raises(RootfsNotFound):
        store.set_default("nope")
    store.set_default(str(tmp_path))
    assert store.get_default() == str(tmp_path)
    store.set_default("b")
    store.remove("b")
    assert [r.name for r in store.list()] == [HOST, "a"] and store.get_default() == HOST
    with pytest.raises(RootfsError, match="built in"):
        store.remove(HOST)
    with pytest.raises(RootfsExists):
        store.export("a", tar)
    store.export("a", tar, force=True)
    with pytest.raises(RootfsError, match="suffix|format"):
        store.export("a", tmp_path / "a.zip")


def test_resolve_host_paths_and_unknown_names(store, tmp_path):
    store.import_tar("mine", write_tar(tmp_path / "t.tar", base_members()))
    assert store.resolve(HOST).kind == "host" and store.resolve(HOST).path is None
    assert store.resolve(str(tmp_path)).path == tmp_path
    with pytest.raises(RootfsNotFound) as err:
        store.resolve("nope")
    assert "host, mine" in str(err.value) and "lis-tui rootfs build" in str(err.value)
    with pytest.raises(RootfsNotFound):
        store.resolve(str(tmp_path / "missing"))


# -- pull from a loopback server ---------------------------------------------------------------

@pytest.fixture
def mirror(tmp_path):
    """A loopback HTTP server holding ubuntu-base 24.04 and 24.04.2 for this arch, and arm64/amd64."""
    base = tmp_path / "mirror"
    release = base / "24.04" / "release"
    release.mkdir(parents=True)
    lines = []
    for point, arch in (("", machine_arch()), (".2", machine_arch()), (".3", "s390x")):
        name = f"ubuntu-base-24.04{point}-base-{arch}.tar.gz"
        extra = [member("./etc/which", data=f"24.04{point}".encode())]
        write_tar(release / name, base_members() + extra, "gz")
        lines.append(f"{hashlib.sha256((release / name).read_bytes()).hexdigest()} *{name}")
    (release / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    handler = functools.partial(_QuietHandler, directory=str(base))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield base, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_pull_picks_the_newest_point_release_and_checks_it(store, mirror):
    _, url = mirror
    lines = []
    found = store.pull("ubuntu:24.04", base_url=url, progress=lines.append)
    assert found.name == "ubuntu-24.04" and (found.path / "etc/which").read_text() == "24.04.2"
    assert f"ubuntu-base-24.04.2-base-{machine_arch()}.tar.gz" in found.source
    assert not (store.root / "ubuntu-24.04" / "download.tar.gz").exists()
    assert any("checksum ok" in line for line in lines)


def test_pull_with_a_wrong_checksum_keeps_nothing(store, mirror):
    base, url = mirror
    sums = base / "24.04/release/SHA256SUMS"
    sums.write_text("".join(f"{'0' * 64} {line.split()[1]}\n" for line in sums.read_text().splitlines()))
    with pytest.raises(RootfsError, match="checksum mismatch"):
        store.pull("ubuntu:24.04", base_url=url, name="u")
    assert_empty(store)


def test_pull_errors_name_the_url_and_the_fix(store, mirror):
    _, url = mirror
    with pytest.raises(RootfsError, match=r"22\.04/release/SHA256SUMS: HTTP 404.*Fix:"):
        store.pull("ubuntu:22.04", base_url=url)
    with pytest.raises(RootfsError, match="lists no ubuntu-base-24.04.*-base-riscv64"):
        store.pull("ubuntu:24.04", base_url=url, arch="riscv64")
    with pytest.raises(RootfsError, match="ubuntu:24.04 or ubuntu:22.04"):
        store.pull("debian:12", base_url=url)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(RootfsError, match="cannot fetch .*--base-url"):
        store.pull("ubuntu:24.04", base_url=dead)
    assert_empty(store)


def test_pull_from_a_file_url_and_name_clash(store, mirror):
    base, _ = mirror
    store.pull("ubuntu:noble", base_url=base.as_uri(), name="u", arch="s390x")
    assert (store.resolve("u").path / "etc/which").read_text() == "24.04.3"
    with pytest.raises(RootfsExists):
        store.pull("ubuntu:24.04", base_url=base.as_uri(), name="u")


# -- the CLI -----------------------------------------------------------------------------------

def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="lis-tui")
    rootfs_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_cli_import_list_default_export_rm(store, tmp_path, capsys):
    tar = write_tar(tmp_path / "t.tar", base_members())
    s = ("rootfs", "--store", str(store.root))
    assert _cli(*s, "import", "mine", str(tar)) == 0
    assert "lis-tui rootfs default mine" in capsys.readouterr().out
    assert _cli(*s, "default", "mine") == 0 and capsys.readouterr().out == "mine\n"
    assert _cli(*s, "list") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "SIZE", "CREATED", "SOURCE"]
    assert out[1].split()[0] == HOST and out[2].split()[:2] == ["*", "mine"] and "import" in out[2]
    assert _cli(*s, "export", "mine", str(tmp_path / "o.tar.xz")) == 0 and (tmp_path / "o.tar.xz").is_file()
    assert _cli(*s, "rm", "mine") == 0 and _cli(*s, "default") == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("host")


def test_cli_errors_are_one_message_with_the_fix(store, tmp_path, capsys):
    assert _cli("rootfs", "--store", str(store.root), "default", "nope") == 1
    err = capsys.readouterr().err
    assert err.startswith("lis-tui rootfs: error: no rootfs named 'nope'") and "Fix:" in err


@pytest.mark.parametrize("sub,words", [("build", ["--suite", "--mirror", "--preset", "paper", "bookworm"]),
                                       ("import", [".tar.zst", "device"]), ("pull", ["--base-url", "SHA256SUMS"]),
                                       ("export", [".tar.gz"]), ("list", ["default"])])
def test_cli_help(sub, words, capsys):
    with pytest.raises(SystemExit) as done:
        _cli("rootfs", sub, "--help")
    out = " ".join(capsys.readouterr().out.split())
    assert done.value.code == 0 and all(word in out for word in words)
