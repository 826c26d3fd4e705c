"""A past run made in the test's own process, where a `lis-tui` the test starts will find it (the
same data, state and config folders, started in tmp_path): cheaper than one more `lis-tui` process."""
from __future__ import annotations

import os
from pathlib import Path

from fakes.openai_server import FakeOpenAI

REPO = Path(__file__).resolve().parents[1]


def env_for(tmp_path: Path) -> dict:
    """The environment of a `lis-tui` a test starts: its own folders under tmp_path, no model set."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LIS_MODEL")}
    env.update(PYTHONPATH=str(REPO), XDG_CONFIG_HOME=str(tmp_path / "xdg"), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_DATA_HOME=str(tmp_path / "data"))
    return env


def past_run(tmp_path: Path, monkeypatch, script: list, task: str, settings: dict | None = None, **where) -> Path:
    """A submitted run's folder, as `lis-tui run` in tmp_path would leave it. `settings`: config
    overrides; `where`: run_task's sandbox arguments (workspace=, spec=)."""
    from lis_tui.api import run_task
    from lis_tui.config.settings import load_config

    for name, value in env_for(tmp_path).items():
        if name.startswith("XDG_"):
            monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    with FakeOpenAI(script) as server:
        config = load_config(None, {"model.base_url": server.base_url, "model.model": "m", "sandbox.rootfs": "host",
                                    **(settings or {})})
        result = run_task(task, config=config, **where)
    assert result.finish_reason == "submitted", result.message
    return result.output_dir
