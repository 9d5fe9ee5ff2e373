"""Generate SCALE-Sim v3 reference results for the accelerator model's cycle-exact test.

Runs only where ``scalesim`` (3.0.0) is importable, e.g.::

    python3 -m venv /tmp/scalesim-venv
    /tmp/scalesim-venv/bin/pip install scalesim==3.0.0 numpy==2.3.5
    /tmp/scalesim-venv/bin/python bench/gen_scalesim_reference.py

and writes ``tests/data/scalesim/reference.csv``. Every case is one layer simulated in SCALE-Sim's
estimate-bandwidth mode (``InterfaceBandwidth = CALC``, no stalls), with an empty layout file (header only)
and no custom layouts or sparsity. The counters kept are read from SCALE-Sim's own per-layer report items
(the same numbers it writes to COMPUTE_REPORT.csv and DETAILED_ACCESS_REPORT.csv):

* ``total_cycles``         -- the "Total Cycles" column (compute cycles, every fold padded to the array);
* ``total_cycles_prefetch`` -- "Total Cycles (incl. prefetch)";
* ``stall_cycles``         -- "Stall Cycles" (0 in CALC mode);
* ``sram_ifmap_reads``, ``sram_filter_reads``, ``sram_ofmap_writes`` -- its SRAM access counts (words);
* ``dram_ifmap_reads``, ``dram_filter_reads``, ``dram_ofmap_writes`` -- its DRAM access counts (words).

Convolutions are given to SCALE-Sim in its conv topology format (no padding) and use shapes where its output
size ceil((H-R+s)/s) equals floor((H-R)/s)+1; the CSV also holds their im2col GEMM view (M = P*Q output
pixels, K = R*S*C, N = filters) which is what the model under test consumes.
"""

from __future__ import annotations

import contextlib
import csv
import io
import sys
import tempfile
import time
from pathlib import Path

try:
    import scalesim
    from scalesim.scale_sim import scalesim as ScaleSim
except ImportError:  # pragma: no cover - this script is run by hand in a scratch venv
    sys.exit("scalesim is not importable here; see this file's docstring for the scratch venv")

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "scalesim" / "reference.csv"

CONFIG = """[general]
run_name = ref

[run_presets]
InterfaceBandwidth = CALC
UseRamulatorTrace = False

[architecture_presets]
ArrayHeight = {rows}
ArrayWidth = {cols}
ifmapsramszkB = {ifmap_kb}
filtersramszkB = {filter_kb}
ofmapsramszkB = {ofmap_kb}
IfmapOffset = 0
FilterOffset = 10000000
OfmapOffset = 20000000
Bandwidth = 10
Dataflow = {dataflow}
ReadRequestBuffer = 32
WriteRequestBuffer = 32

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = 10
IfmapSRAMBankNum = 10
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = 10
FilterSRAMBankNum = 10
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false
SparseRep = ellpack_block
OptimizedMapping = false
BlockSize = 8
RandomNumberGeneratorSeed = 40
"""

ARRAYS = [(8, 8), (16, 32), (32, 16), (64, 64), (128, 32), (256, 256)]
#: the dataflows SCALE-Sim models (its ``Dataflow`` option): the reference covers these, not
#: every dataflow in ``accel.dataflow.DATAFLOWS``
SCALESIM_DATAFLOWS = ["os", "ws", "is"]
SRAM_KB = (64, 64, 64)

# Per array: a stride-1 conv (H, W, C, filters, R, S), a stride-2 conv, and a GEMM (M, K, N). Shapes are
# small (seconds of simulation each) and chosen so that folds are partial in both array dimensions.
# Every stride-2 shape has (H - R) even, so SCALE-Sim's ceil((H-R+s)/s) equals floor((H-R)/s)+1.
SHAPES = {
    (8, 8): dict(conv1=(10, 9, 3, 13, 3, 3), conv2=(11, 13, 2, 6, 3, 3), gemm=(21, 19, 11)),
    (16, 32): dict(conv1=(9, 9, 5, 40, 3, 3), conv2=(13, 11, 3, 35, 3, 3), gemm=(37, 23, 70)),
    (32, 16): dict(conv1=(12, 10, 4, 20, 3, 3), conv2=(15, 15, 6, 17, 5, 5), gemm=(70, 45, 33)),
    (64, 64): dict(conv1=(14, 14, 8, 70, 3, 3), conv2=(17, 17, 16, 130, 3, 3), gemm=(150, 100, 90)),
    (128, 32): dict(conv1=(18, 18, 16, 40, 3, 3), conv2=(21, 21, 8, 70, 5, 5), gemm=(300, 70, 50)),
    (256, 256): dict(conv1=(12, 12, 32, 300, 3, 3), conv2=(23, 23, 8, 260, 7, 7), gemm=(270, 300, 520)),
}


def run_case(tmp: Path, *, rows, cols, dataflow, kind, shape, stride):
    cfg = tmp / "scale.cfg"
    cfg.write_text(CONFIG.format(rows=rows, cols=cols, dataflow=dataflow, ifmap_kb=SRAM_KB[0],
                                 filter_kb=SRAM_KB[1], ofmap_kb=SRAM_KB[2]))
    topo = tmp / "topo.csv"
    if kind == "gemm":
        m, k, n = shape
        topo.write_text(f"Layer, M, N, K,\nl0, {m}, {n}, {k},\n")
        gemm = (m, k, n)
    else:
        h, w, c, f, r, s = shape
        assert (h - r) % stride == 0 and (w - s) % stride == 0, shape
        topo.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
                        f"Num Filter, Strides,\nl0, {h}, {w}, {r}, {s}, {c}, {f}, {stride},\n")
        p, q = (h - r) // stride + 1, (w - s) // stride + 1
        gemm = (p * q, r * s * c, f)
    layout = tmp / "layout.csv"
    layout.write_text("Layer name, IFMAP SRAM Bank Num, IFMAP SRAM Bank Port,\n")
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        sim = ScaleSim(save_disk_space=True, verbose=False, config=str(cfg), topology=str(topo),
                       layout=str(layout), input_type_gemm=(kind == "gemm"))
        sim.run_scale(top_path=str(tmp))
    elapsed = time.perf_counter() - t0
    layer = sim.runner.single_layer_sim_object_list[0]
    layer.calc_report_data()
    row = dict(
        case=f"{dataflow}-{rows}x{cols}-{kind}",
        dataflow=dataflow, rows=rows, cols=cols, kind=kind,
        conv_h="", conv_w="", conv_c="", conv_filters="", conv_r="", conv_s="", stride="",
        M=gemm[0], K=gemm[1], N=gemm[2],
        ifmap_kb=SRAM_KB[0], filter_kb=SRAM_KB[1], ofmap_kb=SRAM_KB[2],
        total_cycles=int(layer.total_cycles),
        total_cycles_prefetch=int(layer.overall_cycles),
        stall_cycles=int(layer.stall_cycles),
        sram_ifmap_reads=int(layer.ifmap_sram_reads),
        sram_filter_reads=int(layer.filter_sram_reads),
        sram_ofmap_writes=int(layer.ofmap_sram_writes),
        dram_ifmap_reads=int(layer.ifmap_dram_reads),
        dram_filter_reads=int(layer.filter_dram_reads),
        dram_ofmap_writes=int(layer.ofmap_dram_writes),
        sim_seconds=round(elapsed, 3),
    )
    if kind != "gemm":
        h, w, c, f, r, s = shape
        row.update(conv_h=h, conv_w=w, conv_c=c, conv_filters=f, conv_r=r, conv_s=s, stride=stride)
    return row


def main() -> None:
    rows_out = []
    t0 = time.perf_counter()
    for (r, c) in ARRAYS:
        for df in SCALESIM_DATAFLOWS:
            for kind, stride in (("conv1", 1), ("conv2", 2), ("gemm", 1)):
                with tempfile.TemporaryDirectory() as tmp:
                    row = run_case(Path(tmp), rows=r, cols=c, dataflow=df,
                                   kind="gemm" if kind == "gemm" else "conv",
                                   shape=SHAPES[(r, c)][kind], stride=stride)
                row["case"] = f"{df}-{r}x{c}-{kind}"
                rows_out.append(row)
                print(f"{row['case']:>20}  M={row['M']:>5} K={row['K']:>5} N={row['N']:>5}  "
                      f"cycles={row['total_cycles']:>8}  ({row['sim_seconds']:.2f} s)", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows_out[0]))
        writer.writeheader()
        writer.writerows(rows_out)
    print(f"wrote {len(rows_out)} cases to {OUT} in {time.perf_counter() - t0:.1f} s "
          f"(scalesim {getattr(scalesim, '__version__', '3.0.0')})")


if __name__ == "__main__":
    main()
