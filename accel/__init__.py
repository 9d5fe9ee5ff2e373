"""accel: an analytical, vectorized (numpy) model of a systolic-array DNN training accelerator.

Public API (keyword-only where it matters; every function accepts one configuration or many):

* :class:`Hardware` -- one configuration (frozen, validated); :class:`HardwareArray` -- many, as numpy
  columns (``from_list``, ``from_dict`` of arrays or a DataFrame, ``take``, ``to_dict``), so one workload is
  costed over thousands of configurations without a Python loop over them.
  ``hw.predictor_unit()`` gives the array that runs predictor GEMMs (the dedicated unit, or the main array).
* :class:`Tech`, :func:`load_tech` -- the technology table (energy, area, leakage constants with sources),
  default ``accel/data/tech_default.toml``.
* :func:`gemm_cost` ``(M, K, N, repeat=1, *, hw, tech=None, sum_over=None, include_leakage=True,
  im2col=None)`` -> :class:`GemmCost`: cycles (SCALE-Sim v3-exact compute cycles), stalls, SRAM/DRAM
  traffic, register-file and inter-PE bytes, energy (pJ); :class:`Im2col` / :func:`op_im2col` give a
  convolution's input geometry so that DRAM reads its raw input.
* :mod:`accel.dataflow` -- the dataflows (OS, WS, IS), one class each, in one registry
  (:data:`accel.dataflow.DATAFLOWS`, the instances); :data:`DATAFLOW_NAMES` -- their names, derived from it.
* :func:`vector_cost` ``(elems, *, hw, tech=None, elem_bytes=None, dram_fraction=1.0, sum_over=None,
  include_leakage=True)`` -> :class:`VectorCost`: bandwidth-bound vector-unit ops.
* :func:`area_mm2`, :func:`area_breakdown`, :func:`leakage_w`, :func:`peak_power_w`.
* :mod:`accel.schedule` -- training steps and jobs on one accelerator; :mod:`accel.pipeline` -- several:
  pipeline schedules, the step timer, balanced stages of a model, data-parallel jobs (``docs/pipeline.md``).

Shapes: op arrays are (L,); results are (L,) for a Hardware and (H, L) for a HardwareArray, or reduced over
ops with ``sum_over`` weights (L,) / (L, P). Units: cycles, words, bytes, pJ, seconds, mm^2, W.

This package is pure numpy: it knows nothing of Optuna, of the workload zoo, or of accuracy.
The model's equations and limits are in ``docs/accelerator.md``.
"""

from accel.area import area_breakdown, area_mm2, leakage_w, peak_power_w
from accel.dataflow import DATAFLOW_NAMES
from accel.gemm import ENERGY_COMPONENTS, OPERANDS, GemmCost, Im2col, gemm_cost, op_im2col
from accel.hardware import Hardware, HardwareArray
from accel.tech import Tech, default_tech, load_tech
from accel.vector import VectorCost, vector_cost

__all__ = [
    "Hardware", "HardwareArray", "DATAFLOW_NAMES",
    "Tech", "load_tech", "default_tech",
    "gemm_cost", "GemmCost", "Im2col", "op_im2col", "OPERANDS", "ENERGY_COMPONENTS",
    "vector_cost", "VectorCost",
    "area_mm2", "area_breakdown", "leakage_w", "peak_power_w",
]
