"""Shared fixtures: every test gets its own scratch root, so sweeps never touch a real user's sandboxes."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_scratch(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("LIS_SCRATCH", str(tmp_path_factory.getbasetemp() / "scratch"))
    # Runs go to the data folder unless told otherwise: never the real user's.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.getbasetemp() / "data"))


@pytest.fixture
def sandbox():
    from isolation import Sandbox

    with Sandbox() as sb:
        yield sb
