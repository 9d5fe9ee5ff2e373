"""Fixtures for study tests: the small, fast study of ``tests/studyfiles.py`` in a temporary folder."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from studyfiles import FAST_STUDY, write_study  # noqa: F401 - re-exported for the tests


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "dse-cache"))
    monkeypatch.delenv("DSE_STORAGE", raising=False)


@pytest.fixture
def study_file(tmp_path) -> Path:
    p = tmp_path / "tiny.toml"
    p.write_text(textwrap.dedent(FAST_STUDY))
    return p


@pytest.fixture(scope="session")
def ran_study(tmp_path_factory) -> Path:
    """The fast study above, run once for the whole session (read-only for the tests that use it)."""
    import os

    from dse.search.runner import run_study as run
    from dse.search.studyfile import load_study

    old = os.environ.get("DSE_CACHE_DIR")
    os.environ["DSE_CACHE_DIR"] = str(tmp_path_factory.getbasetemp() / "dse-cache")
    try:
        p = tmp_path_factory.mktemp("ran") / "tiny.toml"
        p.write_text(textwrap.dedent(FAST_STUDY))
        assert run(load_study(p))["complete"] == 12
    finally:
        if old is None:
            os.environ.pop("DSE_CACHE_DIR", None)
        else:
            os.environ["DSE_CACHE_DIR"] = old
    return p
