"""Fixtures for every test package."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture
def cli(capsys):
    """Run `dse ARGS` in this process (no interpreter start-up per call): returncode, stdout, stderr."""
    from dse.cli import main

    def call(*args: str) -> SimpleNamespace:
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            main([str(a) for a in args])
        out = capsys.readouterr()
        return SimpleNamespace(returncode=e.value.code, stdout=out.out, stderr=out.err)

    return call
