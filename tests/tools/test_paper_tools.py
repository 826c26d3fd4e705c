"""The paper flavour of the tools (tools/paper.py): what the differential test
(tests/lis_tui/test_paper_episodes.py) cannot afford to run against the package, a real
timeout, and what a hostile command could do to the way commands are run."""
from __future__ import annotations

import pytest

from isolation import Sandbox
from tools.paper import PaperToolbox
from tools.shell_output import WORK_DIR

pytestmark = pytest.mark.sandbox


@pytest.fixture
def box():
    with Sandbox() as sandbox:
        toolbox = PaperToolbox(sandbox, timeout=2)
        yield toolbox
        toolbox.close()


def test_a_command_past_the_limit_reads_as_the_packages_timeout_and_the_next_one_runs(box):
    result = box.dispatch("execute_bash", {"command": "echo started; sleep 30"})
    assert result.framed and result.timed_out
    assert result.output == ("Exit code: -1\nExecution output of \\[execute_bash]:\n\\[STDOUT]\n"
                             "The command took too long to execute (>2s)")
    assert box.dispatch("execute_bash", {"command": "echo next"}).output.endswith("next\n")


def test_each_command_is_a_fresh_bash_from_the_working_directory_in_one_persistent_shell(box):
    box.dispatch("execute_bash", {"command": "cd /tmp && export X=42"})
    shell = box.shell
    out = box.dispatch("execute_bash", {"command": 'echo "$PWD X=$X $PIP_ROOT_USER_ACTION"; '
                                                   "[ -t 1 ] || echo no-tty"}).output
    assert out.endswith("\\[STDOUT]\n/testbed X= ignore\nno-tty\n")
    assert box.shell is shell  # the same persistent shell launched both, no restart


def test_things_planted_where_the_streams_are_written_do_not_block_or_leak(box):
    plant = (f"rm -f {WORK_DIR}/paper-out {WORK_DIR}/paper-err; mkfifo {WORK_DIR}/paper-out; "
             f"ln -s /etc/hostname {WORK_DIR}/paper-err; ls -l {WORK_DIR} >&2")
    box.dispatch("execute_bash", {"command": plant})  # its own streams went to what it removed
    out = box.dispatch("execute_bash", {"command": "echo clean; echo warn >&2"}).output
    assert out.endswith("\\[STDOUT]\nclean\n\n\\[STDERR]\nwarn\n")


def test_the_working_directory_is_a_git_repository_before_the_first_command(box):
    out = box.dispatch("execute_bash", {"command": "ls -A"}).output
    assert out.endswith("\\[STDOUT]\n.git\ninput\noutput\n")
