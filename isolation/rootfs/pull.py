"""Find and download the official ubuntu-base tarball, checked against the release's SHA256SUMS."""
from __future__ import annotations

import hashlib
import http.client
import platform
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import RootfsError

DEFAULT_BASE_URL = "https://cdimage.ubuntu.com/ubuntu-base/releases"
_CODENAMES = {"noble": "24.04", "jammy": "22.04", "focal": "20.04"}
_TIMEOUT = 60


@dataclass(frozen=True)
class BaseImage:
    """One ubuntu-base tarball and the checksum its release publishes for it."""

    version: str
    url: str
    sha256: str


def machine_arch() -> str:
    """This machine's architecture as Debian and Ubuntu name it."""
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "armhf", "ppc64le": "ppc64el",
            "i686": "i386"}.get(machine, machine)


def parse_ref(ref: str) -> str:
    """'ubuntu:24.04' or 'ubuntu:noble' -> '24.04'."""
    match = re.fullmatch(r"ubuntu:([\w.]+)", ref)
    version = _CODENAMES.get(match.group(1), match.group(1)) if match else ""
    if not re.fullmatch(r"\d\d\.\d\d", version):
        raise RootfsError(f"cannot pull {ref!r}. Fix: use ubuntu:24.04 or ubuntu:22.04")
    return version


def find_image(version: str, base_url: str, arch: str) -> BaseImage:
    """The newest point release of `version` for `arch` listed in the release's SHA256SUMS."""
    release = f"{base_url.rstrip('/')}/{version}/release"
    sums = _fetch(f"{release}/SHA256SUMS").decode(errors="replace")
    pattern = re.compile(rf"ubuntu-base-{re.escape(version)}(?:\.(\d+))?-base-{re.escape(arch)}\.tar\.gz")
    found: dict[int, BaseImage] = {}
    for line in sums.splitlines():
        fields = line.split()
        match = pattern.fullmatch(fields[1].lstrip("*")) if len(fields) == 2 else None
        if match:
            url = f"{release}/{fields[1].lstrip('*')}"
            found[int(match.group(1) or 0)] = BaseImage(version, url, fields[0].lower())
    if not found:
        raise RootfsError(f"{release}/SHA256SUMS lists no ubuntu-base-{version}*-base-{arch}.tar.gz. "
                          "Fix: check the release and --base-url (it should hold VERSION/release/)")
    return found[max(found)]


def download(image: BaseImage, dest: Path, progress: Callable[[str], None] | None = None) -> str:
    """Save the tarball to `dest` and check its sha256; a mismatch is an error."""
    digest = hashlib.sha256()
    with _open(image.url) as response, open(dest, "wb") as out:
        total, done, shown = int(response.headers.get("Content-Length") or 0), 0, -1
        try:
            while chunk := response.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                if progress and total and done * 10 // total != shown:
                    shown = done * 10 // total
                    progress(f"downloaded {done >> 20} of {total >> 20} MiB")
        except (http.client.HTTPException, TimeoutError, ConnectionError) as exc:
            raise RootfsError(f"the download of {image.url} broke off ({exc!r}). Fix: try again") from None
    if digest.hexdigest() != image.sha256:
        raise RootfsError(f"checksum mismatch for {image.url}: SHA256SUMS says {image.sha256}, "
                          f"the download is {digest.hexdigest()}. Nothing was kept. "
                          "Fix: try again; if it persists, the mirror is damaged or tampered with")
    return image.sha256


def _fetch(url: str) -> bytes:
    with _open(url) as response:
        return response.read()


def _open(url: str):
    try:
        return urllib.request.urlopen(url, timeout=_TIMEOUT)  # noqa: S310 (file:// mirrors are wanted)
    except urllib.error.HTTPError as exc:
        raise RootfsError(f"{url}: HTTP {exc.code} {exc.reason}. "
                          "Fix: check the version (24.04, 22.04) and --base-url") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RootfsError(f"cannot fetch {url}: {reason}. Fix: check the network, or pass --base-url "
                          "with a reachable mirror or a local copy (file:///path)") from None
