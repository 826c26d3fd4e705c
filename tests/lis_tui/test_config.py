"""Config layering, profiles, errors that point at the file and line, explain, and saving."""

from dataclasses import fields
from pathlib import Path

import pytest

from lis_tui.config.settings import (
    SECTIONS, ConfigError, ModelConfig, field_docs, load_config,
    save_model_setup, save_network_allow, save_settings, user_config_path,
)

KEY = "sk-test-0123456789abcdef"


@pytest.fixture
def home(tmp_path):
    """An XDG config dir and a project dir, and an environment that points at them."""
    user = tmp_path / "xdg" / "lis-tui" / "config.toml"
    user.parent.mkdir(parents=True)
    project = tmp_path / "project" / "lis-tui.toml"
    project.parent.mkdir()
    return user, project, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def load(home, profile=None, overrides=None, **env):
    user, project, base = home
    return load_config(profile, overrides, env={**base, **env}, paths=[user, project])


def test_defaults_without_files(home):
    config = load(home)
    assert config.model.base_url == "https://api.openai.com/v1"
    assert (config.agent.max_steps, config.sandbox.rootfs, config.network.mode) == (
        100, "host", "off")
    assert config.model.api_key is None
    assert all(source == "default" for source in config.sources.values())


def test_user_path_follows_xdg(tmp_path):
    assert user_config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == (
        tmp_path / "lis-tui" / "config.toml")


def test_layers_files_then_env_then_profile_then_overrides(home):
    user, project, _ = home
    user.write_text('[model]\nbase_url = "http://user/v1"\nmodel = "user-model"\n'
                    'temperature = 1\n[agent]\nmax_steps = 50\n[network]\nallow = ["pypi.org"]\n'
                    '[models.local]\nbase_url = "http://localhost:8000/v1"\nmodel = "qwen"\n')
    project.write_text('[model]\nmodel = "project-model"\n[agent]\nmax_steps = 20\n')

    config = load(home)
    assert config.model.model == "project-model" and config.agent.max_steps == 20
    assert config.model.base_url == "http://user/v1" and config.model.temperature == 1.0
    assert config.sources["model.model"] == str(project)
    assert config.sources["model.base_url"] == str(user)

    config = load(home, LIS_MODEL="env-model", OPENAI_BASE_URL="http://env/v1")
    assert (config.model.model, config.model.base_url) == ("env-model", "http://env/v1")
    assert config.sources["model.model"] == "env LIS_MODEL"

    config = load(home, "local", {"agent.max_steps": 5, "model.seed": None},
                  LIS_MODEL="env-model", OPENAI_BASE_URL="http://env/v1")
    assert (config.model.model, config.model.base_url) == ("qwen", "http://localhost:8000/v1")
    assert config.sources["model.model"] == f"profile local ({user})"
    assert config.agent.max_steps == 5 and config.sources["agent.max_steps"] == "command line"
    assert config.model.seed is None and config.network.allow == ["pypi.org"]

    config = load(home, "local", {"model.model": "flag-model"})
    assert config.model.model == "flag-model"


def test_override_strings_are_read_as_values(home):
    config = load(home, overrides={"agent.max_steps": "7", "model.stream": "false"})
    assert config.agent.max_steps == 7 and config.model.stream is False


def test_api_key_comes_from_the_named_variable(home):
    user, _, _ = home
    assert load(home, OPENAI_API_KEY=KEY).model.api_key == KEY
    user.write_text('[models.together]\napi_key_env = "TOGETHER_KEY"\n')
    config = load(home, "together", OPENAI_API_KEY=KEY, TOGETHER_KEY="tk-1234567890abcdef")
    assert config.model.api_key == "tk-1234567890abcdef"
    assert config.sources["model.api_key"] == "env TOGETHER_KEY"


def test_api_key_as_an_override_beats_the_environment(home):
    config = load(home, overrides={"model.api_key": KEY}, OPENAI_API_KEY="sk-from-env-000000")
    assert config.model.api_key == KEY and config.sources["model.api_key"] == "command line"


def test_api_key_in_a_file_is_refused(home):
    user, _, _ = home
    user.write_text('[model]\nmodel = "m"\napi_key = "sk-leak"\n')
    with pytest.raises(ConfigError, match="api_key_env") as info:
        load(home)
    assert (info.value.path, info.value.line, info.value.key) == (user, 3, "model.api_key")


def test_key_is_masked_everywhere(home):
    config = load(home, OPENAI_API_KEY=KEY)
    rows = {row.key: row for row in config.explain()}
    assert rows["model.api_key"].value == "sk-...cdef"
    assert rows["model.api_key"].source == "env OPENAI_API_KEY"
    assert KEY not in config.explain_text()
    assert KEY not in repr(config) and KEY not in str(config.model.public_dict())
    assert "api_key" not in config.model.public_dict()


def test_explain_says_where_each_value_came_from(home):
    _, project, _ = home
    project.write_text("[sandbox]\ntimeout = 30\n")
    rows = {row.key: row for row in load(home, overrides={"network.mode": "ask"}).explain()}
    assert rows["sandbox.timeout"] == ("sandbox.timeout", "30.0", str(project))
    assert rows["network.mode"] == ("network.mode", '"ask"', "command line")
    assert rows["agent.max_steps"].source == "default"
    assert rows["model.temperature"].value == "(unset)"


def test_unknown_key_names_file_line_key_and_fix(home):
    user, _, _ = home
    user.write_text('# settings\n[model]\nbase_url = "http://x/v1"\nmodle = "m"\n')
    with pytest.raises(ConfigError) as info:
        load(home)
    err = info.value
    assert (err.path, err.line, err.key) == (user, 4, "model.modle")
    assert str(err).startswith(f"{user}:4: ")
    assert 'did you mean "model"' in str(err)


def test_unknown_table_and_profile_key(home):
    user, _, _ = home
    user.write_text("[agnet]\nmax_steps = 3\n")
    with pytest.raises(ConfigError, match='unknown table "agnet".*did you mean "agent"'):
        load(home)
    user.write_text('[models.local]\nmodel = "q"\nbase = "x"\n')
    with pytest.raises(ConfigError, match=r"\[models.local\]") as info:
        load(home)
    assert (info.value.line, info.value.key) == (3, "models.local.base")


def test_invalid_toml_names_the_line(home):
    _, project, _ = home
    project.write_text('[agent]\nmax_steps = 5\nwall_time = \n')
    with pytest.raises(ConfigError, match="invalid TOML") as info:
        load(home)
    assert (info.value.path, info.value.line) == (project, 3)


def test_wrong_types_and_choices(home):
    user, _, _ = home
    user.write_text('[agent]\nmax_steps = "ten"\n')
    with pytest.raises(ConfigError, match="must be an integer") as info:
        load(home)
    assert info.value.line == 2
    user.write_text('[network]\nmode = "sometimes"\n')
    with pytest.raises(ConfigError, match="one of off, ask, on"):
        load(home)
    user.write_text("")
    with pytest.raises(ConfigError, match="true or false"):
        load(home, overrides={"model.stream": 3})


def test_unknown_profile_lists_the_known_ones(home):
    user, _, _ = home
    user.write_text('[models.local]\nmodel = "q"\n[models.cloud]\nmodel = "g"\n')
    with pytest.raises(ConfigError, match="profiles: cloud, local"):
        load(home, "lcoal")


def test_saving_keeps_comments_and_loads_back(home):
    user, _, _ = home
    user.write_text('# mine\n[model]\nmodel = "m"  # the usual\n\n[network]\nallow = [\n'
                    '  "pypi.org",\n]\n')
    save_settings({"sandbox.rootfs": "ubuntu-24.04"}, user)
    save_network_allow("github.com", user)
    save_network_allow("github.com", user)
    save_model_setup(base_url="http://localhost:8000/v1", model="qwen", profile="local", path=user)
    save_model_setup(model="gpt", path=user)
    text = user.read_text()
    assert text.startswith("# mine\n[model]\n")
    config = load(home, "local")
    assert config.sandbox.rootfs == "ubuntu-24.04"
    assert config.network.allow == ["pypi.org", "github.com"]
    assert config.profiles["local"] == {"base_url": "http://localhost:8000/v1", "model": "qwen"}
    assert load(home).model.model == "gpt"


def test_save_creates_the_file_and_validates(tmp_path):
    path = tmp_path / "new" / "config.toml"
    save_settings({"agent.max_steps": 30, "network.deny": ["evil.example"],
                   "models.big.max_tokens": 4096}, path)
    config = load_config("big", env={}, paths=[path])
    assert (config.agent.max_steps, config.network.deny) == (30, ["evil.example"])
    assert config.model.max_tokens == 4096
    with pytest.raises(ConfigError, match="api_key_env"):
        save_settings({"model.api_key": "sk-nope"}, path)
    with pytest.raises(ConfigError, match="unknown"):
        save_settings({"agent.max_stesp": 3}, path)
    assert "sk-nope" not in path.read_text()


def test_profile_names_that_need_quotes_round_trip(tmp_path):
    path = tmp_path / "config.toml"
    save_model_setup(model="llama", profile="my.box", path=path)
    assert '[models."my.box"]' in path.read_text()
    assert load_config("my.box", env={}, paths=[path]).model.model == "llama"


def test_every_field_has_a_one_line_docstring():
    for cls in SECTIONS.values():
        docs = field_docs(cls)
        for f in fields(cls):
            assert docs.get(f.name, "").strip(), f"{cls.__name__}.{f.name} has no docstring"
            assert "\n" not in docs[f.name]
    assert KEY not in repr(ModelConfig(api_key=KEY))


def test_missing_files_are_fine(tmp_path):
    config = load_config(env={}, paths=[Path(tmp_path / "nope.toml")])
    assert config.agent.max_steps == 100


def test_the_export_cap_and_inode_limit_come_from_sandbox_and_the_flag(home):
    import argparse

    from lis_tui.commands.sandbox import add_sandbox_flags, spec_from_args
    from lis_tui.config.settings import sandbox_limits

    user, _, _ = home
    limits = sandbox_limits(load(home))
    # inodes scale with the disk limit: one per 16 KiB
    assert (limits.export_cap, limits.export_bytes(), limits.inode_limit()) == (None, 10 << 30, 655_360)
    user.write_text('[sandbox]\ndisk = "none"\ninodes = 0\n')
    limits = sandbox_limits(load(home))
    assert (limits.export_bytes(), limits.inode_limit()) == (4 << 30, None)  # no disk limit: 4 GiB
    user.write_text('[sandbox]\nexport_cap = "2G"\n')
    assert sandbox_limits(load(home)).export_bytes() == 2 << 30
    parser = argparse.ArgumentParser()
    add_sandbox_flags(parser)
    spec = spec_from_args(parser.parse_args(["--export-cap", "300M"]), config=load(home))
    assert spec.limits.export_bytes() == 300 << 20


def test_the_memory_budget_and_where_the_files_live_come_from_sandbox_and_the_flag(home):
    import argparse

    from isolation.limits import budget
    from lis_tui.commands.sandbox import add_sandbox_flags, spec_from_args
    from lis_tui.config.settings import ConfigError, sandbox_limits

    user, _, _ = home
    user.write_text('[sandbox]\ntmpfs_budget = "300M"\ntmpfs_floor = "200M"\n')
    try:
        assert sandbox_limits(load(home)).disk_on == "memory"
        assert (budget._setting("budget"), budget._setting("floor")) == (300 << 20, 200 << 20)
        user.write_text('[sandbox]\ntmpfs_budget = "100T"\n')
        with pytest.raises(ConfigError, match=r"tmpfs_budget 100T is more than this machine's memory and swap"):
            sandbox_limits(load(home))
    finally:
        budget.configure()  # back to "auto" for the tests after
    parser = argparse.ArgumentParser()
    add_sandbox_flags(parser)
    user.write_text("")
    assert spec_from_args(parser.parse_args(["--disk-on", "disk"]), config=load(home)).limits.disk_on == "disk"
