"""The shipped ``fashion`` task: its file, its licence, its rebuild from Debian's files, its loading."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models.surrogate.tasks import data_path, load_task
from repo_scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
DEBIAN = Path("/usr/share/datasets/fashion-mnist")
SHA256 = "a5880ac6cf2983336cb4c1a6dd64dd5ca54e7c8c3eb4ec3ac6de30043c762bdf"  # also in data/README.md


def test_shipped_archive_is_the_documented_one_with_its_licence():
    path = data_path("fashion")
    assert path.stat().st_size < 3_000_000
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256
    assert SHA256 in (path.parent / "README.md").read_text()
    lic = (path.parent / "LICENSE-fashion-mnist.txt").read_text()
    assert "Zalando SE" in lic and "Permission is hereby granted" in lic
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"models.surrogate" = ["data/*.npz", "data/*.txt", "data/*.md"]' in pyproject


def test_fashion_is_class_balanced_normalized_and_needs_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path / "cache"))
    t = load_task("fashion")
    assert t.x.shape == (10000, 14, 14, 1) and t.x_test.shape == (2000, 14, 14, 1)
    assert t.shape == (14, 14) and t.ndim == 2 and t.x.dtype == np.float32
    assert np.bincount(t.y).tolist() == [1000] * 10
    assert np.bincount(t.y_test).tolist() == [200] * 10
    assert abs(float(t.x.mean())) < 1e-4 and abs(float(t.x.std()) - 1.0) < 1e-4
    assert not (tmp_path / "cache").exists()  # read from the package, nothing generated or downloaded
    with np.load(data_path("fashion")) as f:
        idx, idx_t = f["source_index"], f["source_index_test"]
    assert len(np.unique(idx)) == 10000 and idx.max() < 60000 and len(np.unique(idx_t)) == 2000 and idx_t.max() < 10000


def _builder():
    return load_script(ROOT / "tools" / "build_fashion_subset.py")


def test_downsampling_and_balanced_selection_by_their_definitions():
    b = _builder()
    img = np.arange(28 * 28, dtype=np.uint16).reshape(1, 28, 28) % 256
    img = img.astype(np.uint8)
    out = b.downsample(img)
    p = img[0].astype(int)
    ref = np.array([[(p[2 * i, 2 * j] + p[2 * i + 1, 2 * j] + p[2 * i, 2 * j + 1] + p[2 * i + 1, 2 * j + 1] + 2) // 4
                     for j in range(14)] for i in range(14)])
    np.testing.assert_array_equal(out[0], ref)
    labels = np.repeat(np.arange(10), 7)
    sel = b.balanced(labels, 3, np.random.default_rng(0))
    assert np.bincount(labels[sel]).tolist() == [3] * 10 and np.all(np.diff(sel) > 0)


@pytest.mark.skipif(not (DEBIAN / "train-images-idx3-ubyte.gz").exists() and not os.environ.get("CI"),
                    reason="Debian's dataset-fashion-mnist is not installed (.ci/run installs it; in CI this runs)")
def test_rebuild_from_the_debian_files_is_bit_identical():
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "build_fashion_subset.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "identical" in res.stdout and SHA256 in res.stdout


def test_builder_reports_missing_sources_in_one_line(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "build_fashion_subset.py"), "--src", str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1 and "--src" in res.stderr
