"""Shared fixtures of the models tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    """One surrogate cache directory per test module (the data sets are generated once in it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DSE_CACHE_DIR", str(tmp_path_factory.mktemp("dse-cache")))
        yield
