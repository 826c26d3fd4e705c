"""Ubuntu's archive keys shipped with lis-tui: their fingerprints, and that apt in mmdebstrap
trusts them and nothing else when it builds an Ubuntu rootfs (real mmdebstrap, loopback mirror)."""
from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from isolation.rootfs import keys as rootfs_keys
from isolation.doctor import check_ubuntu_build
from isolation.rootfs import HOST, RootfsError, RootfsStore
from isolation.rootfs.keys import UBUNTU_ARCHIVE_KEYS, fingerprints, ubuntu_archive_keys
from lis_tui.commands import rootfs as rootfs_cli

UBUNTU_2018 = "F6ECB3762474EDA9D21B7022871920D1991BC93C"  # the key `NO_PUBKEY 871920D1991BC93C` names


def test_the_shipped_keys_are_ubuntus_archive_keys():
    keys = ubuntu_archive_keys()
    assert UBUNTU_ARCHIVE_KEYS["ubuntu-archive-2018.asc"] == UBUNTU_2018
    assert {name: fingerprints(data) for name, data in keys.items()} == {
        "ubuntu-archive-2018.asc": [UBUNTU_2018],
        "ubuntu-archive-2012.asc": ["790BC7277767219C42C86F933B4FE6ACC0B21F32"]}


@pytest.mark.skipif(not shutil.which("gpg"), reason="gpg is not installed")
def test_our_fingerprints_agree_with_gpg(tmp_path):
    """The parser that guards the keys says what gpg says, for ours and for the host's keys."""
    files = [rootfs_keys.KEY_DIR / name for name in UBUNTU_ARCHIVE_KEYS]
    files += sorted(Path("/etc/apt/trusted.gpg.d").glob("*.asc"))[:4]
    for file in files:
        shown = subprocess.run(["gpg", "--homedir", str(tmp_path), "--show-keys", "--with-colons", str(file)],
                               capture_output=True, text=True, check=True).stdout.splitlines()
        # the first fpr line after each pub line is its primary key's (rvk lines may come between)
        primary = [next(f.split(":")[9] for f in shown[i:] if f.startswith("fpr:"))
                   for i, line in enumerate(shown) if line.startswith("pub:")]
        assert fingerprints(file.read_bytes()) == primary, file
    assert len(files) >= 2
    written = rootfs_keys.write_keyring(tmp_path / "keyring")  # the binary copies a build hands to apt
    shown = subprocess.run(["gpg", "--homedir", str(tmp_path), "--show-keys", "--with-colons", *map(str, written)],
                           capture_output=True, text=True, check=True).stdout
    assert [line.split(":")[9] for line in shown.splitlines() if line.startswith("fpr:")] == \
        list(UBUNTU_ARCHIVE_KEYS.values())


def test_a_changed_or_missing_key_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(rootfs_keys, "KEY_DIR", tmp_path)
    for name in UBUNTU_ARCHIVE_KEYS:  # the keys swapped: each file holds the wrong one
        other = next(n for n in UBUNTU_ARCHIVE_KEYS if n != name)
        shutil.copy(Path(rootfs_keys.__file__).parent / "keyrings" / other, tmp_path / name)
    with pytest.raises(RootfsError, match="not F6ECB.*Fix: reinstall lis-tui"):
        ubuntu_archive_keys()
    check = check_ubuntu_build()
    assert check.status == "warn" and "cannot be built" in check.detail and "reinstall" in check.fix
    (tmp_path / "ubuntu-archive-2018.asc").unlink()
    with pytest.raises(RootfsError, match="cannot be read.*Fix: reinstall lis-tui"):
        ubuntu_archive_keys()


def test_doctor_says_an_ubuntu_rootfs_can_be_built_here():
    check = check_ubuntu_build()
    if not shutil.which("mmdebstrap"):
        assert check.status == "warn" and "apt-get install mmdebstrap" in check.fix
    else:
        assert check.status == "ok" and "keys" in check.detail


# -- real mmdebstrap against a loopback mirror --------------------------------------------------

@pytest.fixture
def debian_signed_mirror(tmp_path, debian_mirror):
    """A loopback mirror at .../ubuntu whose InRelease is Debian's real one: signed, but not by
    Ubuntu. The host trusts Debian's keys, so only a build that trusts Ubuntu's alone refuses it."""
    dists = tmp_path / "mirror" / "ubuntu" / "dists" / "bookworm"
    dists.mkdir(parents=True)
    try:
        with urllib.request.urlopen(f"{debian_mirror}/dists/bookworm/InRelease", timeout=15) as answer:
            (dists / "InRelease").write_bytes(answer.read())
    except OSError as exc:
        pytest.skip(f"the Debian mirror is unreachable ({exc}); set LIS_TEST_DEBIAN_MIRROR")
    handler = functools.partial(_QuietHandler, directory=str(tmp_path / "mirror"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/ubuntu"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.mark.sandbox
@pytest.mark.skipif(not shutil.which("mmdebstrap"), reason="mmdebstrap is not installed")
def test_an_ubuntu_build_trusts_only_the_shipped_keys_and_says_each_error_once(tmp_path, debian_signed_mirror,
                                                                               capsys):
    store = tmp_path / "store"
    parser = argparse.ArgumentParser(prog="lis-tui")
    rootfs_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["rootfs", "--store", str(store), "build", "x", "--suite", "bookworm",
                              "--mirror", debian_signed_mirror])
    assert args.func(args) == 1
    err = capsys.readouterr().err
    said, command = err.splitlines()[:2]  # what it builds, then mmdebstrap's command line
    assert said.startswith("lis-tui rootfs: building 'x': Ubuntu bookworm")
    assert command.lstrip().startswith("mmdebstrap --keyring=") and "--skip=check/signed-by" in command
    keyring = Path(command.split("--keyring=")[1].split()[0])
    assert keyring.name == "ubuntu-keyring" and not keyring.exists()  # a copy in the scratch, gone now
    assert "NO_PUBKEY 6ED0E7B82643E131" in err  # Debian's bookworm key: apt did not trust the host's
    error_lines = [line.strip() for line in err.splitlines() if line.strip().startswith("E: ")]
    assert error_lines and len(error_lines) == len(set(error_lines)), err
    last = err.splitlines()[-1]
    assert last.startswith("lis-tui rootfs: error: mmdebstrap failed: apt could not check the signature")
    assert UBUNTU_2018 in last and "Fix:" in last and "ubuntu-keyring" not in last
    assert [r.name for r in RootfsStore(store).list()] == [HOST]
    assert not [p for p in Path("/tmp").glob(f"lis-tui-mmdebstrap-{os.getpid()}-*")]


@pytest.mark.sandbox
@pytest.mark.skipif(not os.environ.get("LIS_TEST_UBUNTU_MIRROR"),
                    reason="set LIS_TEST_UBUNTU_MIRROR (e.g. http://archive.ubuntu.com/ubuntu) to build Ubuntu")
def test_an_ubuntu_rootfs_builds_on_this_host_with_the_shipped_keys(tmp_path):
    """Opt-in: a real Ubuntu 24.04 build (about 30 s and 100 MB from the archive)."""
    found = RootfsStore(tmp_path / "store").build("ubuntu", suite="noble",
                                                  mirror=os.environ["LIS_TEST_UBUNTU_MIRROR"])
    assert 'NAME="Ubuntu"' in (found.path / "etc/os-release").read_text()
    assert (found.path / "etc/apt/trusted.gpg.d/ubuntu-keyring-2018-archive.gpg").is_file()  # apt inside
