"""Exports keep holes as holes and stop at a cap on data (issue 24, part 4), with real sandboxes.

Three `truncate -s 1G` files cost the sandbox 4 KiB; a copy that fills holes writes 3 GiB onto the
host. Each test makes them for real, shows they are sparse inside (their blocks, from the host),
exports them, and checks the host copies' blocks. `lis-tui run`'s files/ (trajectory.export_output),
the review's export and MCP's export_output all go through `Sandbox.export`; the MCP server and
the review screen are driven for real in tests/lis_tui/test_mcp.py and tests/tui/test_review.py."""
from __future__ import annotations

import hashlib
import os

import pytest

from isolation import Limits, Sandbox, SandboxSpec
from isolation.host.walk import RefusedPaths
from lis_tui.agent.trajectory import export_output

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(300)]
GiB, MiB = 1 << 30, 1 << 20
# Data at 0 and at 64 MiB, holes between and after: 200 MiB long, under 100 KiB of data.
MIXED = ("python3 -c 'import os\nf = open(\"mixed\", \"wb\")\nf.write(os.urandom(5000))\nf.seek(64 << 20)\n"
         "f.write(os.urandom(70000))\nf.truncate(200 << 20)'")
SPARSE = f"cd /testbed/output && truncate -s 1G s1 s2 s3 && {MIXED} && sha256sum mixed"


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MiB):
            h.update(chunk)
    return h.hexdigest()


def on_disk(path) -> int:
    return os.stat(path).st_blocks * 512


def make_sparse(sb: Sandbox) -> str:
    """The three 1 GiB files and `mixed`, shown sparse in the sandbox's layer; mixed's sha256."""
    r = sb.exec(SPARSE, timeout=60)
    assert r.exit_code == 0, r.stderr
    layer = sb.writable / "testbed" / "output"
    for name in ("s1", "s2", "s3"):
        assert os.stat(layer / name).st_size == GiB and on_disk(layer / name) < MiB
    assert on_disk(layer / "mixed") < MiB
    return r.stdout.split()[0]


def assert_sparse_copies(dest, mixed_sha: str) -> None:
    for name in ("s1", "s2", "s3"):
        assert os.stat(dest / name).st_size == GiB
        assert on_disk(dest / name) < MiB, f"{name}: {on_disk(dest / name):,} bytes on the host's disk"
    assert os.stat(dest / "mixed").st_size == 200 * MiB and on_disk(dest / "mixed") < MiB
    assert sha256(dest / "mixed") == mixed_sha  # data and holes round-trip byte for byte


def test_export_and_runs_files_keep_holes_as_holes(tmp_path):
    with Sandbox() as sb:
        mixed = make_sparse(sb)
        sb.export("/testbed/output", tmp_path / "exported")  # the review's F6 and MCP's export_output
        assert_sparse_copies(tmp_path / "exported", mixed)
        report = export_output(sb, tmp_path / "files")  # `lis-tui run`'s files/
        assert report == {"files": ["mixed", "s1", "s2", "s3"], "skipped": []}
        assert_sparse_copies(tmp_path / "files", mixed)


def test_a_dense_file_over_the_export_cap_is_refused_by_name_and_the_rest_is_copied(tmp_path):
    with Sandbox(SandboxSpec(limits=Limits(export_cap=20 * MiB))) as sb:
        mixed = make_sparse(sb)
        assert sb.exec("head -c 30M /dev/zero > /testbed/output/dense").exit_code == 0
        assert on_disk(sb.writable / "testbed" / "output" / "dense") >= 30 * MiB
        with pytest.raises(RefusedPaths) as refused:
            sb.export("/testbed/output", tmp_path / "exported")
        (line,) = refused.value.refused
        assert line.startswith("dense (30.0 MiB of data: over the export cap of 20.0 MiB")
        assert "--export-cap" in line and "export_cap" in line  # how to raise it
        assert not os.path.lexists(tmp_path / "exported" / "dense")  # not a byte of it written
        assert_sparse_copies(tmp_path / "exported", mixed)  # the 3 GiB of holes cost no cap
        report = export_output(sb, tmp_path / "files")
        assert report["files"] == ["mixed", "s1", "s2", "s3"] and report["skipped"] == [line]
        # the cap counts data, not files: a second dense file is refused once the first fits
        assert sb.exec("rm /testbed/output/dense && head -c 12M /dev/zero > /testbed/output/a "
                       "&& head -c 12M /dev/zero > /testbed/output/b").exit_code == 0
        with pytest.raises(RefusedPaths) as refused:
            sb.export("/testbed/output", tmp_path / "again")
        assert [line.split(" (")[0] for line in refused.value.refused] == ["b"]
        assert "12.0 MiB of it taken by the files before it" in refused.value.refused[0]
        assert on_disk(tmp_path / "again" / "a") >= 12 * MiB


def test_the_export_cap_defaults_to_the_disk_limit_else_4_gib():
    assert Limits(disk=5 * GiB).export_bytes() == 5 * GiB
    assert Limits(disk=None).export_bytes() == 4 * GiB
    assert Limits(disk=5 * GiB, export_cap=GiB).export_bytes() == GiB
