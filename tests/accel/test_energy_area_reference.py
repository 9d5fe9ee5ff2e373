"""One documented reference configuration, every number derived by hand from the technology table.

Reference: 16x16 output-stationary array, bf16 operands (2 B), fp32 accumulators (4 B), 32 KiB per SRAM
(16 KiB per half), 16 GB/s DRAM at 1 GHz (16 B/cycle), 16 vector lanes; one GEMM M=64, K=32, N=48.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

import accel
from accel import Hardware, area_breakdown, gemm_cost, leakage_w, vector_cost

TOML = Path(accel.__file__).parent / "data" / "tech_default.toml"
T = {k: v["value"] for k, v in tomllib.loads(TOML.read_text()).items() if isinstance(v, dict)}

HW = Hardware(rows=16, cols=16, dataflow="os", word_bytes=2, acc_bytes=4, ifmap_kb=32, filter_kb=32,
              ofmap_kb=32, bandwidth_gbps=16, clock_ghz=1.0, vector_width=16)


def test_area_by_hand():
    a = area_breakdown(HW)
    pe = 16 * 16 * T["pe_area_um2"] * 1e-6          # 256 * 5824 um^2 = 1.490944 mm^2
    sram = (32 + 32 + 32) * T["sram_mm2_per_kib"]  # 96 KiB * 0.00472 = 0.45312 mm^2
    vec = 16 * T["vector_lane_area_um2"] * 1e-6     # 16 * 11884 um^2 = 0.190144 mm^2
    assert a["pe"] == pytest.approx(1.490944)
    assert a["sram"] == pytest.approx(0.45312)
    assert a["vector"] == pytest.approx(0.190144)
    assert a["pe"] == pytest.approx(pe) and a["sram"] == pytest.approx(sram) and a["vector"] == pytest.approx(vec)
    assert a["predictor_pe"] == 0 and a["predictor_sram"] == 0
    assert a["total"] == pytest.approx(2.134208)
    assert leakage_w(HW) == pytest.approx(2.134208 * T["leakage_mw_per_mm2"] * 1e-3)


def test_gemm_cycles_traffic_and_energy_by_hand():
    r = gemm_cost([64], [32], [48], hw=HW)
    # OS: (Sr, Sc, T) = (M, N, K) = (64, 48, 32); Fr = 4, Fc = 3, F = 12
    assert r.compute_cycles[0] == 12 * (16 + 16 + 32 - 2) - 1 == 743
    macs = 64 * 32 * 48
    assert r.macs[0] == macs == 98304
    # array-side SRAM: ifmap Sr*T*Fc, filter Sc*T*Fr, ofmap M*N writes
    assert r.sram_reads["ifmap"][0] == 64 * 32 * 3 == 6144
    assert r.sram_reads["filter"][0] == 48 * 32 * 4 == 6144
    assert r.sram_writes["ofmap"][0] == 64 * 48 == 3072
    # everything fits its 16 KiB half (A is 4096 B, a B column tile 16*32*2 = 1024 B): unique data only
    assert r.dram_bytes["ifmap"][0] == 64 * 32 * 2 == 4096
    assert r.dram_bytes["filter"][0] == 32 * 48 * 2 == 3072
    assert r.dram_bytes["ofmap"][0] == 64 * 48 * 2 == 6144
    dram = 4096 + 3072 + 6144
    # time: fill = first A tile 16*32*2 + first B tile 16*32*2 = 2048 B; drain = 16*16*2 = 512 B;
    # 16 B/cycle: 2560/16 = 160 cycles; middle = max(743, (13312 - 2560)/16 = 672) = 743
    assert r.total_cycles[0] == 160 + 743 == 903
    assert r.stall_cycles[0] == 160
    assert r.utilization[0] == pytest.approx(98304 / (256 * 903))
    assert r.time_s[0] == pytest.approx(903e-9)
    e = r.energy_pj
    assert e["mac"][0] == pytest.approx(macs * T["mac_pj"])                                    # 196608 pJ
    # registers (OS): each MAC reads and writes its 4-byte accumulator, except the first MAC of each of the
    # 64*48 outputs, which only writes: 4 * (2*98304 - 3072) = 774144 B
    assert r.rf_bytes[0] == 4 * (2 * macs - 64 * 48) == 774144
    assert e["rf"][0] == pytest.approx(774144 * T["rf_pj_per_byte"])                         # 329011.2 pJ
    # inter-PE (OS): A reaches all but the first column of each of the Fc=3 column folds from a neighbour,
    # M*K*(N - Fc) = 64*32*45; B all but the top row of each of the Fr=4 row folds, K*N*(M - Fr) = 32*48*60;
    # outputs drain down 16-deep columns, 16*15/2 = 120 hops per column per row fold: 48 columns * 4 row folds
    # * 120; 2 bytes each
    moves = 64 * 32 * 45 + 32 * 48 * 60 + 48 * 4 * 120
    assert moves == 207360 and r.interpe_bytes[0] == 2 * moves
    assert e["interpe"][0] == pytest.approx(2 * moves * T["interpe_pj_per_byte"])            # 352512 pJ
    alpha = math.log(T["sram_large_pj"] / T["sram_small_pj"]) / math.log(T["sram_large_kib"] / T["sram_small_kib"])
    assert alpha == pytest.approx(math.log(10) / math.log(128))
    pj_per_byte_16k = T["sram_small_pj"] / 4 * (16 / T["sram_small_kib"]) ** alpha  # 1.25 * 10**(1/7)
    assert pj_per_byte_16k == pytest.approx(1.25 * 10 ** (1 / 7))
    sram_bytes = (6144 * 2 + 4096) + (6144 * 2 + 3072) + (3072 * 2 + 6144)  # array side + DRAM side
    assert sram_bytes == 44032
    assert e["sram"][0] == pytest.approx(sram_bytes * pj_per_byte_16k)
    assert e["dram"][0] == pytest.approx(dram * T["dram_pj_per_byte"])                          # 2129920 pJ
    leak = 2.134208 * T["leakage_mw_per_mm2"] * 1e-3 * 903e-9 * 1e12                           # 19271.9 pJ
    assert e["leakage"][0] == pytest.approx(leak)
    parts = ("mac", "rf", "interpe", "sram", "dram", "leakage")
    assert e["total"][0] == pytest.approx(sum(e[p][0] for p in parts))
    assert e["total"][0] == pytest.approx(196608 + 329011.2 + 352512 + 44032 * 1.25 * 10 ** (1 / 7)
                                          + 2129920 + leak)


def test_vector_op_by_hand():
    v = vector_cost([10_000], hw=HW)
    # compute ceil(10000/16) = 625 cycles; DRAM 20000 B / 16 B per cycle = 1250 cycles -> bandwidth-bound
    assert v.compute_cycles[0] == 625
    assert v.total_cycles[0] == 1250
    assert v.stall_cycles[0] == 625
    e = v.energy_pj
    assert e["alu"][0] == pytest.approx(10_000 * T["vector_elem_pj"])
    assert e["dram"][0] == pytest.approx(20_000 * T["dram_pj_per_byte"])
    assert e["sram"][0] == pytest.approx(2 * 20_000 * 1.25 * 10 ** (1 / 7))  # two passes, 16 KiB half
    assert e["leakage"][0] == pytest.approx(2.134208e-2 * 1250e-9 * 1e12)
