"""Build a rootfs with rootless `mmdebstrap --mode=unshare`, streamed straight into the store.

mmdebstrap writes a tarball to a pipe and we unpack it with our own safe extractor: a directory
output from an unprivileged mmdebstrap would be owned by subordinate uids, which a single-uid
sandbox cannot use, while files we write ourselves belong to the invoking user.
"""
from __future__ import annotations

import collections
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO, Callable

from .errors import RootfsError
from .keys import UBUNTU_ARCHIVE_KEYS, write_keyring
from .safe import process_alive, remove_tree
from .tar import ExtractStats, extract

Progress = Callable[[str], None]

PRESETS: dict[str, tuple[str, ...]] = {
    "minimal": ("bash", "coreutils", "python3", "python3-pip", "ca-certificates", "curl", "git"),
    "paper": ("bash", "coreutils", "python3", "python3-pip", "python3-numpy", "python3-sympy",
              "python3-scipy", "python3-matplotlib", "python3-mpmath", "ipython3", "python3-chardet",
              "ca-certificates", "git", "curl", "wget", "build-essential"),
}
"""Packages each preset installs on top of the essential set and apt."""

# Docs, man pages and translations are a third of a small rootfs and a model rarely reads them;
# dpkg keeps these rules inside the rootfs, so later apt-get installs stay slim too.
_SLIM = ("path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
         "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
         "path-exclude=/usr/share/locale/*", "path-include=/usr/share/locale/locale.alias",
         "path-exclude=/usr/share/lintian/*")
_SCRATCH_PREFIX = "lis-tui-mmdebstrap-"
_UBUNTU_FALLBACK = {"focal", "jammy", "noble", "oracular", "plucky", "questing"}

_HINTS = (
    (r"does not have a Release file|404\s+Not Found",
     "the mirror {mirror} has no suite {suite!r}. Fix: check --suite and --mirror "
     "(Debian: --suite bookworm --mirror http://deb.debian.org/debian)"),
    (r"Could not (connect|resolve)|Failed to fetch|Temporary failure resolving|Connection failed",
     "the mirror {mirror} could not be reached. Fix: check the network or pass --mirror with a "
     "reachable one (Debian: --suite bookworm --mirror http://deb.debian.org/debian)"),
    (r"NO_PUBKEY|not signed|GPG error|signed-by",
     "apt could not check the signature of {mirror}. Fix: {keys_fix}"),
    (r"Unable to locate package|has no installation candidate",
     "a requested package does not exist in {suite!r}. Fix: check --include and --preset"),
    (r"subuid|subgid|newuidmap|unshare",
     "rootless mmdebstrap needs subordinate ids. Fix: apt install uidmap, and add "
     "'USER:100000:65536' to /etc/subuid and /etc/subgid"),
    (r"No space left on device", "the disk filled up (mmdebstrap builds under $TMPDIR, default /tmp). "
     "Fix: free space, or point TMPDIR at a bigger world-writable directory"),
)


def packages_for(preset: str, include: tuple[str, ...] | list[str]) -> list[str]:
    """The preset's packages plus the extra ones, without duplicates."""
    if preset not in PRESETS:
        raise RootfsError(f"unknown preset {preset!r}. Fix: use one of {', '.join(PRESETS)}")
    return list(dict.fromkeys([*PRESETS[preset], *include]))


def is_ubuntu(suite: str, mirror: str | None) -> bool:
    """Whether `suite` is an Ubuntu release (then 'universe' is needed for the paper preset)."""
    if mirror and "ubuntu" in mirror:
        return True
    try:
        rows = Path("/usr/share/distro-info/ubuntu.csv").read_text().splitlines()[1:]
    except OSError:
        rows = []
    return suite in _UBUNTU_FALLBACK | {row.split(",")[2] for row in rows if row.count(",") >= 2}


def mmdebstrap_argv(suite: str, mirror: str | None, packages: list[str], slim: bool = True) -> list[str]:
    """The mmdebstrap command that writes the rootfs as a tarball to stdout."""
    components = "main,universe" if is_ubuntu(suite, mirror) else "main"
    argv = ["mmdebstrap", "--mode=unshare", "--format=tar", "--variant=apt",
            f"--components={components}", f"--include={','.join(packages)}"]
    if slim:
        argv += [f"--dpkgopt={rule}" for rule in _SLIM]
    return argv + [suite, "-"] + ([mirror] if mirror else [])


def run_mmdebstrap(argv: list[str], dest: Path, progress: Progress | None,
                   ubuntu_keys: bool = False) -> tuple[ExtractStats, str]:
    """Run mmdebstrap, unpack its tarball into `dest`; returns what was written and its sha256.
    With `ubuntu_keys`, apt checks the archive against the Ubuntu keys shipped with lis-tui."""
    if not shutil.which(argv[0]):
        raise RootfsError("mmdebstrap is not installed. Fix: apt install mmdebstrap uidmap")
    _sweep_scratch()
    scratch = _make_scratch()
    try:
        if ubuntu_keys:
            argv = [argv[0], *_keyring_args(scratch), *argv[1:]]
    except BaseException:
        _remove_scratch(scratch)
        raise
    if progress:
        progress(" ".join(argv))
    log: collections.deque[str] = collections.deque(maxlen=40)
    # A session of its own: on failure mmdebstrap sends SIGHUP to its whole process group.
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env={**os.environ, "TMPDIR": str(scratch)})
    pump = threading.Thread(target=_pump, args=(proc.stderr, log, progress), daemon=True)
    pump.start()
    stream = _HashingReader(proc.stdout)
    try:
        try:
            stats = extract(stream, dest, "the tarball from mmdebstrap")
            stream.drain()
        except RootfsError:
            if stream.eof and proc.wait() != 0:  # mmdebstrap stopped first: its error is the real one
                pump.join()
                raise _failure(argv, log, shown=progress is not None) from None
            raise
        if proc.wait() != 0:
            pump.join()
            raise _failure(argv, log, shown=progress is not None)
        return stats, stream.hexdigest()
    finally:
        _stop(proc)
        pump.join(timeout=10)
        proc.stdout.close()
        if not pump.is_alive():
            proc.stderr.close()
        _remove_scratch(scratch)


def _keyring_args(scratch: Path) -> list[str]:
    """Make apt trust only the Ubuntu keys shipped with lis-tui, copied into the scratch (what apt
    reads is what was verified, and readable to mmdebstrap's subordinate uids). A directory sets
    apt's trusted parts, a file its trusted keyring (else the host's /etc/apt/trusted.gpg counts);
    mmdebstrap's signed-by guess is skipped, as it would add the host's keyring for the suite."""
    files = write_keyring(scratch / "ubuntu-keyring")
    return [f"--keyring={files[0].parent}", f"--keyring={files[0]}", "--skip=check/signed-by"]


def _pump(pipe: BinaryIO, log: collections.deque, progress: Progress | None) -> None:
    for raw in pipe:
        line = raw.decode(errors="replace").rstrip()
        log.append(line)
        if progress and line:
            progress(line)


def _stop(proc: subprocess.Popen) -> None:
    """Kill what is left of mmdebstrap: its main process ignores SIGINT and SIGTERM until the
    setup ends, a minute away; its scratch is removed by us afterwards."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _make_scratch() -> Path:
    """A TMPDIR of mmdebstrap's own, so a killed run leaves nothing we cannot find: its chroot
    and gpg home go there. Unshare mode needs it world-writable (the chroot's root is a subuid)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-"))
    scratch.chmod(0o1777)
    return scratch


def _sweep_scratch() -> None:
    """Remove the scratch of runs whose process is gone (killed with -9)."""
    for path in Path(tempfile.gettempdir()).glob(f"{_SCRATCH_PREFIX}*"):
        pid = path.name[len(_SCRATCH_PREFIX):].split("-")[0]
        if pid.isdigit() and path.stat().st_uid == os.getuid() and not process_alive(int(pid)):
            _remove_scratch(path)


def _remove_scratch(path: Path) -> None:
    """Run unprivileged, mmdebstrap's chroot belongs to subordinate uids: what we cannot remove
    ourselves goes from a user namespace that maps them, as mmdebstrap itself does it."""
    try:
        remove_tree(path)
    except PermissionError:
        subprocess.run(["unshare", "--map-auto", "--map-root-user", "rm", "-rf", "--", str(path)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def _failure(argv: list[str], log: collections.deque, shown: bool) -> RootfsError:
    """The error for a failed run: the hint, and mmdebstrap's last error lines unless `shown`
    (progress printed them already; printing them again doubled every error on the terminal)."""
    suite, mirror = _suite_and_mirror(argv)
    text = "\n".join(log)
    hint = next((h for pattern, h in _HINTS if re.search(pattern, text)), "Fix: see mmdebstrap's output above")
    message = "mmdebstrap failed: " + hint.format(suite=suite, mirror=mirror, keys_fix=_keys_fix(argv))
    if shown:
        return RootfsError(message)
    errors = [line for line in log if line.startswith(("E:", "W:", "Err:", "  "))][-8:]
    return RootfsError(message + "\n" + "\n".join(errors or list(log)[-8:]))


def _keys_fix(argv: list[str]) -> str:
    if any(arg.startswith("--keyring=") for arg in argv):
        return (f"lis-tui checks Ubuntu's archive with the keys it ships (fingerprints "
                f"{', '.join(UBUNTU_ARCHIVE_KEYS.values())}); a mirror signed with another key is not "
                "Ubuntu's archive: check --mirror, or for Debian use --suite bookworm "
                "--mirror http://deb.debian.org/debian")
    return "install the distribution's keyring on this machine (Debian: apt install debian-archive-keyring)"


def _suite_and_mirror(argv: list[str]) -> tuple[str, str]:
    dash = len(argv) - 1 - argv[::-1].index("-")
    mirror = argv[dash + 1] if len(argv) > dash + 1 else f"(mmdebstrap's default for {argv[dash - 1]})"
    return argv[dash - 1], mirror


class _HashingReader:
    """Passes reads through, hashing them and noting the end of the stream."""

    def __init__(self, raw: BinaryIO):
        self.raw, self.eof, self._hash = raw, False, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.eof = self.eof or not data
        self._hash.update(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
