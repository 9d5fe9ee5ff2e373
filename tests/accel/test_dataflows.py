"""One small convolution per dataflow, every register, SRAM and DRAM access counted by hand.

The layer: a 6x6 input with 2 channels, four 3x3 filters, stride 1, no padding: a 4x4 output. Its im2col
GEMM is M = 16 output pixels, K = 18 (2 channels x 9 taps), N = 4 filters: 1152 MACs. A 4x4 array, 1-byte
operands, 2-byte partial sums. The raw input is 6*6*2 = 72 bytes; its im2col matrix 16*18 = 288 bytes.
Buffer sizes are given as the bytes of one half (``kb = bytes / 512``).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import accel.hardware
from accel import Hardware, HardwareArray, gemm_cost
from accel.dataflow import DATAFLOW_NAMES, DATAFLOWS, Dataflow, by_code, by_name
from accel.gemm import Im2col

GEO = Im2col.conv(6, 6, 2, 3, 3, stride=1, pad=0)
MACS = 16 * 18 * 4


def _hw(df, ifmap_half, filter_half, ofmap_half):
    return Hardware(rows=4, cols=4, dataflow=df, word_bytes=1, acc_bytes=2, ifmap_kb=ifmap_half / 512,
                    filter_kb=filter_half / 512, ofmap_kb=ofmap_half / 512, bandwidth_gbps=8.0)


def _cost(hw):
    return gemm_cost([16], [18], [4], hw=hw, im2col=GEO)


def _counts(r):
    return ({k: float(v[0]) for k, v in r.sram_reads.items()}, {k: float(v[0]) for k, v in r.sram_writes.items()},
            {k: float(v[0]) for k, v in r.dram_bytes.items()})


def test_output_stationary_by_hand():
    # OS: (Sr, Sc, T) = (M, N, K) = (16, 4, 18): 4 row folds, 1 column fold
    r = _cost(_hw("os", 64, 128, 128))
    assert r.compute_cycles[0] == 4 * (4 + 4 + 18 - 2) - 1 == 95
    reads, writes, dram = _counts(r)
    assert reads == {"ifmap": 16 * 18 * 1, "filter": 18 * 4 * 4, "ofmap": 0}
    assert writes == {"ifmap": 0, "filter": 0, "ofmap": 16 * 4}
    # registers: each MAC reads and writes its 2-byte accumulator, the first MAC of each of the 64 outputs
    # only writes
    assert r.rf_bytes[0] == 2 * (2 * MACS - 64) == 4480
    # neighbours: A reaches 3 of the 4 columns from the left (16 pixels x 18 taps x 3), B reaches 3 of the
    # 4 rows of each row fold from above (4 filters x 18 x 12); 4 outputs per column drain 0+1+2+3 = 6 hops
    # per column per row fold (4 columns x 4 folds x 6)
    assert r.interpe_bytes[0] == 16 * 18 * 3 + 4 * 18 * 12 + 4 * 4 * 6 == 1824
    # DRAM: the raw input (72 B) does not fit its 64 B half, but one output row's window (3 input rows x 6
    # columns x 2 channels = 36 B) does: it streams through once, each input byte fetched once -- not the
    # 288 B of its im2col matrix. The 72 B filter fits its half: fetched once; 64 outputs written once.
    assert dram == {"ifmap": 72, "filter": 72, "ofmap": 64}
    # with a 32 B half even one output row's window does not fit: each of the 4 output rows fetches its own
    # 3 input rows (rows 0-2, 1-3, 2-4, 3-5): 4 x 3 rows x 12 B
    r = _cost(_hw("os", 32, 128, 128))
    assert _counts(r)[2] == {"ifmap": 4 * 3 * 12, "filter": 72, "ofmap": 64}


def test_weight_stationary_by_hand():
    # WS: (Sr, Sc, T) = (K, N, M) = (18, 4, 16): 5 row folds (4+4+4+4+2), 1 column fold
    r = _cost(_hw("ws", 128, 128, 64))
    assert r.compute_cycles[0] == 5 * (2 * 4 + 4 + 16 - 2) - 1 == 129
    reads, writes, dram = _counts(r)
    # SRAM: A streams once per column fold, each weight loaded once, partial sums written once per row fold
    # and read back for every row fold but the first (accumulator words)
    assert reads == {"ifmap": 18 * 16, "filter": 18 * 4, "ofmap": 4 * 16 * 4}
    assert writes == {"ifmap": 0, "filter": 0, "ofmap": 4 * 16 * 5}
    # registers: per MAC the weight is read (1 B) and the new partial sum written (2 B); each weight is
    # written once when loaded (72 B)
    assert r.rf_bytes[0] == 1 * MACS + 2 * MACS + 72 == 3528
    # neighbours: A reaches 3 of 4 columns (18 x 16 x 3, 1 B); partial sums reach all but the top row of each
    # fold (4 x 16 x (18 - 5), 2 B); weights shift down into place: 0+1+2+3 hops per column in the four full
    # folds, 0+1 in the last (4 columns x 25 hops, 1 B)
    assert r.interpe_bytes[0] == 18 * 16 * 3 + 2 * 4 * 16 * 13 + 4 * 25 == 2628
    # DRAM: the 64 outputs' accumulators (128 B) do not fit the 64 B ofmap half, so pixels go in chunks of 8
    # (2 output rows: 8 x 4 accumulators = 64 B); each chunk fetches its 4 input rows (48 B: rows 0-3, then
    # 2-5); the weights fit their half and stay; outputs written once, nothing spills
    assert dram == {"ifmap": 2 * 4 * 12, "filter": 72, "ofmap": 64}


def test_weight_stationary_takes_the_cheaper_of_spilling_and_refetching():
    # an 8 B ofmap half holds the accumulators of a single pixel (4 filters x 2 B). Keeping every fold's
    # partial sums on chip then means pixel chunks of 1: each pixel fetches its own 3x3x2 window (18 B),
    # 16 x 18 = 288 B of input, 72 B of weights, 64 B of outputs = 424 B. The alternative, streaming all
    # pixels and spilling partial sums, reads the input once (72 B) but writes and reads back 128 B of
    # accumulators for each of the 4 row folds after the first: 72 + 72 + 64 + 2 * 4 * 128 = 1232 B
    r = _cost(_hw("ws", 128, 128, 8))
    assert _counts(r)[2] == {"ifmap": 16 * 18, "filter": 72, "ofmap": 64}
    assert float(r.dram_read_bytes[0] + r.dram_write_bytes[0]) == 424 < 72 + 72 + 64 + 2 * 4 * 128


def test_input_stationary_by_hand():
    # IS: (Sr, Sc, T) = (K, M, N) = (18, 16, 4): 5 row folds, 4 column folds
    r = _cost(_hw("is", 128, 128, 128))
    assert r.compute_cycles[0] == 20 * (2 * 4 + 4 + 4 - 2) - 1 == 279
    reads, writes, dram = _counts(r)
    assert reads == {"ifmap": 18 * 16, "filter": 18 * 4 * 4, "ofmap": 16 * 4 * 4}
    assert writes == {"ifmap": 0, "filter": 0, "ofmap": 16 * 4 * 5}
    # registers: the stationary input read per MAC (1 B), the new partial sum written (2 B), each of the
    # 288 im2col values loaded once into its PE
    assert r.rf_bytes[0] == MACS + 2 * MACS + 288 == 3744
    # neighbours: B reaches 12 of the 16 pixel columns (18 x 4 x 12); partial sums all but the top row of each
    # fold (16 x 4 x 13, 2 B); the input tiles shift into place (16 columns x 25 hops)
    assert r.interpe_bytes[0] == 18 * 4 * 12 + 2 * 16 * 4 * 13 + 16 * 25 == 2928
    # DRAM: everything fits; the stationary tiles are formed on chip from the raw input (72 B, not 288 B)
    assert dram == {"ifmap": 72, "filter": 72, "ofmap": 64}


def test_dataflows_differ_in_the_pes():
    """The PE-level traffic is the dataflow's, not one formula for all: per MAC in steady state OS touches
    2 accumulators in its registers and moves 2 operands; WS and IS touch one operand and one partial sum in
    registers and move one operand and one partial sum."""
    big = dict(rows=16, cols=16, word_bytes=2, acc_bytes=4)
    m, k, n = 4096, 1024, 1024
    per_mac = {}
    for df in ("os", "ws", "is"):
        r = gemm_cost([m], [k], [n], hw=Hardware(dataflow=df, **big))
        per_mac[df] = (r.rf_bytes[0] / r.macs[0], r.interpe_bytes[0] / r.macs[0])
    assert per_mac["os"][0] == pytest.approx(8.0, rel=1e-3) and per_mac["os"][1] == pytest.approx(4.0, rel=0.08)
    for df in ("ws", "is"):
        assert per_mac[df][0] == pytest.approx(6.0, rel=1e-3) and per_mac[df][1] == pytest.approx(6.0, rel=0.08)


def test_the_known_dataflows_keep_their_names_and_codes():
    # a HardwareArray stores a dataflow as its code: new dataflows are appended, these never move
    assert [(by_code(c).name, c) for c in range(3)] == [("os", 0), ("ws", 1), ("is", 2)]
    assert DATAFLOW_NAMES[:3] == ("os", "ws", "is")


def test_a_dataflow_registered_wrong_is_refused_naming_the_class_and_the_fix():
    """A new dataflow with a wrong code, a name already taken, or no name: one message naming its class and
    what to give (it was a bare AssertionError on import, or an empty name shown as "" in tables)."""
    from accel.dataflow import OutputStationary, WeightStationary, check_registry

    check_registry(DATAFLOWS)

    class Copy(WeightStationary):
        name, code = "wsx", 1

    with pytest.raises(ValueError, match=r"dataflow Copy: code must be 3, its position in DATAFLOWS \(got 1\)"):
        check_registry((*DATAFLOWS, Copy()))
    Copy.name, Copy.code = "os", 3
    with pytest.raises(ValueError, match="dataflow Copy: name 'os' is OutputStationary's already"):
        check_registry((*DATAFLOWS, Copy()))
    Copy.name = ""
    with pytest.raises(ValueError, match="dataflow Copy: give it a name"):
        check_registry((*DATAFLOWS, Copy()))
    assert isinstance(DATAFLOWS[0], OutputStationary)


@pytest.mark.parametrize("df", DATAFLOWS, ids=DATAFLOW_NAMES)
def test_every_registered_dataflow_is_well_formed(df):
    """The registry is the one place: each entry has its own class, code = its index, a unique name, a
    mapping of M, K, N to (rows, columns, time) and three distinct operand roles; both lookups find it;
    Hardware and HardwareArray accept it by name and by code."""
    assert DATAFLOW_NAMES == tuple(d.name for d in DATAFLOWS)  # derived, never a second list
    assert len(set(DATAFLOW_NAMES)) == len(DATAFLOWS)
    assert len({type(d) for d in DATAFLOWS}) == len(DATAFLOWS)  # one class per dataflow
    assert isinstance(df, Dataflow) and df.name and df.description
    assert DATAFLOWS[df.code] is df and by_code(df.code) is df and by_name(df.name) is df
    assert sorted(df.dims) == ["K", "M", "N"]
    assert sorted((df.stationary, df.row_op, df.col_op)) == ["filter", "ifmap", "ofmap"]
    assert Hardware(dataflow=df.name).dataflow == df.name
    arr = HardwareArray.from_dict({"dataflow": [df.name, "os", df.name]})
    assert arr.dataflow.tolist() == [df.code, 0, df.code]
    assert HardwareArray.from_dict({"dataflow": np.array([df.code])}).dataflow_names.tolist() == [df.name]


def test_an_unknown_dataflow_raises_and_lists_the_registered_ones():
    allowed = ", ".join(DATAFLOW_NAMES)
    with pytest.raises(ValueError, match=f"dataflow: must be one of {re.escape(allowed)}; got 'rs'"):
        by_name("rs")
    with pytest.raises(ValueError, match=f"unknown code {len(DATAFLOWS)}"):
        by_code(len(DATAFLOWS))
    with pytest.raises(ValueError, match="dataflow"):
        Hardware(dataflow="rs")
    with pytest.raises(ValueError, match=f"dataflow: must be one of {re.escape(allowed)}; got 'rs'"):
        HardwareArray.from_dict({"dataflow": ["os", "rs"]})
    with pytest.raises(ValueError, match="dataflow: must be a code"):
        HardwareArray.from_dict({"dataflow": np.array([0, len(DATAFLOWS)])})
    names = HardwareArray.from_dict({"dataflow": ["is", "os", "ws", "is"]})
    assert names.dataflow.tolist() == [2, 0, 1, 2]


def test_predictor_unit_must_place_every_hardware_field(monkeypatch):
    # a new Hardware field that the predictor unit neither overrides nor shares is an error, not a default
    monkeypatch.setattr(accel.hardware, "FIELDS", accel.hardware.FIELDS + ("sram_banks",))
    with pytest.raises(RuntimeError, match=r"does not say what to do with fields \['sram_banks'\]"):
        accel.hardware._check_predictor_fields()
    monkeypatch.undo()
    accel.hardware._check_predictor_fields()  # the real field list is fully placed
    hw = Hardware(rows=64, cols=32, dataflow="is", word_bytes=1, acc_bytes=2, bandwidth_gbps=9.0, clock_ghz=1.5,
                  vector_width=8, pred_rows=8, pred_cols=4, pred_kb=24.0)
    p = hw.predictor_unit()
    assert (p.rows, p.cols, p.ifmap_kb, p.filter_kb, p.ofmap_kb, p.pred_rows, p.pred_kb) == (8, 4, 8, 8, 8, 0, 0)
    assert (p.dataflow, p.word_bytes, p.acc_bytes, p.bandwidth_gbps, p.clock_ghz, p.vector_width) == \
        ("is", 1, 2, 9.0, 1.5, 8)
    assert HardwareArray.from_list([hw]).predictor_unit()[0] == p
