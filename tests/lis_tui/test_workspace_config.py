"""[workspace]: git_writable from any config or --git-writable; held_back from the user's config only,
added to the built-in rules; paper mode shows the workspace at /testbed only."""
import argparse

import pytest

from isolation import Sandbox, SandboxSpec
from lis_tui.api import prompt_values
from lis_tui.commands.sandbox import add_sandbox_flags, spec_from_args
from lis_tui.config.settings import ConfigError, load_config
from lis_tui.config.workspace import observed_spec


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    user = tmp_path / "xdg" / "lis-tui" / "config.toml"
    user.parent.mkdir(parents=True)
    project = tmp_path / "project" / "lis-tui.toml"
    project.parent.mkdir()
    return user, project


def spec(files, *flags):
    parser = argparse.ArgumentParser()
    add_sandbox_flags(parser)
    return spec_from_args(parser.parse_args(list(flags)), load_config(paths=list(files)))


def test_defaults_add_no_pattern_to_the_built_in_rules_and_keep_git_read_only(files):
    made = spec(files)
    assert made.held_back == () and not made.git_writable
    assert spec(files, "--git-writable").git_writable


def test_the_user_config_adds_patterns_and_sets_git_writable(files):
    user, _ = files
    user.write_text('[workspace]\nheld_back = [".git/**", "*.sh"]\ngit_writable = true\n')
    made = spec(files)
    assert made.held_back == (".git/**", "*.sh") and made.git_writable


def test_a_project_file_cannot_set_the_list(files):
    user, project = files
    project.write_text("[workspace]\nheld_back = []\n")  # what a planted lis-tui.toml would want
    with pytest.raises(ConfigError, match=r"held_back is read from your user config only \(.*config.toml\), "
                                          r"not from .*project/lis-tui.toml"):
        spec(files)


@pytest.mark.sandbox
def test_paper_mode_shows_and_names_the_project_at_testbed_only(tmp_path):
    """The paper's prompts name /testbed: with --observation paper the project is not also at its
    own path, and the model is told /testbed (run and the app take the spec through observed_spec)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("a\n")
    ours = SandboxSpec(workspace=project)
    assert observed_spec(ours, load_config(env={}, paths=[])) is ours
    spec = observed_spec(ours, load_config(env={}, paths=[], overrides={"agent.observation": "paper"}))
    assert prompt_values(spec)["working_dir"] == "/testbed" != prompt_values(ours)["working_dir"]
    with Sandbox(spec) as sb:
        seen = sb.exec(f"pwd; cat a.txt; test -e {project} || echo absent")
        assert seen.stdout == "/testbed\na\nabsent\n", seen
