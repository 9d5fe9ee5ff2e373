"""Cycle-exact agreement with SCALE-Sim 3.0.0 on the stored reference cases (tests/data/scalesim)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from accel import Hardware, HardwareArray, gemm_cost

REF = Path(__file__).resolve().parents[1] / "data" / "scalesim" / "reference.csv"


def _rows():
    with REF.open() as f:
        return list(csv.DictReader(f))


ROWS = _rows()


def test_reference_covers_the_required_cases():
    assert len(ROWS) >= 36
    assert {r["dataflow"] for r in ROWS} == {"os", "ws", "is"}
    strides = {r["stride"] for r in ROWS if r["kind"] == "conv"}
    assert {"1", "2"} <= strides
    assert any(r["kind"] == "gemm" for r in ROWS)
    arrays = {(int(r["rows"]), int(r["cols"])) for r in ROWS}
    assert (8, 8) in arrays and (256, 256) in arrays and any(a[0] != a[1] for a in arrays)
    assert all(int(r["stall_cycles"]) == 0 for r in ROWS)  # CALC mode: compute cycles only


def _im2col(r):
    """The GEMM view of a row, derived from the conv shape (not read from the M/K/N columns) for conv rows."""
    if r["kind"] == "gemm":
        return int(r["M"]), int(r["K"]), int(r["N"])
    h, w, c, f, fr, fs, s = (int(r[k]) for k in ("conv_h", "conv_w", "conv_c", "conv_filters", "conv_r",
                                                  "conv_s", "stride"))
    # SCALE-Sim's output size ceil((H-R+s)/s) equals ours floor((H-R)/s)+1 on these shapes
    assert -(-(h - fr + s) // s) == (h - fr) // s + 1
    p, q = (h - fr) // s + 1, (w - fs) // s + 1
    return p * q, fr * fs * c, f


@pytest.mark.parametrize("row", ROWS, ids=[r["case"] for r in ROWS])
def test_compute_cycles_and_sram_counters_match_scalesim(row):
    m, k, n = _im2col(row)
    assert (m, k, n) == (int(row["M"]), int(row["K"]), int(row["N"]))
    hw = Hardware(rows=int(row["rows"]), cols=int(row["cols"]), dataflow=row["dataflow"],
                  ifmap_kb=float(row["ifmap_kb"]), filter_kb=float(row["filter_kb"]), ofmap_kb=float(row["ofmap_kb"]))
    res = gemm_cost([m], [k], [n], hw=hw)
    assert res.compute_cycles[0] == int(row["total_cycles"])
    assert res.sram_reads["ifmap"][0] == int(row["sram_ifmap_reads"])
    assert res.sram_reads["filter"][0] == int(row["sram_filter_reads"])
    ofmap_writes = res.sram_writes["ofmap"][0]
    if row["dataflow"] == "os":
        # SCALE-Sim's OS ofmap-write counter adds rows+cols per fold (a known quirk); ours counts outputs.
        R, C = hw.rows, hw.cols
        folds = -(-m // R) * -(-n // C)
        ofmap_writes += folds * (R + C)
    assert ofmap_writes == int(row["sram_ofmap_writes"])


def test_all_reference_cases_at_once_over_a_hardware_array():
    """The same cases, vectorized: one HardwareArray per distinct op, all configurations at once."""
    hws = HardwareArray.from_list([Hardware(rows=int(r["rows"]), cols=int(r["cols"]), dataflow=r["dataflow"])
                                   for r in ROWS])
    ops = np.array([_im2col(r) for r in ROWS])
    res = gemm_cost(ops[:, 0], ops[:, 1], ops[:, 2], hw=hws)  # (H, L): every config x every op
    diag = np.diagonal(res.compute_cycles)
    assert np.array_equal(diag, np.array([int(r["total_cycles"]) for r in ROWS], dtype=float))
