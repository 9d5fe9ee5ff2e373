"""Regenerate tests/data/zigzag/: ZigZag's energy and DRAM traffic for zoo layers on arrays like ours.

Run it with ZigZag installed in a scratch virtualenv outside the repository (ZigZag is never a dependency
of this project; its 3.9 release imports ``six`` without declaring it)::

    python3 -m venv /tmp/zz-venv
    /tmp/zz-venv/bin/pip install zigzag-dse==3.9.1 six
    /tmp/zz-venv/bin/python bench/gen_zigzag_reference.py            # all cases (about 50 min on 2 loaded cores)
    /tmp/zz-venv/bin/python bench/gen_zigzag_reference.py --only L01  # cases of one layer
    python bench/gen_zigzag_reference.py --compare    # ours beside the stored numbers (no ZigZag needed)

It imports ``models.zoo`` from this checkout (pure Python) to take the layers from the zoo, writes the
hardware and mapping templates it gives ZigZag to ``tests/data/zigzag/templates/`` and the results to
``tests/data/zigzag/reference.csv`` (see that folder's README for the columns and the template).

The template mirrors ``accel``'s machine: an R x C array of MACs; per PE one register per operand (8-bit
input and weight, 16-bit partial sum); three global buffers (ifmap, filter, ofmap), each given the working
half of our double-buffered SRAM; DRAM. Energies are Eyeriss-normalized per byte (MAC 1, register 1,
global buffer 6, DRAM 200): every port's minimum bandwidth is 8 bits, so ZigZag counts bytes, and each
access of the maximum bandwidth costs (energy per byte) x (bytes per access). ZigZag's dataflow is its
spatial unrolling (OS: pixels x filters; WS: input channels x filters; IS: input channels x pixels); its
LOMA mapper then searches the temporal loops for minimum energy.
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests" / "data" / "zigzag"

#: (case id, zoo model, layer name, batch); GEMM layers are costed as 1x1 convolutions over their tokens
LAYERS = [
    ("L01", "resnet18", "layer1.0.conv1", 1),
    ("L02", "resnet18", "layer2.0.conv1", 1),
    ("L03", "resnet18", "layer2.0.downsample", 1),
    ("L04", "resnet18", "layer4.0.conv2", 1),
    ("L05", "vgg16", "features.19", 1),
    ("L06", "mobilenet_v2", "features.3.expand", 1),
    ("L07", "transformer_base", "encoder.layers.0.self_attn.q_proj", 1),
    ("L08", "transformer_base", "encoder.layers.0.fc1", 1),
]
ARRAYS = [(16, 16), (32, 32)]
#: the dataflows this script maps onto ZigZag's spatial unrollings (see ``mapping``): the reference
#: covers these, not every dataflow in ``accel.dataflow.DATAFLOWS``
ZIGZAG_DATAFLOWS = ["os", "ws", "is"]
#: our SRAM per operand (KiB, double-buffered): ZigZag's buffers get one half each
SRAM_KB = 128.0
#: DRAM bytes per cycle (ours: bandwidth_gbps / clock_ghz)
DRAM_BYTES_PER_CYCLE = 32
E_BYTE = {"mac": 1.0, "rf": 1.0, "gb": 6.0, "dram": 200.0}
WORD_BITS, ACC_BITS = 8, 16

COLUMNS = ["case", "model", "layer", "kind", "batch", "in_h", "in_w", "in_c", "out_c", "k_h", "k_w", "stride",
           "pad", "M", "K", "N", "rows", "cols", "dataflow", "sram_kb", "zz_energy", "zz_mac", "zz_rf",
           "zz_gb", "zz_dram", "zz_dram_ifmap_bytes", "zz_dram_filter_bytes", "zz_dram_ofmap_bytes",
           "zz_latency_cycles", "zz_spatial", "zz_temporal", "seconds"]


def _layer(model: str, name: str):
    sys.path.insert(0, str(REPO))
    from models import zoo

    net = zoo.build(model)
    for l in net.layers:
        if l.name == name:
            return l
    raise KeyError(f"{model} has no layer {name}")


def _shape(model, name, batch):
    """(kind, H, W, C, K_out, kh, kw, stride, pad, M, K, N) of a zoo layer (GEMMs as 1x1 convolutions)."""
    l = _layer(model, name)
    if l.kind == "conv":
        h, w, c, kh, kw, sh, sw, ph, pw, dil = l.geometry
        assert sh == sw and ph == pw and dil == 1 and l.gemm[3] == 1, "square, undilated, ungrouped convs only"
        m, k, n, _ = l.gemm
        return ("conv", h, w, c, l.out[0], kh, kw, sh, ph, m * batch, k, n)
    tokens, k, n, _ = l.gemm
    return ("gemm", 1, tokens, k, n, 1, 1, 1, 0, tokens * batch, k, n)


def _ports(ops_dirs, bmin, bmax):
    r = [f"{o}, {d}" for o, d in ops_dirs if d in ("tl", "th")]
    w = [f"{o}, {d}" for o, d in ops_dirs if d in ("fh", "fl")]
    return [dict(name="r_port_1", type="read", bandwidth_min=bmin, bandwidth_max=bmax, allocation=r),
            dict(name="w_port_1", type="write", bandwidth_min=bmin, bandwidth_max=bmax, allocation=w)]


def hardware(rows: int, cols: int) -> dict:
    I_ = [("I1", "tl"), ("I1", "fh")]
    W_ = [("I2", "tl"), ("I2", "fh")]
    O_ = [("O", "tl"), ("O", "th"), ("O", "fh"), ("O", "fl")]
    half_bits = int(SRAM_KB * 512 * 8)
    gb_bw = 8 * 2 * max(rows, cols)  # ample: the array's edge per cycle

    def mem(size_bits, e_byte, bmin, bmax, operands, served, dirs):
        return dict(size=size_bits, r_cost=e_byte * bmax / 8, w_cost=e_byte * bmax / 8, area=0, latency=1,
                    operands=operands, ports=_ports(dirs, bmin, bmax), served_dimensions=served)

    dram_bw = 8 * DRAM_BYTES_PER_CYCLE
    dram_alloc = ([f"{o}, {d}" for o in ("I1", "I2") for d in ("fh", "tl")]
                  + [f"O, {d}" for d in ("fh", "tl", "fl", "th")])
    return dict(
        name=f"dse_{rows}x{cols}",
        memories={
            "rf_I": mem(WORD_BITS, E_BYTE["rf"], 8, WORD_BITS, ["I1"], [], I_),
            "rf_W": mem(WORD_BITS, E_BYTE["rf"], 8, WORD_BITS, ["I2"], [], W_),
            "rf_O": mem(ACC_BITS, E_BYTE["rf"], 8, ACC_BITS, ["O"], [], O_),
            "gb_I": mem(half_bits, E_BYTE["gb"], 8, gb_bw, ["I1"], ["D1", "D2"], I_),
            "gb_W": mem(half_bits, E_BYTE["gb"], 8, gb_bw, ["I2"], ["D1", "D2"], W_),
            "gb_O": mem(half_bits, E_BYTE["gb"], 8, 2 * gb_bw, ["O"], ["D1", "D2"], O_),
            "dram": dict(size=10 ** 12, r_cost=E_BYTE["dram"] * dram_bw / 8, w_cost=E_BYTE["dram"] * dram_bw / 8,
                         area=0, latency=1, operands=["I1", "I2", "O"],
                         ports=[dict(name="rw_port_1", type="read_write", bandwidth_min=8, bandwidth_max=dram_bw,
                                     allocation=dram_alloc)],
                         served_dimensions=["D1", "D2"]),
        },
        operational_array=dict(unit_energy=E_BYTE["mac"], unit_area=1, dimensions=["D1", "D2"], sizes=[rows, cols]),
    )


def _pixels(oy, ox, size):
    """Spatial unrolling of output pixels over an array edge of ``size``: OX first, then OY."""
    out = [f"OX, {min(ox, size)}"]
    if ox < size and oy > 1:
        out.append(f"OY, {min(oy, size // ox)}")
    return out


def mapping(df: str, rows: int, cols: int, shape) -> list:
    kind, h, w, c, k_out, kh, kw, s, p, *_ = shape
    oy, ox = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    sm = {
        "os": {"D1": _pixels(oy, ox, rows), "D2": [f"K, {min(cols, k_out)}"]},
        "ws": {"D1": [f"C, {min(rows, c)}"], "D2": [f"K, {min(cols, k_out)}"]},
        "is": {"D1": [f"C, {min(rows, c)}"], "D2": _pixels(oy, ox, cols)},
    }[df]
    return [dict(name="default", spatial_mapping=sm, memory_operand_links=dict(O="O", W="I2", I="I1"))]


def workload(shape, batch) -> list:
    kind, h, w, c, k_out, kh, kw, s, p, *_ = shape
    oy, ox = (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1
    layer = dict(id=0, name="layer", operator_type="Conv",
                 equation="O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][iy][ix]",
                 dimension_relations=[f"ix={s}*ox+1*fx", f"iy={s}*oy+1*fy"],
                 loop_dims=["B", "K", "C", "OY", "OX", "FY", "FX"], loop_sizes=[batch, k_out, c, oy, ox, kh, kw],
                 operand_precision=dict(I=WORD_BITS, W=WORD_BITS, O=ACC_BITS, O_final=WORD_BITS),
                 operand_source=dict(I=0))
    if p:
        layer.update(pr_loop_dims=["IX", "IY"], pr_loop_sizes=[w + 2 * p, h + 2 * p], padding=[[p, p], [p, p]])
    return [layer]


def write_templates(case, model, name, batch, rows, cols, df):
    """The hardware, mapping and workload files ZigZag gets for one case (committed in templates/)."""
    import yaml

    shape = _shape(model, name, batch)
    tdir = OUT / "templates"
    tdir.mkdir(parents=True, exist_ok=True)
    paths = (tdir / f"hardware_{rows}x{cols}.yaml", tdir / f"mapping_{case}_{df}_{rows}x{cols}.yaml",
             tdir / f"workload_{case}.yaml")
    for path, doc in zip(paths, (hardware(rows, cols), mapping(df, rows, cols, shape), workload(shape, batch))):
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return paths


def run_case(case, model, name, batch, rows, cols, df, tmp: Path) -> dict:
    import yaml  # noqa: F401 - availability probe: fail on a missing PyYAML before importing ZigZag
    from zigzag.api import get_hardware_performance_zigzag

    shape = _shape(model, name, batch)
    hw_path, map_path, wl_path = write_templates(case, model, name, batch, rows, cols, df)
    t0 = time.time()
    energy, latency, cmes = get_hardware_performance_zigzag(
        str(wl_path), str(hw_path), str(map_path), opt="energy", dump_folder=str(tmp / "dump"),
        loma_show_progress_bar=False)
    cme = cmes[0][1][0][0]
    br = {str(op): [float(x) for x in v] for op, v in cme.mem_energy_breakdown.items()}
    kind, h, w, c, k_out, kh, kw, s, p, m, k, n = shape
    row = dict(case=case, model=model, layer=name, kind=kind, batch=batch, in_h=h, in_w=w, in_c=c, out_c=k_out,
               k_h=kh, k_w=kw, stride=s, pad=p, M=m, K=k, N=n, rows=rows, cols=cols, dataflow=df, sram_kb=SRAM_KB,
               zz_energy=float(energy), zz_mac=float(cme.mac_energy),
               zz_rf=sum(v[0] for v in br.values()), zz_gb=sum(v[1] for v in br.values()),
               zz_dram=sum(v[2] for v in br.values()),
               zz_dram_ifmap_bytes=br["I"][2] / E_BYTE["dram"], zz_dram_filter_bytes=br["W"][2] / E_BYTE["dram"],
               zz_dram_ofmap_bytes=br["O"][2] / E_BYTE["dram"], zz_latency_cycles=float(latency),
               zz_spatial=str(cme.spatial_mapping).replace("\n", " "),
               zz_temporal=str(cme.temporal_mapping).replace("\n", " "), seconds=round(time.time() - t0, 1))
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", help="case ids to run (default: all)")
    ap.add_argument("--out", default=str(OUT / "reference.csv"))
    args = ap.parse_args(argv)
    logging.disable(logging.CRITICAL)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    out = Path(args.out)
    done = {}
    if out.exists():  # resume: keep finished rows
        with out.open() as f:
            for r in csv.DictReader(f):
                done[(r["case"], r["rows"], r["cols"], r["dataflow"])] = r
    rows_out = list(done.values())
    with tempfile.TemporaryDirectory() as tmp:
        for case, model, name, batch in LAYERS:
            if args.only and case not in args.only:
                continue
            for rows, cols in ARRAYS:
                for df in ZIGZAG_DATAFLOWS:
                    key = (case, str(rows), str(cols), df)
                    if key in done:
                        continue
                    r = run_case(case, model, name, batch, rows, cols, df, Path(tmp))
                    rows_out.append(r)
                    print(f"{case} {rows}x{cols} {df}: energy {r['zz_energy']:.4g}, DRAM ifmap "
                          f"{r['zz_dram_ifmap_bytes']:.0f} B ({r['seconds']} s)", flush=True)
                    with out.open("w", newline="") as f:  # write as we go
                        wr = csv.DictWriter(f, fieldnames=COLUMNS)
                        wr.writeheader()
                        order = {c[0]: i for i, c in enumerate(LAYERS)}
                        for x in sorted(rows_out, key=lambda x: (order[x["case"]], int(x["rows"]),
                                                                 ZIGZAG_DATAFLOWS.index(x["dataflow"]))):
                            wr.writerow(x)



def compare(path: Path = OUT / "reference.csv") -> None:
    """Print our model beside every reference row (needs this project installed, not ZigZag)."""
    import numpy as np

    sys.path.insert(0, str(REPO))
    from accel import Hardware, gemm_cost, load_tech
    from accel.gemm import Im2col

    tech = load_tech(OUT / "tech_eyeriss_normalized.toml")
    rows = list(csv.DictReader(path.open()))
    ratios = {k: [] for k in ("energy", "ifmap", "filter", "ofmap")}
    best = {}
    print(f"{'case':<5}{'array':>6}{'df':>4}{'E ours':>10}{'E zz':>10}{'ratio':>7}"
          f"{'ifmap':>8}{'filter':>8}{'ofmap':>8}  (DRAM bytes ours / ZigZag)")
    for r in rows:
        s = float(r["sram_kb"])
        hw = Hardware(rows=int(r["rows"]), cols=int(r["cols"]), dataflow=r["dataflow"], word_bytes=1, acc_bytes=2,
                      ifmap_kb=s, filter_kb=s, ofmap_kb=s, bandwidth_gbps=float(DRAM_BYTES_PER_CYCLE))
        geo = Im2col.conv(*(int(r[k]) for k in ("in_h", "in_w", "in_c", "k_h", "k_w")), stride=int(r["stride"]),
                          pad=int(r["pad"])) if r["kind"] == "conv" else None
        g = gemm_cost([int(r["M"])], [int(r["K"])], [int(r["N"])], hw=hw, tech=tech, im2col=geo,
                      include_leakage=False)
        e = float(g.energy_pj["total"][0])
        ratios["energy"].append(e / float(r["zz_energy"]))
        for op in ("ifmap", "filter", "ofmap"):
            ratios[op].append(float(g.dram_bytes[op][0]) / float(r[f"zz_dram_{op}_bytes"]))
        best.setdefault((r["case"], r["rows"]), {})[r["dataflow"]] = (e, float(r["zz_energy"]))
        print(f"{r['case']:<5}{r['rows'] + 'x' + r['cols']:>6}{r['dataflow']:>4}{e:>10.3g}"
              f"{float(r['zz_energy']):>10.3g}{ratios['energy'][-1]:>7.2f}"
              + "".join(f"{ratios[op][-1]:>8.2f}" for op in ("ifmap", "filter", "ofmap")))
    for k, v in ratios.items():
        v = np.array(v)
        print(f"{k:>7}: median ratio {np.median(v):.2f}, within 2x on {np.mean((v >= 0.5) & (v <= 2)):.0%} of "
              f"{len(v)} rows (range {v.min():.2f}-{v.max():.2f})")
    agree = [min(g, key=lambda d: g[d][0]) == min(g, key=lambda d: g[d][1]) for g in best.values()]
    order = [sorted(g, key=lambda d: g[d][0]) == sorted(g, key=lambda d: g[d][1]) for g in best.values()]
    spread = lambda g, i: max(x[i] for x in g.values()) / min(x[i] for x in g.values())  # noqa: E731 - local shorthand
    print(f"best dataflow agrees in {sum(agree)} of {len(agree)} layer x array groups; full order in {sum(order)}; "
          f"median spread across dataflows ours {np.median([spread(g, 0) for g in best.values()]):.2f}x, "
          f"ZigZag {np.median([spread(g, 1) for g in best.values()]):.2f}x")


if __name__ == "__main__" and "--compare" in sys.argv:
    compare()
    sys.exit(0)


if __name__ == "__main__":
    main()
