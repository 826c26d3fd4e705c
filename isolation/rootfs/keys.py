"""Ubuntu's archive signing keys, shipped with lis-tui so an Ubuntu rootfs builds on any host.

Debian 12 and most non-Ubuntu hosts have no `ubuntu-keyring`, and without Ubuntu's keys apt in
mmdebstrap refuses the archive (`NO_PUBKEY 871920D1991BC93C`). The keys are public data, taken
from Debian's `ubuntu-keyring` package (2023.11.28.1) and checked against a real noble InRelease.
Each file is checked against its fingerprint before use, by parsing the OpenPGP packets here, so
no gpg is needed and a changed file is refused rather than trusted.
"""
from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from .errors import RootfsError

KEY_DIR = Path(__file__).resolve().parent / "keyrings"
UBUNTU_ARCHIVE_KEYS = {
    "ubuntu-archive-2018.asc": "F6ECB3762474EDA9D21B7022871920D1991BC93C",
    "ubuntu-archive-2012.asc": "790BC7277767219C42C86F933B4FE6ACC0B21F32",
}
"""File in KEY_DIR -> the fingerprint of the one key it must hold (Ubuntu Archive Automatic
Signing Key (2018), which signs every release since 18.10, and (2012) for older ones)."""

_PUBLIC_KEY = 6


def ubuntu_archive_keys() -> dict[str, bytes]:
    """The shipped keys (file name -> armored bytes), each verified by its fingerprint."""
    keys = {}
    for name, expected in UBUNTU_ARCHIVE_KEYS.items():
        path = KEY_DIR / name
        try:
            data = path.read_bytes()
            found = fingerprints(data)
        except (OSError, ValueError) as exc:
            raise RootfsError(f"Ubuntu's archive key {path} cannot be read: {exc}. "
                              "Fix: reinstall lis-tui (./install.sh)") from None
        if found != [expected]:
            raise RootfsError(f"Ubuntu's archive key {path} has fingerprint {', '.join(found) or 'none'}, "
                              f"not {expected}. Fix: reinstall lis-tui (./install.sh)")
        keys[name] = data
    return keys


def write_keyring(directory: Path) -> list[Path]:
    """Write the verified keys into `directory` (made readable to all: mmdebstrap's apt runs as
    a subordinate uid), one binary `.gpg` file each, the form every apt version reads; returns
    the files."""
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    files = []
    for name, data in ubuntu_archive_keys().items():
        file = directory / (Path(name).stem + ".gpg")
        file.write_bytes(_dearmor(data))
        file.chmod(0o644)
        files.append(file)
    return files


def fingerprints(armored: bytes) -> list[str]:
    """The v4 fingerprints of the primary public keys in an ASCII-armored OpenPGP key block."""
    found = []
    for tag, body in _packets(_dearmor(armored)):
        if tag == _PUBLIC_KEY:
            if body[:1] != b"\x04":
                raise ValueError(f"a version {body[0]} key; only version 4 keys are expected")
            found.append(hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper())
    return found


def _dearmor(armored: bytes) -> bytes:
    lines = armored.decode("ascii").splitlines()
    try:
        start = lines.index("-----BEGIN PGP PUBLIC KEY BLOCK-----")
        end = lines.index("-----END PGP PUBLIC KEY BLOCK-----", start)
        blank = lines.index("", start)  # armor headers end at the first empty line
    except ValueError:
        raise ValueError("not an ASCII-armored public key block") from None
    body = [line for line in lines[blank + 1:end] if not line.startswith("=")]  # '=' starts the CRC
    return base64.b64decode("".join(body), validate=True)


def _packets(data: bytes):
    """(tag, body) of each OpenPGP packet (RFC 4880 section 4.2, old and new formats)."""
    at = 0
    while at < len(data):
        head = data[at]
        if not head & 0x80:
            raise ValueError(f"bad packet header at byte {at}")
        if head & 0x40:  # new format
            tag, at = head & 0x3F, at + 1
            first = data[at]
            if first < 192:
                length, at = first, at + 1
            elif first < 224:
                length, at = ((first - 192) << 8) + data[at + 1] + 192, at + 2
            elif first == 255:
                length, at = int.from_bytes(data[at + 1:at + 5], "big"), at + 5
            else:
                raise ValueError("partial-length packets do not occur in key blocks")
        else:
            tag, size = (head >> 2) & 0x0F, (1, 2, 4, 0)[head & 0x03]
            if not size:
                raise ValueError("indeterminate-length packets do not occur in key blocks")
            length, at = int.from_bytes(data[at + 1:at + 1 + size], "big"), at + 1 + size
        if at + length > len(data):
            raise ValueError("truncated packet")
        yield tag, data[at:at + length]
        at += length
