"""A read-only view of a folder for the tests of read-only file systems (imported as ``from readonly import
read_only``; pytest puts ``tests/support/`` on the path)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["read_only"]


@contextlib.contextmanager
def read_only(src: Path, dst: Path | None = None):
    """``dst`` (made; default: ``src`` itself) as a read-only view of ``src``: a read-only bind mount as root
    (file modes do not bind root), read-only file modes on a copy otherwise. Yields the reason a refusal to
    write there gives ("read-only" or "permission denied")."""
    if dst is None:
        dst = src
    else:
        dst.mkdir()
    if os.geteuid() == 0:
        r = subprocess.run(["mount", "--bind", str(src), str(dst)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {r.stderr.strip()}")
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(dst)], check=True, capture_output=True)
            yield "read-only"
        finally:
            subprocess.run(["umount", "-l", str(dst)], capture_output=True)
    else:
        if dst != src:
            dst.rmdir()
            shutil.copytree(src, dst)
        for p in [dst, *dst.iterdir()]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            yield "permission denied"
        finally:
            for p in [dst, *dst.iterdir()]:
                p.chmod(0o755 if p.is_dir() else 0o644)
