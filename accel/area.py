"""Area (mm^2), leakage power and peak power of a configuration (vectorized over a HardwareArray).

* PEs: ``(rows*cols + pred_rows*pred_cols) * pe_area_um2``;
* SRAM: ``(ifmap_kb + filter_kb + ofmap_kb + pred_kb) * sram_mm2_per_kib`` (both halves of each buffer);
* vector unit: ``vector_width * vector_lane_area_um2``;
* leakage: ``total area * leakage_mw_per_mm2``;
* peak power: leakage + the dynamic power of every PE doing one MAC per cycle (MAC, and the register and
  inter-PE bytes of the configuration's dataflow per MAC in steady state), the array's SRAM traffic at that
  rate (rows + cols operand words read, cols results written per cycle, at the default buffers' access
  energy), the vector unit at full rate, and DRAM at full bandwidth.
"""

from __future__ import annotations

import numpy as np

from accel.dataflow import DATAFLOWS
from accel.hardware import Hardware, HardwareArray, as_array
from accel.tech import Tech, default_tech

__all__ = ["area_breakdown", "area_mm2", "leakage_w", "peak_power_w"]



def _out(x, single):
    return float(x[0]) if single else x


def area_breakdown(hw: Hardware | HardwareArray, tech: Tech | None = None) -> dict:
    """Area in mm^2 by part: ``pe``, ``sram``, ``vector``, ``predictor_pe``, ``predictor_sram``, ``total``."""
    tech = tech or default_tech()
    h, single = as_array(hw)
    pe = h.rows * h.cols * tech.pe_area_um2 * 1e-6
    sram = (h.ifmap_kb + h.filter_kb + h.ofmap_kb) * tech.sram_mm2_per_kib
    vec = h.vector_width * tech.vector_lane_area_um2 * 1e-6
    ppe = h.pred_rows * h.pred_cols * tech.pe_area_um2 * 1e-6
    psram = h.pred_kb * tech.sram_mm2_per_kib
    parts = dict(pe=pe, sram=sram, vector=vec, predictor_pe=ppe, predictor_sram=psram)
    parts["total"] = pe + sram + vec + ppe + psram
    return {k: _out(np.asarray(v, dtype=np.float64), single) for k, v in parts.items()}


def area_mm2(hw: Hardware | HardwareArray, tech: Tech | None = None):
    """Total area in mm^2 (float for a Hardware, array (H,) for a HardwareArray)."""
    return area_breakdown(hw, tech)["total"]


def leakage_w(hw: Hardware | HardwareArray, tech: Tech | None = None):
    """Leakage power of the whole chip in W."""
    tech = tech or default_tech()
    return area_mm2(hw, tech) * tech.leakage_mw_per_mm2 * 1e-3


def peak_power_w(hw: Hardware | HardwareArray, tech: Tech | None = None):
    """Peak power in W (see the module docstring for what is counted)."""
    tech = tech or default_tech()
    h, single = as_array(hw)
    f = h.clock_ghz * 1e9
    # per MAC in steady state, the dataflow's register and inter-PE bytes (edges and preloads aside)
    rf_b, ip_b = np.zeros(len(h)), np.zeros(len(h))
    for df in DATAFLOWS:
        m = h.dataflow == df.code
        rb, ib = df.steady_pe_bytes(h.word_bytes[m].astype(np.float64), h.acc_bytes[m].astype(np.float64))
        rf_b[m], ip_b[m] = rb, ib
    per_mac = tech.mac_pj + rf_b * tech.rf_pj_per_byte + ip_b * tech.interpe_pj_per_byte
    pes = h.rows * h.cols + h.pred_rows * h.pred_cols
    sram = ((h.rows * h.word_bytes) * tech.sram_pj_per_byte(h.ifmap_kb / 2.0)
            + (h.cols * h.word_bytes) * tech.sram_pj_per_byte(h.filter_kb / 2.0)
            + (h.cols * h.acc_bytes) * tech.sram_pj_per_byte(h.ofmap_kb / 2.0))
    vec = h.vector_width * tech.vector_elem_pj
    dram = h.bandwidth_gbps * 1e9 * tech.dram_pj_per_byte  # pJ/s
    dyn = (f * (pes * per_mac + sram + vec) + dram) * 1e-12
    total = dyn + np.asarray(leakage_w(h, tech))
    return _out(np.asarray(total, dtype=np.float64), single)
