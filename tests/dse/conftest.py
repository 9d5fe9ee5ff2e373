"""Fixtures for study tests: the small, fast study of ``tests/studyfiles.py`` in a temporary folder."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import sqlalchemy

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


@pytest.fixture
def connections(monkeypatch):
    """Every RDB storage made from now on (held, so that their collection cannot close them instead), and the
    database connections their engines open and close (SQLAlchemy's pool events)."""
    made, opened, closed = [], [], []
    init = optuna.storages.RDBStorage.__init__

    def recording(self, *a, **k):
        init(self, *a, **k)
        made.append(self)
        sqlalchemy.event.listen(self.engine, "connect", lambda conn, rec: opened.append(conn))
        sqlalchemy.event.listen(self.engine, "close", lambda conn, rec: closed.append(conn))

    monkeypatch.setattr(optuna.storages.RDBStorage, "__init__", recording)
    return made, opened, closed
