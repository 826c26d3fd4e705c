"""The shell's live output (issue 27 item 4): a watcher (`on_output`) gets a running command's
output while it runs, cleaned as the result is; without one, nothing is reported."""
from __future__ import annotations

import os

import pytest

from isolation import Sandbox
from tools.shell import Shell
from tools.shell_pty import Pty

pytestmark = pytest.mark.sandbox
# Prints a line, then waits for a file the watcher makes once it has seen that line: the command
# can only end if the line was reported while it ran (no clock involved).
WAITS_FOR_THE_WATCHER = ("echo first-line; printf '\\033]52;c;SGFja2Vk\\007\\033[1mbold\\033[0m\\n'; "
                         "for i in $(seq 1 300); do [ -e /tmp/seen ] && break; sleep 0.1; done; "
                         "[ -e /tmp/seen ] && echo after-the-watcher-saw-it")


def test_a_watcher_sees_the_output_before_the_command_ends(tmp_path):
    reports = []
    with Sandbox() as sandbox:
        def watch(text: str, seconds: float, skipped: int) -> None:
            reports.append((text, seconds, skipped))
            if "first-line" in text:
                sandbox.write_file("/tmp/seen", b"")

        with Shell(sandbox, on_output=watch) as shell:
            result = shell.run(WAITS_FOR_THE_WATCHER)
    assert result.exit_code == 0 and "after-the-watcher-saw-it" in result.output, result
    seen = "".join(text for text, _, _ in reports)
    assert seen.startswith("first-line\nbold\n")  # cleaned as the result is: no OSC 52, no SGR
    assert result.output.startswith(seen.rstrip("\n"))
    assert all(seconds > 0 and skipped == 0 for _, seconds, skipped in reports)


def test_a_flood_is_reported_by_its_end_and_says_how_much_was_left_out():
    reports = []
    with Sandbox() as sandbox:
        def watch(text: str, seconds: float, skipped: int) -> None:
            reports.append((text, seconds, skipped))
            if "200000\n" in text:  # the last line: the command may end
                sandbox.write_file("/tmp/seen", b"")

        with Shell(sandbox, on_output=watch) as shell:
            result = shell.run("seq 1 200000; for i in $(seq 1 300); do [ -e /tmp/seen ] && break; "
                               "sleep 0.1; done; [ -e /tmp/seen ] && echo seen")
    assert result.exit_code == 0 and result.output.endswith("200000\nseen")
    lines = sum(text.count("\n") + skipped for text, _, skipped in reports)
    assert lines == 200000  # every line counted, shown or left out
    assert any(skipped for _, _, skipped in reports)
    assert all(len(text) <= 1 << 16 for text, _, _ in reports)


def test_quick_commands_with_a_watcher_keep_their_sentinels():
    reports = []
    with Sandbox() as sandbox, Shell(sandbox, on_output=lambda *r: reports.append(r)) as shell:
        for i in range(20):  # each outlasts a report interval: held output is flushed while waiting
            result = shell.run(f"printf 'a-{i}\\n'; sleep 0.3; printf 'b-{i}'")
            assert (result.output, result.exit_code) == (f"a-{i}\nb-{i}", 0), result
    # whatever the timing, a report is only ever a command's complete first line, once
    texts = [text for text, _, _ in reports]
    assert len(set(texts)) == len(texts) and set(texts) <= {f"a-{i}\n" for i in range(20)}


def test_a_pattern_split_over_two_reads_is_still_found():
    read, write = os.pipe()
    spilled = []
    pty = Pty(read)
    pty.spill = spilled.append
    try:
        os.write(write, b"output line\n\x1fnon")  # the sentinel's head is on its way
        assert pty.wait_for(b"\x1fnonce-", 0.2) is None
        pty.flush(b"\x1fnonce-")
        assert spilled == [b"output line\n"]
        os.write(write, b"ce-r 0 /\x1f")
        assert pty.wait_for(b"\x1fnonce-", 1.0) == b""
    finally:
        os.close(write)
        os.close(read)
