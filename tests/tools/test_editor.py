"""str_replace_editor against a real sandbox: every file is read back through the sandbox."""

import re

import pytest

from tools import ToolError
from tools.editor import CLIPPED_MARKER, Editor, EditorConfig

pytestmark = pytest.mark.sandbox

HEADER = "Here's the result of running `cat -n` on {}:\n"


@pytest.fixture
def ed(sb):
    return Editor(sb)


@pytest.fixture
def d(request):
    """A directory of this test's own inside the sandbox (created by the first write)."""
    return "/testbed/" + re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)


def put(sb, path, data: bytes, mode=0o644):
    sb.write_file(path, data, mode=mode)
    return path


def error_of(call, *args, **kwargs) -> str:
    with pytest.raises(ToolError) as info:
        call(*args, **kwargs)
    return str(info.value)


# -- view -----------------------------------------------------------------------------------


def test_view_matches_cat_n_and_keeps_tabs(sb, ed, d):
    p = put(sb, f"{d}/f.py", b"def f():\n\treturn 1\n\n  x = '\xc3\xa9'\n")
    out = ed.run("view", p).output
    assert out == HEADER.format(p) + sb.exec(["cat", "-n", p]).stdout
    assert "     2\t\treturn 1\n" in out  # %6d, a tab, then the line's own tab unexpanded


def test_view_counts_lines_like_cat_n(sb, ed, d):
    terminated = put(sb, f"{d}/a", b"one\ntwo\n")
    unterminated = put(sb, f"{d}/b", b"one\ntwo")
    expected = "     1\tone\n     2\ttwo\n"
    assert ed.run("view", terminated).output == HEADER.format(terminated) + expected
    assert ed.run("view", unterminated).output == HEADER.format(unterminated) + expected


def test_view_empty_file(sb, ed, d):
    p = put(sb, f"{d}/empty", b"")
    assert ed.run("view", p).output == f"The file {p} is empty."


def test_view_range(sb, ed, d):
    p = put(sb, f"{d}/f", b"".join(b"line %d\n" % i for i in range(1, 11)))
    assert ed.run("view", p, view_range=[3, 4]).output == (
        HEADER.format(p) + "     3\tline 3\n     4\tline 4\n"
    )
    tail = ed.run("view", p, view_range=[9, -1]).output
    assert tail == HEADER.format(p) + "     9\tline 9\n    10\tline 10\n"
    assert ed.run("view", p, view_range=[10, 10]).output.endswith("    10\tline 10\n")


@pytest.mark.parametrize(
    "view_range, message",
    [
        ([1], "Invalid `view_range`. It should be a list of two integers."),
        ([1, 2, 3], "Invalid `view_range`. It should be a list of two integers."),
        ([0, 2], "Invalid `view_range`: [0, 2]. Its first element `0` should be within the "
                 "range of lines of the file: [1, 5]"),
        ([6, 6], "Invalid `view_range`: [6, 6]. Its first element `6` should be within the "
                 "range of lines of the file: [1, 5]"),
        ([4, 3], "Invalid `view_range`: [4, 3]. Its second element `3` should be larger or "
                 "equal than its first `4`"),
    ],
)  # fmt: skip
def test_view_range_is_validated(sb, ed, d, view_range, message):
    p = put(sb, f"{d}/f", b"1\n2\n3\n4\n5\n")
    assert error_of(ed.run, "view", p, view_range=view_range) == message


def test_view_directory_two_levels_without_hidden(sb, ed, d):
    for rel in ["a.txt", "sub/b.txt", "sub/deep/c.txt", "sub/.h", ".hidden/x", "z/y"]:
        put(sb, f"{d}/tree/{rel}", b"x\n")
    out = ed.run("view", f"{d}/tree/").output  # a trailing slash is fine
    t = f"{d}/tree"
    assert out == (
        f"Here's the files and directories up to 2 levels deep in {t}, excluding hidden items:\n"
        f"{t}\n{t}/a.txt\n{t}/sub\n{t}/sub/b.txt\n{t}/sub/deep\n{t}/z\n{t}/z/y\n"
    )


def test_view_inside_a_hidden_directory_lists_it(sb, ed, d):
    put(sb, f"{d}/.cache/item", b"x\n")
    assert ed.run("view", f"{d}/.cache").output.endswith(f"{d}/.cache\n{d}/.cache/item\n")


def test_long_directory_listing_is_clipped(sb, d):
    for i in range(40):
        put(sb, f"{d}/many/file{i:02d}", b"")
    r = Editor(sb, EditorConfig(max_output_chars=400)).run("view", f"{d}/many")
    assert r.truncated and r.output.endswith(CLIPPED_MARKER + "\n")
    assert f"{d}/many/file00\n" in r.output and "file39" not in r.output


def test_links_resolve_inside_the_sandbox(sb, ed, d):
    # /tmp inside is the sandbox's own: a host-side read of the link would miss the file
    sb.write_file("/tmp/editor-link-target", b"inside\n")
    assert sb.exec(["sh", "-c", f"mkdir -p {d} && ln -s /tmp/editor-link-target {d}/link"]).exit_code == 0
    assert ed.run("view", f"{d}/link").output.endswith("     1\tinside\n")
    ed.run("str_replace", f"{d}/link", old_str="inside", new_str="edited")
    assert sb.read_file("/tmp/editor-link-target") == b"edited\n"


def test_view_range_on_directory_is_refused(sb, ed, d):
    put(sb, f"{d}/f", b"x\n")
    message = "The `view_range` parameter is not allowed when `path` points to a directory."
    assert error_of(ed.run, "view", d, view_range=[1, 2]) == message


def test_missing_path_and_relative_path(ed, d):
    assert error_of(ed.run, "view", f"{d}/nope") == (
        f"The path {d}/nope does not exist. Please provide a valid path."
    )
    assert error_of(ed.run, "view", "src/x.py") == (
        "The path src/x.py is not an absolute path, it should start with `/`. "
        "Maybe you meant /testbed/src/x.py?"
    )


def test_long_view_is_clipped_with_marker(sb, d):
    ed = Editor(sb, EditorConfig(max_output_chars=2000))
    p = put(sb, f"{d}/long", b"".join(b"%05d\n" % i for i in range(1000)))
    r = ed.run("view", p)
    assert r.truncated
    assert r.output.endswith("\n" + CLIPPED_MARKER + "\n")
    body = r.output[len(HEADER.format(p)) : -len(CLIPPED_MARKER) - 1]
    assert 1900 < len(body) <= 2001
    assert body.endswith("   153\t00152\n")  # cut at a line end: 13 chars a line
    assert not ed.run("view", p, view_range=[1, 10]).truncated


def test_binary_non_utf8_oversize_and_special_files_are_refused(sb, d):
    ed = Editor(sb, EditorConfig(max_file_bytes=100))
    binary = put(sb, f"{d}/bin", b"ELF\x00\x01\x02")
    latin1 = put(sb, f"{d}/latin1", b"caf\xe9\n")
    big = put(sb, f"{d}/big", b"x" * 101)
    assert "looks binary" in error_of(ed.run, "view", binary)
    assert "not UTF-8 text (bad byte at offset 3)" in error_of(ed.run, "str_replace", latin1, old_str="caf")
    assert "101 bytes, over the editor's limit of 100" in error_of(ed.run, "view", big)
    assert sb.read_file(big) == b"x" * 101
    assert sb.exec(["mkfifo", f"{d}/fifo"]).exit_code == 0
    assert error_of(ed.run, "view", f"{d}/fifo") == f"The path {d}/fifo is a fifo, not a regular file."


# -- create ---------------------------------------------------------------------------------


def test_create_writes_exact_bytes_and_parent_dirs(sb, ed, d):
    text = "a\tb\r\nno final newline ü"
    r = ed.run("create", f"{d}/new/deeper/f.txt", file_text=text)
    assert r.output == f"File created successfully at: {d}/new/deeper/f.txt"
    assert sb.read_file(f"{d}/new/deeper/f.txt") == text.encode()


def test_create_refuses_existing_file_and_directory(sb, ed, d):
    p = put(sb, f"{d}/f", b"keep\n")
    message = f"File already exists at: {p}. Cannot overwrite files using command `create`."
    assert error_of(ed.run, "create", p, file_text="new") == message
    assert sb.read_file(p) == b"keep\n"
    assert "already exists" in error_of(ed.run, "create", d, file_text="new")
    assert error_of(ed.run, "create", f"{d}/g") == "Parameter `file_text` is required for command: create"


# -- str_replace ----------------------------------------------------------------------------


def test_str_replace_once_with_snippet(sb, ed, d):
    p = put(sb, f"{d}/f", b"".join(b"line %d\n" % i for i in range(1, 13)))
    r = ed.run("str_replace", p, old_str="line 7\n", new_str="seven\nand a half\n")
    numbered = "".join(f"{i:6}\t{s}\n" for i, s in zip(range(3, 14), [
        "line 3", "line 4", "line 5", "line 6", "seven", "and a half",
        "line 8", "line 9", "line 10", "line 11", "line 12"]))  # fmt: skip
    assert r.output == (
        f"The file {p} has been edited. Here's the result of running `cat -n` on a snippet of "
        f"{p}:\n{numbered}Review the changes and make sure they are as expected. "
        "Edit the file again if necessary."
    )
    assert sb.read_file(p) == b"".join(b"line %d\n" % i for i in range(1, 7)) + (
        b"seven\nand a half\n" + b"".join(b"line %d\n" % i for i in range(8, 13))
    )
    assert not r.error and r.exit_code is None


def test_str_replace_keeps_tabs_final_newline_and_mode(sb, ed, d):
    p = put(sb, f"{d}/run.sh", b"#!/bin/sh\nif true; then\n\techo old\nfi", mode=0o755)
    ed.run("str_replace", p, old_str="\techo old", new_str="\techo new\t# tab")
    assert sb.read_file(p) == b"#!/bin/sh\nif true; then\n\techo new\t# tab\nfi"
    assert sb.exec(["stat", "-c", "%a", p]).stdout.strip() == "755"


def test_str_replace_without_new_str_deletes(sb, ed, d):
    p = put(sb, f"{d}/f", b"keep\ndrop me\nkeep too\n")
    ed.run("str_replace", p, old_str="drop me\n")
    assert sb.read_file(p) == b"keep\nkeep too\n"


def test_str_replace_not_found_leaves_file(sb, ed, d):
    p = put(sb, f"{d}/f", b"\tindented\n")
    message = f"No replacement was performed, old_str `    indented` did not appear verbatim in {p}."
    assert error_of(ed.run, "str_replace", p, old_str="    indented", new_str="x") == message
    assert sb.read_file(p) == b"\tindented\n"


def test_str_replace_several_lists_lines(sb, ed, d):
    p = put(sb, f"{d}/f", b"x = 1\ny = 2\nx = 1; x = 1\n\nx = 1\ny = 2\n")
    message = (
        "No replacement was performed. Multiple occurrences of old_str `x = 1` in lines "
        "[1, 3, 5]. Please ensure it is unique"
    )
    assert error_of(ed.run, "str_replace", p, old_str="x = 1", new_str="z") == message
    multi_line = error_of(ed.run, "str_replace", p, old_str="x = 1\ny = 2", new_str="z")
    assert multi_line.endswith("in lines [1, 5]. Please ensure it is unique")
    assert sb.read_file(p) == b"x = 1\ny = 2\nx = 1; x = 1\n\nx = 1\ny = 2\n"


def test_str_replace_lists_at_most_100_lines(sb, ed, d):
    p = put(sb, f"{d}/f", b"x\n" * 150)
    message = error_of(ed.run, "str_replace", p, old_str="x", new_str="y")
    assert ", 99, 100, ... and 50 more]. Please ensure it is unique" in message


def test_failed_write_is_reported_and_not_remembered(sb, ed, d):
    p = put(sb, f"{d}/ro", b"old\n", mode=0o444)
    if sb.exec(["sh", "-c", f"echo >> {p}"]).exit_code == 0:
        pytest.skip("root in this sandbox may write read-only files")
    message = error_of(ed.run, "str_replace", p, old_str="old", new_str="new")
    assert message.startswith(f"Ran into an error while trying to write to {p}: ")
    assert "Permission denied" in message
    assert sb.read_file(p) == b"old\n"
    assert error_of(ed.run, "undo_edit", p) == f"No edit history found for {p}."


def test_create_below_a_file_is_refused(sb, ed, d):
    put(sb, f"{d}/file", b"x\n")
    assert "while trying to write to" in error_of(ed.run, "create", f"{d}/file/child", file_text="y")
    assert "NUL character" in error_of(ed.run, "view", f"{d}/a\0b")


def test_str_replace_refuses_empty_old_str_and_directories(sb, ed, d):
    p = put(sb, f"{d}/f", b"a\n")
    assert "must not be empty" in error_of(ed.run, "str_replace", p, old_str="", new_str="b")
    assert error_of(ed.run, "str_replace", d, old_str="a", new_str="b") == (
        f"The path {d} is a directory and only the `view` command can be used on directories"
    )
    assert error_of(ed.run, "str_replace", p) == (
        "Parameter `old_str` is required for command: str_replace"
    )


def test_crlf_file_shown_without_cr_and_edited_with_plain_newlines(sb, ed, d):
    p = put(sb, f"{d}/win.txt", b"one\r\ntwo\r\nthree\r\n")
    view = ed.run("view", p).output
    assert view.startswith(HEADER.format(p) + "     1\tone\n     2\ttwo\n     3\tthree\n(Note: ")
    assert "CRLF" in view
    ed.run("str_replace", p, old_str="one\ntwo", new_str="1\n2")
    assert sb.read_file(p) == b"1\r\n2\r\nthree\r\n"
    ed.run("str_replace", p, old_str="three\r\n", new_str="3\r\n")  # verbatim CRLF works too
    assert sb.read_file(p) == b"1\r\n2\r\n3\r\n"
    ed.run("insert", p, insert_line=1, new_str="1.5\n1.7")
    assert sb.read_file(p) == b"1\r\n1.5\r\n1.7\r\n2\r\n3\r\n"


# -- insert ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, line, new_str, after",
    [
        (b"a\nb\n", 0, "top", b"top\na\nb\n"),
        (b"a\nb\n", 1, "mid1\nmid2", b"a\nmid1\nmid2\nb\n"),
        (b"a\nb\n", 2, "end", b"a\nb\nend\n"),
        (b"a\nb", 2, "end", b"a\nb\nend"),  # an unterminated file stays unterminated
        (b"a\nb\n", 1, "ends in newline\n", b"a\nends in newline\nb\n"),  # no doubled newline
        (b"a\n", 1, "\tx", b"a\n\tx\n"),
        (b"", 0, "first", b"first\n"),
    ],
)
def test_insert(sb, ed, d, before, line, new_str, after):
    p = put(sb, f"{d}/f", before)
    ed.run("insert", p, insert_line=line, new_str=new_str)
    assert sb.read_file(p) == after


def test_insert_snippet_and_bounds(sb, ed, d):
    p = put(sb, f"{d}/f", b"".join(b"%d\n" % i for i in range(1, 11)))
    r = ed.run("insert", p, insert_line=6, new_str="new")
    numbered = "".join(f"{i:6}\t{s}\n" for i, s in zip(range(3, 12), "3 4 5 6 new 7 8 9 10".split()))
    assert r.output == (
        f"The file {p} has been edited. Here's the result of running `cat -n` on a snippet of "
        f"the edited file:\n{numbered}Review the changes and make sure they are as expected "
        "(correct indentation, no duplicate lines, etc). Edit the file again if necessary."
    )
    for bad in (-1, 12):
        assert error_of(ed.run, "insert", p, insert_line=bad, new_str="x") == (
            f"Invalid `insert_line` parameter: {bad}. It should be within the range of lines "
            "of the file: [0, 11]"
        )
    assert "`insert_line` is required" in error_of(ed.run, "insert", p, new_str="x")
    assert "`new_str` is required" in error_of(ed.run, "insert", p, insert_line=1)


# -- undo_edit ------------------------------------------------------------------------------


def test_undo_steps_back_through_edits_per_file(sb, ed, d):
    a = put(sb, f"{d}/a", b"v1\t\r\n")
    b = put(sb, f"{d}/b", b"b1\n")
    ed.run("str_replace", a, old_str="v1", new_str="v2")
    ed.run("insert", a, insert_line=0, new_str="head")
    ed.run("str_replace", b, old_str="b1", new_str="b2")
    r = ed.run("undo_edit", f"{d}/./a")  # the same file, however it is spelled
    assert r.output.startswith(f"Last edit to {a} undone successfully. " + HEADER.format(a))
    assert sb.read_file(a) == b"v2\t\r\n"
    ed.run("undo_edit", a)
    assert sb.read_file(a) == b"v1\t\r\n"
    assert sb.read_file(b) == b"b2\n"
    assert error_of(ed.run, "undo_edit", a) == f"No edit history found for {a}."


def test_undo_of_create_removes_the_file(sb, ed, d):
    p = f"{d}/made"
    ed.run("create", p, file_text="x")
    assert "has been removed" in ed.run("undo_edit", p).output
    assert sb.exec(["test", "-e", p]).exit_code == 1


def test_history_depth_is_bounded(sb, d):
    ed = Editor(sb, EditorConfig(history_depth=2))
    p = put(sb, f"{d}/f", b"0\n")
    for i in range(3):
        ed.run("str_replace", p, old_str=f"{i}\n", new_str=f"{i + 1}\n")
    ed.run("undo_edit", p)
    ed.run("undo_edit", p)
    assert sb.read_file(p) == b"1\n"
    assert error_of(ed.run, "undo_edit", p) == f"No edit history found for {p}."


def test_unknown_command(ed, d):
    assert error_of(ed.run, "delete", f"{d}/f").startswith("Unrecognized command delete.")


# -- mixed line endings and what view may show (issue 17) -----------------------------------------


def test_view_range_past_the_end_is_clamped_with_a_note(sb, ed, d):
    p = put(sb, f"{d}/f", b"".join(b"line %d\n" % i for i in range(1, 6)))
    r = ed.run("view", p, view_range=[4, 50])
    assert r.output == HEADER.format(p) + "     4\tline 4\n     5\tline 5\n" + (
        f"(Note: {p} has 5 lines; shown up to the last.)\n")


def test_mixed_endings_match_plain_newlines_and_keep_their_endings(sb, ed, d):
    p = put(sb, f"{d}/mixed.txt", b"a\r\nb\nc\r\n")
    ed.run("str_replace", p, old_str="a\nb", new_str="A\nB")
    assert sb.read_file(p) == b"A\r\nB\nc\r\n"
    ed.run("str_replace", p, old_str="B\nc\n", new_str="B\nc\nd\n")  # one more line: the last ending
    assert sb.read_file(p) == b"A\r\nB\nc\r\nd\r\n"
    assert "did not appear verbatim" in error_of(ed.run, "str_replace", p, old_str="a\nc", new_str="x")


def test_view_shows_carriage_returns_and_escapes_as_visible_text(sb, ed, d):
    p = put(sb, f"{d}/mixed.txt", b"a\r\nb\nc\x1b]0;title\x07\r\n")
    out = ed.run("view", p).output
    assert "\r" not in out and "\x1b" not in out and "\x07" not in out
    assert "     1\ta\\x0d\n     2\tb\n     3\tc\\x1b]0;title\\x07\\x0d\n" in out
