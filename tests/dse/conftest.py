"""Fixtures for study tests: the small, fast study of ``tests/studyfiles.py`` in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from studyfiles import write_study


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "dse-cache"))
    monkeypatch.delenv("DSE_STORAGE", raising=False)


@pytest.fixture
def study_file(tmp_path) -> Path:
    return write_study(tmp_path, name="tiny.toml")


@pytest.fixture(scope="session")
def ran_study(tmp_path_factory) -> Path:
    """The fast study above, run once for the whole session (read-only for the tests that use it)."""
    import os

    from dse.search.runner import run_study as run
    from dse.search.studyfile import load_study

    old = os.environ.get("DSE_CACHE_DIR")
    os.environ["DSE_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "dse-cache")
    try:
        p = write_study(tmp_path_factory.mktemp("ran"), name="tiny.toml")
        assert run(load_study(p))["complete"] == 12
    finally:
        if old is None:
            os.environ.pop("DSE_CACHE_DIR", None)
        else:
            os.environ["DSE_CACHE_DIR"] = old
    return p
