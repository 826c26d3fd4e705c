"""`lis-tui rootfs ...`: build, import, pull, list, remove, export and choose root filesystems."""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import textwrap
import threading
from typing import Any, Callable

from isolation.rootfs import DEFAULT_BASE_URL, HOST, PRESETS, RootfsError, RootfsStore
from tools.terminal_text import safe_terminal_text

_DESCRIPTION = """\
Root filesystems for sandboxes. 'host' (the host's own /usr, /etc, ... read-only) is built in and
is the default until another is chosen. Others live in the store, each shared read-only by every
sandbox that uses it, with a writable layer of its own per sandbox on top."""
_BUILD_EPILOG = """\
examples:
  lis-tui rootfs build ubuntu                       Ubuntu 24.04 from archive.ubuntu.com
  lis-tui rootfs build paper --preset paper         numpy, scipy, sympy, matplotlib, ...
  lis-tui rootfs build deb --suite bookworm --mirror http://deb.debian.org/debian
presets:
""" + "\n".join(textwrap.fill(f"{name}: {', '.join(pkgs)}", 96, initial_indent="  ", subsequent_indent="    ")
               for name, pkgs in PRESETS.items())


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register `rootfs` and its subcommands on the CLI's subparsers."""
    parser = subparsers.add_parser("rootfs", help="build, import, pull and manage root filesystems",
                                   description=_DESCRIPTION)
    parser.add_argument("--store", metavar="DIR", help="store directory "
                        "(default: $LIS_DATA_HOME/rootfs, else $XDG_DATA_HOME/lis-tui/rootfs)")
    sub = parser.add_subparsers(dest="rootfs_command", metavar="COMMAND", required=True)
    for add in (_add_build, _add_import, _add_pull, _add_list, _add_rm, _add_default, _add_export):
        add(sub)
    return parser


def _add_build(sub) -> None:
    p = sub.add_parser("build", help="build a rootfs with rootless mmdebstrap",
                       description="Build a rootfs with rootless `mmdebstrap --mode=unshare` (needs mmdebstrap\n"
                       "and uidmap, and subordinate ids in /etc/subuid). Progress is shown as it goes;\n"
                       "Ctrl-C or a failure leaves nothing behind.", epilog=_BUILD_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="name for the new rootfs")
    p.add_argument("--suite", help="distribution release (default: noble, Ubuntu 24.04)")
    p.add_argument("--mirror", help="archive URL (default: archive.ubuntu.com for Ubuntu, "
                   "deb.debian.org for Debian)")
    p.add_argument("--include", action="append", default=[], metavar="PKG,...",
                   help="extra packages, comma-separated; may be repeated")
    p.add_argument("--preset", choices=sorted(PRESETS), default="minimal", help="package set (default: minimal)")
    p.add_argument("--with-docs", action="store_true", help="keep /usr/share/doc, man pages and translations")
    p.add_argument("--force", action="store_true", help="replace a rootfs of the same name")
    p.set_defaults(func=_guard(_build))


def _add_import(sub) -> None:
    p = sub.add_parser("import", help="import a tarball (docker export, ubuntu-base, rootfs export)",
                       description="Unpack a .tar, .tar.gz, .tar.xz, .tar.bz2 or .tar.zst as a rootfs. "
                       "Members that would land outside it are refused; device nodes are skipped; "
                       "everything becomes owned by you (root inside the sandbox).")
    p.add_argument("name", help="name for the new rootfs")
    p.add_argument("file", help="the tarball")
    p.add_argument("--force", action="store_true", help="replace a rootfs of the same name")
    p.set_defaults(func=_guard(_import))


def _add_pull(sub) -> None:
    p = sub.add_parser("pull", help="download the official ubuntu-base tarball and import it",
                       description="Download ubuntu-base for this machine's architecture (the newest "
                       "point release), check it against the release's SHA256SUMS and import it.")
    p.add_argument("ref", nargs="?", default="ubuntu:24.04", help="ubuntu:24.04 (default) or ubuntu:22.04")
    p.add_argument("--name", help="name for the new rootfs (default: ubuntu-VERSION)")
    p.add_argument("--base-url", default=os.environ.get("LIS_UBUNTU_BASE_URL", DEFAULT_BASE_URL),
                   help="where VERSION/release/SHA256SUMS lives: a mirror or a file:// copy "
                   "(default: $LIS_UBUNTU_BASE_URL, else %(default)s)")
    p.add_argument("--arch", help="architecture (default: this machine's)")
    p.add_argument("--force", action="store_true", help="replace a rootfs of the same name")
    p.set_defaults(func=_guard(_pull))


def _add_list(sub) -> None:
    text = "list root filesystems: name, size, when made, where from (* marks the default)"
    p = sub.add_parser("list", help=text, description=text)
    p.add_argument("--json", action="store_true", help="print JSON, with all metadata")
    p.set_defaults(func=_guard(_list))


def _add_rm(sub) -> None:
    text = "remove root filesystems (if one was the default, 'host' becomes the default)"
    p = sub.add_parser("rm", help=text, description=text)
    p.add_argument("names", nargs="+", metavar="NAME")
    p.set_defaults(func=_guard(_rm))


def _add_default(sub) -> None:
    text = "show or set the rootfs sandboxes use when none is named"
    p = sub.add_parser("default", help=text, description=text)
    p.add_argument("name", nargs="?", help="the new default ('host' for the host system)")
    p.set_defaults(func=_guard(_default))


def _add_export(sub) -> None:
    p = sub.add_parser("export", help="write a rootfs to a tarball",
                       description="Write a rootfs to FILE; the format follows its suffix: .tar, "
                       ".tar.gz/.tgz, .tar.xz, .tar.bz2, .tar.zst.")
    p.add_argument("name")
    p.add_argument("file")
    p.add_argument("--force", action="store_true", help="overwrite FILE")
    p.set_defaults(func=_guard(_export))


def _guard(handler: Callable[[argparse.Namespace, RootfsStore], int]) -> Callable[[argparse.Namespace], int]:
    """Run a handler with its store; errors become a message and exit code 1."""
    def run(args: argparse.Namespace) -> int:
        if threading.current_thread() is threading.main_thread():
            # SIGTERM (kill, a service manager, a CI timeout) ends a build or an import as Ctrl-C
            # does: mmdebstrap's process group is killed and nothing half-made is kept. Python's
            # default would die at once, leaving mmdebstrap and apt running for minutes.
            signal.signal(signal.SIGTERM, _interrupt)
        try:
            return handler(args, RootfsStore(args.store))
        except RootfsError as exc:
            # may name a member of an imported tarball, or a line of a build's output
            print(safe_terminal_text(f"lis-tui rootfs: error: {exc}"), file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("lis-tui rootfs: interrupted; nothing half-made was kept", file=sys.stderr)
            return 130
    return run


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _progress(line: str) -> None:
    print(safe_terminal_text(f"  {line}"), file=sys.stderr, flush=True)


def _build(args, store: RootfsStore) -> int:
    from isolation.rootfs.build import is_ubuntu  # noqa: PLC0415

    suite = args.suite or "noble"
    if args.suite is None and (refused := _distro_name(args.name, args.mirror)):
        print(safe_terminal_text(f"lis-tui rootfs build: {refused}"), file=sys.stderr)
        return 2
    distro = "Ubuntu" if is_ubuntu(suite, args.mirror) else "Debian"
    # Minutes of work: say what is built, since the name says nothing of it.
    print(safe_terminal_text(f"lis-tui rootfs: building {args.name!r}: {distro} {suite} from "
                             f"{args.mirror or 'its default mirror'}, preset {args.preset} (the name "
                             "is only a name; --suite and --mirror choose the distribution)"),
          file=sys.stderr, flush=True)
    include = [pkg for group in args.include for pkg in group.split(",") if pkg]
    found = store.build(args.name, suite=suite, mirror=args.mirror, include=include, preset=args.preset,
                        force=args.force, progress=_progress, slim=not args.with_docs)
    return _made(found)


_DEBIAN = {"debian", "sid", "forky", "trixie", "bookworm", "bullseye", "buster", "stretch"}
_NOT_DEBIAN = {"alpine", "fedora", "arch", "archlinux", "centos", "rocky", "rockylinux", "alma",
               "almalinux", "rhel", "opensuse", "suse", "gentoo", "void", "nixos", "amazonlinux"}


def _distro_name(name: str, mirror: str | None) -> str:
    """Why `name` reads as a distribution that the build without --suite would not make
    (`build debian` would be Ubuntu noble named debian), with the fix; "" when it does not."""
    from isolation.rootfs.build import is_ubuntu  # noqa: PLC0415

    word = re.split(r"[^a-z]", name.lower(), maxsplit=1)[0]
    if word in _NOT_DEBIAN:
        return (f"mmdebstrap builds Debian and Ubuntu only, not {word}; import an image of it "
                f"instead: lis-tui rootfs import {name} image.tar.gz (a docker export, say)")
    if word in _DEBIAN and not (mirror and "debian" in mirror):
        suite = word if word != "debian" else "bookworm"
        return (f"{name!r} is only the new rootfs's name: without --suite it would be Ubuntu noble. "
                f"For Debian: lis-tui rootfs build {name} --suite {suite} --mirror http://deb.debian.org/debian")
    if word not in ("", "noble", "ubuntu") and is_ubuntu(word, None):  # another Ubuntu release
        return (f"{name!r} is only the new rootfs's name: without --suite it would be Ubuntu noble. "
                f"For {word}: lis-tui rootfs build {name} --suite {word}")
    return ""


def _import(args, store: RootfsStore) -> int:
    return _made(store.import_tar(args.name, args.file, force=args.force, progress=_progress))


def _pull(args, store: RootfsStore) -> int:
    found = store.pull(args.ref, name=args.name, base_url=args.base_url, force=args.force,
                       progress=_progress, arch=args.arch)
    return _made(found)


def _made(found) -> int:
    skipped = found.meta.get("skipped_count", 0)
    note = f"; skipped {skipped} device nodes/fifos" if skipped else ""
    print(f"{found.name}: {_size(found.size)} at {found.path}{note}")
    print(f"use it with --rootfs {found.name}, or make it the default: lis-tui rootfs default {found.name}")
    return 0


def _list(args, store: RootfsStore) -> int:
    default, items = store.get_default(), store.list()
    if args.json:
        print(json.dumps([{"name": r.name, "kind": r.kind, "path": str(r.path) if r.path else None,
                           "default": r.name == default, **r.meta} for r in items], indent=1))
        return 0
    rows = [("", "NAME", "SIZE", "CREATED", "SOURCE")]
    # Names and sources are read back from the store (a directory name, meta.json): shown safely.
    rows += [tuple(safe_terminal_text(cell) for cell in ("*" if r.name == default else "", r.name,
                   _size(r.size), r.created[:16].replace("T", " "), r.source)) for r in items]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[4])
    return 0


def _rm(args, store: RootfsStore) -> int:
    for name in args.names:
        store.remove(name)
        print(f"removed {name}")
    return 0


def _default(args, store: RootfsStore) -> int:
    if args.name:
        store.set_default(args.name)
    name = store.get_default()
    print(name if name != HOST else "host (the host's own system, read-only)")
    return 0


def _export(args, store: RootfsStore) -> int:
    file = store.export(args.name, args.file, force=args.force)
    print(f"wrote {file} ({_size(file.stat().st_size)})")
    return 0


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return "-"
