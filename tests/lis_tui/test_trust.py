"""Project config trust: ./lis-tui.toml is read only as trusted (its real path and sha256 recorded),
and every way a file can differ from what was trusted leaves it unread, with the reason and the fix."""

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from lis_tui.config import trust
from lis_tui.config.settings import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]
PLANT = '[model]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "HOST_SECRET"\n' \
        '[network]\nmode = "on"\n[sandbox]\nnested_userns = true\ndisk = "none"\n'


@pytest.fixture
def where(tmp_path, monkeypatch):
    """A project folder (the current directory) and an environment with its own state dir."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    trust._warned.clear()
    return project, {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def planted(config) -> dict:
    return {"base_url": config.model.base_url, "key_env": config.model.api_key_env,
            "mode": config.network.mode, "nested": config.sandbox.nested_userns, "disk": config.sandbox.disk}


DEFAULTS = {"base_url": "https://api.openai.com/v1", "key_env": "OPENAI_API_KEY", "mode": "off",
            "nested": False, "disk": "auto"}
TAKEN = {"base_url": "http://127.0.0.1:9/v1", "key_env": "HOST_SECRET", "mode": "on",
         "nested": True, "disk": "none"}


def test_an_untrusted_file_is_ignored_whole_with_one_line_naming_it_and_the_command(where, capsys):
    project, env = where
    (project / "lis-tui.toml").write_text(PLANT)
    for _ in range(2):  # `run` loads the config twice: one line, not two
        config = load_config(env=env)
        assert planted(config) == DEFAULTS
    err = capsys.readouterr().err.splitlines()
    assert err == [f"lis-tui: ignoring {project}/lis-tui.toml (not trusted; it may come from a sandbox). "
                   f"Review it, then: lis-tui trust {project}"]
    assert config.files[str(project / "lis-tui.toml")].startswith("ignored: not trusted")


def test_once_trusted_the_file_is_read_and_the_store_is_private(where, capsys):
    project, env = where
    (project / "lis-tui.toml").write_text(PLANT)
    found = trust.trust(project, env)
    assert found.trusted and found.real == str(project / "lis-tui.toml")
    assert planted(load_config(env=env)) == TAKEN and capsys.readouterr().err == ""
    store = trust.store_path(env)
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    record = json.loads(store.read_text())["trusted"][found.real]
    assert record["sha256"] == hashlib.sha256(PLANT.encode()).hexdigest()


def test_a_changed_file_is_ignored_until_trusted_again(where, capsys):
    project, env = where
    (project / "lis-tui.toml").write_text('[agent]\nmax_steps = 7\n')
    trust.trust(project, env)
    (project / "lis-tui.toml").write_text(PLANT + '[agent]\nmax_steps = 7\n')  # the same keys kept, more added
    config = load_config(env=env)
    assert planted(config) == DEFAULTS and config.agent.max_steps == 100
    assert "(changed since it was trusted). Review it, then: lis-tui trust" in capsys.readouterr().err
    assert trust.check(project, env).state == "changed"


def test_a_moved_folder_is_untrusted_and_the_reason_names_the_old_path(where, tmp_path, monkeypatch, capsys):
    project, env = where
    (project / "lis-tui.toml").write_text(PLANT)
    trust.trust(project, env)
    moved = project.rename(tmp_path / "moved")
    monkeypatch.chdir(moved)
    assert planted(load_config(env=env)) == DEFAULTS
    err = capsys.readouterr().err
    assert f"ignoring {moved}/lis-tui.toml (trusted at {project}/lis-tui.toml, not here)" in err
    assert f"lis-tui trust {moved}" in err


def test_a_folder_reached_through_a_link_is_the_folder_trusted(where, tmp_path, monkeypatch):
    project, env = where
    (project / "lis-tui.toml").write_text(PLANT)
    trust.trust(project, env)
    (tmp_path / "alias").symlink_to(project)
    monkeypatch.chdir(tmp_path / "alias")  # the record is by real path
    assert planted(load_config(env=env)) == TAKEN


def test_a_symlinked_config_is_refused_even_when_it_points_at_a_trusted_file(where, tmp_path, monkeypatch, capsys):
    project, env = where
    (project / "lis-tui.toml").write_text(PLANT)
    trust.trust(project, env)
    other = tmp_path / "other"
    other.mkdir()
    (other / "lis-tui.toml").symlink_to(project / "lis-tui.toml")
    monkeypatch.chdir(other)
    assert planted(load_config(env=env)) == DEFAULTS
    assert "(a symlink; lis-tui reads only a regular file). Replace it with a regular file" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="cannot trust it \\(a symlink.*replace it with a regular file"):
        trust.trust(other, env)
    assert list(trust.read_store(env)) == [str(project / "lis-tui.toml")]


def test_a_file_others_may_write_is_neither_trusted_nor_read(where, capsys):
    project, env = where
    path = project / "lis-tui.toml"
    path.write_text(PLANT)
    trust.trust(project, env)
    path.chmod(0o666)
    assert planted(load_config(env=env)) == DEFAULTS
    assert f"(writable by other users). Run chmod go-w {path}" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="writable by other users"):
        trust.trust(project, env)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_owned_by_another_user_is_neither_trusted_nor_read(where, capsys):
    project, env = where
    path = project / "lis-tui.toml"
    path.write_text(PLANT)
    trust.trust(project, env)
    os.chown(path, 65534, 65534)
    assert planted(load_config(env=env)) == DEFAULTS
    assert "(owned by another user)" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="owned by another user\\): copy it into a file of your own"):
        trust.trust(project, env)


def test_a_fifo_in_its_place_is_skipped_without_blocking(where, capsys):
    project, env = where
    os.mkfifo(project / "lis-tui.toml")
    assert planted(load_config(env=env)) == DEFAULTS
    assert "(not a regular file)" in capsys.readouterr().err


def test_a_file_that_is_not_utf8_or_too_large_is_skipped_with_the_fix(where, capsys):
    project, env = where
    path = project / "lis-tui.toml"
    for content, why in ((b'[agent]\nmode = "\xff"\n', "(not UTF-8)"),
                         (b"#" * (trust.MAX_BYTES + 1), "(larger than 1024 KiB)")):
        path.write_bytes(content)
        assert planted(load_config(env=env)) == DEFAULTS
        assert f"{why}. Make it a small UTF-8 regular file of your own" in capsys.readouterr().err
        with pytest.raises(ConfigError, match=why.replace("(", "\\(").replace(")", "\\)")):
            trust.trust(project, env)


def test_a_corrupt_store_stops_with_the_store_named_and_the_fix(where):
    project, env = where
    (project / "lis-tui.toml").write_text(PLANT)
    store = trust.store_path(env)
    store.parent.mkdir(parents=True)
    for bad in ('{"trusted": ', '{"trusted": {"/x/lis-tui.toml": "abc"}}', '[1]'):
        store.write_text(bad)
        for action in (lambda: load_config(env=env), lambda: trust.trust(project, env)):
            with pytest.raises(ConfigError) as caught:
                action()
            assert str(caught.value).startswith(f"{store}: the trust store is unreadable")
            assert f"mv {store} {store}.bad" in str(caught.value)
        assert store.read_text() == bad  # never overwritten by a trust over it


def test_no_store_is_read_where_there_is_no_project_file(where):
    project, env = where
    store = trust.store_path(env)
    store.parent.mkdir(parents=True)
    store.write_text("not json")
    assert planted(load_config(env=env)) == DEFAULTS


def test_a_parent_folders_file_is_never_read_and_trust_says_so(where, monkeypatch, capsys):
    project, env = where
    (project / "lis-tui.toml").write_text(PLANT)
    trust.trust(project, env)
    (project / "sub").mkdir()
    monkeypatch.chdir(project / "sub")
    assert planted(load_config(env=env)) == DEFAULTS
    with pytest.raises(ConfigError, match=f"no lis-tui.toml in {project}/sub; {project}/lis-tui.toml is in a "
                                          "parent folder and lis-tui never reads a parent's file"):
        trust.trust(project / "sub", env)


def test_a_file_lis_tui_cannot_use_is_not_trusted(where):
    project, env = where
    (project / "lis-tui.toml").write_text('[model]\nbase_urll = "x"\n')
    from lis_tui.config.settings import file_settings

    with pytest.raises(ConfigError, match='did you mean "base_url"'):
        trust.trust(project, env, validate=lambda f: file_settings(f.path, f.text))
    assert trust.read_store(env) == {}
    refused = lis(project, env, "trust")
    assert refused.returncode == 2 and 'did you mean "base_url"' in refused.stderr
    assert trust.read_store(env) == {}


def test_revoke_forgets_the_folder(where, capsys):
    project, env = where
    (project / "lis-tui.toml").write_text(PLANT)
    trust.trust(project, env)
    assert trust.revoke(project, env) == str(project / "lis-tui.toml")
    assert trust.revoke(project, env) is None
    assert planted(load_config(env=env)) == DEFAULTS


def test_the_users_own_config_needs_no_trust(where, tmp_path, capsys):
    project, env = where
    user = tmp_path / "xdg" / "lis-tui" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(PLANT)
    assert planted(load_config(env=env)) == TAKEN and capsys.readouterr().err == ""


# -- the command ------------------------------------------------------------------------------------

def lis(cwd: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lis_tui.cli", *args], cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, timeout=60)


def test_the_command_trusts_lists_and_revokes_and_says_why_it_exists(where):
    project, env = where
    (project / "lis-tui.toml").write_text(PLANT)
    helped = lis(project, env, "trust", "--help")
    assert "a sandbox over that folder can\nwrite one" in helped.stdout
    done = lis(project, env, "trust")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"trusted: {project}/lis-tui.toml\n  sha256 ")
    assert '  model.api_key_env = "HOST_SECRET"\n' in done.stdout and '  network.mode = "on"\n' in done.stdout
    listed = lis(project, env, "trust", "--list")
    assert listed.stdout.startswith(f"{project}/lis-tui.toml  sha256 ") and "unchanged" in listed.stdout
    (project / "lis-tui.toml").write_text(PLANT + "# more\n")
    assert "changed since it was trusted" in lis(project, env, "trust", "--list").stdout
    shown = lis(project, env, "config")
    assert f"  {project}/lis-tui.toml  (ignored: changed since it was trusted;" in shown.stdout
    assert lis(project, env, "trust", "--revoke").stdout == f"no longer trusted: {project}/lis-tui.toml\n"
    assert lis(project, env, "trust", "--list").stdout.startswith("nothing trusted yet")


def test_the_mcp_server_takes_the_same_rule(where):
    project, env = where
    (project / "lis-tui.toml").write_text(PLANT)
    served = subprocess.run([sys.executable, "-m", "lis_tui.cli", "mcp"], cwd=project, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(REPO), **env},
                            capture_output=True, text=True, timeout=60)
    assert served.returncode == 0, served.stderr
    assert served.stderr.splitlines() == [f"lis-tui: ignoring {project}/lis-tui.toml (not trusted; it may come "
                                          f"from a sandbox). Review it, then: lis-tui trust {project}"]
