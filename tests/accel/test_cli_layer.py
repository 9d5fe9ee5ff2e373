"""The `dse layer` command function, registered on a throw-away typer app."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from accel import DATAFLOW_NAMES
from dse.cli.layer import layer
from dse.errors import UsageError

app = typer.Typer()
app.command("layer")(layer)
app.command("noop")(lambda: None)  # two commands so that "layer" is a sub-command, as in dse.cli
runner = CliRunner()


def test_gemm_json_has_the_documented_fields_and_matches_the_model():
    res = runner.invoke(app, ["layer", "--gemm", "64", "32", "48", "--rows", "16", "--cols", "16",
                              "--ifmap-kb", "32", "--filter-kb", "32", "--ofmap-kb", "32", "--bandwidth", "16",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["compute_cycles"] == 743 and out["total_cycles"] == 903 and out["stall_cycles"] == 160
    assert 0 < out["utilization"] <= 1
    assert set(out["energy_pj"]) >= {"mac", "sram", "dram", "leakage", "total"}


def test_conv_uses_the_im2col_view():
    res = runner.invoke(app, ["layer", "--conv", "11", "13", "2", "6", "3", "3", "--stride", "2",
                              "--rows", "8", "--cols", "8", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert (out["M"], out["K"], out["N"]) == (5 * 6, 18, 6)
    assert out["compute_cycles"] == 127  # SCALE-Sim 3.0.0, case os-8x8-conv2 in tests/data/scalesim


def test_table_output():
    res = runner.invoke(app, ["layer", "--gemm", "100", "200", "300", "--dataflow", "ws"])
    assert res.exit_code == 0, res.output
    for word in ("compute cycles", "stall cycles", "utilization", "ifmap", "dram", "leakage"):
        assert word in res.output


@pytest.mark.parametrize("args,pattern", [
    (["--rows", "8"], "--gemm/--conv"),
    (["--gemm", "1", "2", "3", "--conv", "5", "5", "1", "1", "3", "3"], "--gemm/--conv"),
    (["--gemm", "1", "2", "3", "--dataflow", "rs"], "--dataflow"),
    (["--gemm", "1", "2", "3", "--bandwidth", "0"], "--bandwidth"),
    (["--gemm", "1", "2", "3", "--cols", "256", "--ofmap-kb", "1"], "--ofmap-kb: impossible hardware"),
    (["--conv", "3", "3", "1", "1", "5", "5"], "--conv"),
    (["--conv", "3", "3", "1", "1", "5", "5", "--pad", "-1"], "--pad"),
    (["--gemm", "1", "2", "3", "--word-bytes", "4", "--acc-bytes", "2"], "--acc-bytes"),
    (["--gemm", "1", "2", "3", "--word-bytes", "0"], "--word-bytes"),
    (["--gemm", "1", "2", "3", "--dataflow", "rs"], "or all"),
    (["--gemm", "0", "2", "3"], "--gemm"),
    (["--topology", "net.csv", "--batch", "0"], "--batch: samples per GEMM, at least 1"),
    (["--topology", "net.csv", "-b", "-3"], "--batch"),
])
def test_bad_input_raises_usage_error(args, pattern):
    res = runner.invoke(app, ["layer", *args])
    assert isinstance(res.exception, UsageError), res.output
    assert pattern in str(res.exception)
    assert "\n" not in str(res.exception)


def test_word_sizes_and_padding_reach_the_model():
    res = runner.invoke(app, ["layer", "--conv", "6", "6", "2", "4", "3", "3", "--pad", "1", "--rows", "4",
                              "--cols", "4", "--word-bytes", "1", "--acc-bytes", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    # padding 1 keeps the 6x6 output: M = 36 pixels; K = 2 channels x 9 taps
    assert (out["M"], out["K"], out["N"]) == (36, 18, 4)
    assert out["hardware"]["word_bytes"] == 1 and out["hardware"]["acc_bytes"] == 2
    # the raw input (6*6*2 bytes, padding never fetched) fits the default buffers: read once
    assert out["dram_bytes"]["ifmap"] == 72
    # OS registers: 2-byte accumulators read and written per MAC (the first MAC of each output only writes)
    macs = 36 * 18 * 4
    assert out["rf_bytes"] == 2 * (2 * macs - 36 * 4)


def test_dataflow_all_shows_the_spread_across_dataflows():
    args = ["layer", "--conv", "28", "28", "128", "128", "3", "3", "--pad", "1", "--rows", "16", "--cols", "16"]
    res = runner.invoke(app, args + ["--dataflow", "all", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)["dataflows"]
    assert set(out) == set(DATAFLOW_NAMES)  # every registered dataflow
    for df in DATAFLOW_NAMES:
        one = json.loads(runner.invoke(app, args + ["--dataflow", df, "--json"]).output)
        assert out[df]["energy_pj"]["total"] == pytest.approx(one["energy_pj"]["total"], rel=1e-12)
    totals = [out[df]["energy_pj"]["total"] for df in DATAFLOW_NAMES]
    assert len(set(totals)) == len(DATAFLOW_NAMES)  # the dataflows cost differently
    # one column per dataflow: a terminal wide enough that no label wraps, however many are registered
    table = runner.invoke(app, args + ["--dataflow", "all"], env={"COLUMNS": str(40 + 20 * len(DATAFLOW_NAMES))})
    assert table.exit_code == 0
    for word in (*(df.upper() for df in DATAFLOW_NAMES), "energy / best", "spread (highest / lowest)",
                 "DRAM bytes ifmap"):
        assert word in table.output


def _tech_file(tmp_path, factor: float = 2.0):
    """The default technology table with DRAM energy per byte multiplied by ``factor``."""
    import re
    from importlib import resources

    text = resources.files("accel").joinpath("data/tech_default.toml").read_text()
    head, rest = text.split("[dram_pj_per_byte]", 1)
    old = float(re.search(r"value\s*=\s*([0-9.eE+-]+)", rest).group(1))
    rest = re.sub(r"value\s*=\s*[0-9.eE+-]+", f"value = {old * factor!r}", rest, count=1)
    p = tmp_path / "tech.toml"
    p.write_text(head + "[dram_pj_per_byte]" + rest)
    return p


def test_tech_file_with_doubled_dram_energy_doubles_the_dram_energy(tmp_path):
    base = ["layer", "--gemm", "512", "512", "512", "--json"]
    default = json.loads(runner.invoke(app, base).output)
    res = runner.invoke(app, [*base, "--tech", str(_tech_file(tmp_path))])
    assert res.exit_code == 0, res.output
    doubled = json.loads(res.output)
    assert default["energy_pj"]["dram"] > 0
    assert doubled["energy_pj"]["dram"] == pytest.approx(2 * default["energy_pj"]["dram"], rel=1e-12)
    for c in ("mac", "rf", "sram"):  # nothing else moves
        assert doubled["energy_pj"][c] == pytest.approx(default["energy_pj"][c], rel=1e-12)
    assert doubled["total_cycles"] == default["total_cycles"]


def test_bad_tech_file_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="--tech: cannot read"):
        layer(gemm=(8, 8, 8), tech=tmp_path / "none.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[mac_pj]\nvalue = 1.0\n")
    with pytest.raises(UsageError, match="--tech: "):
        layer(gemm=(8, 8, 8), tech=bad)


def test_topology_costs_every_layer_with_a_total(tmp_path):
    """A SCALE-Sim topology of ResNet-18: one row per forward GEMM (as accel.gemm costs it alone), the total
    row their sum; a doubled DRAM energy doubles its DRAM energy."""
    import numpy as np

    from accel import Hardware, gemm_cost
    from models import zoo
    from models.importers import load_topology, to_scalesim

    topo = tmp_path / "r18.csv"
    topo.write_text(to_scalesim(zoo.build("resnet18", dataset="cifar10"), layout="conv"))
    res = runner.invoke(app, ["layer", "--topology", str(topo), "--rows", "16", "--cols", "16", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    *layers, total = rows
    assert total["layer"] == "total" and len(layers) == 21  # 20 convolutions and the classifier
    ops = load_topology(topo).training_ops(1, word_bytes=2)
    f = np.flatnonzero(ops.phase == "fwd")
    c = gemm_cost(ops.M[f], ops.K[f], ops.N[f], ops.repeat[f], hw=Hardware(rows=16, cols=16, dataflow="os"),
                  include_leakage=False)
    assert [r["cycles"] for r in layers] == [int(x) for x in c.total_cycles]
    for k in ("macs", "cycles", "dram_bytes", "energy_j_dram", "energy_j_total"):
        assert total[k] == pytest.approx(sum(r[k] for r in layers), rel=1e-12)
    res = runner.invoke(app, ["layer", "--topology", str(topo), "--rows", "16", "--cols", "16", "--json",
                              "--tech", str(_tech_file(tmp_path))])
    assert json.loads(res.output)[-1]["energy_j_dram"] == pytest.approx(2 * total["energy_j_dram"], rel=1e-12)
    table = runner.invoke(app, ["layer", "--topology", str(topo)], env={"COLUMNS": "120"})
    assert table.exit_code == 0 and table.output.splitlines()[-1].startswith("total")
    assert all(len(ln) <= 120 for ln in table.output.splitlines()[1:])


def test_topology_guards(tmp_path):
    with pytest.raises(UsageError, match="--topology: .*no such"):
        layer(topology=tmp_path / "none.csv")
    with pytest.raises(UsageError, match="not both"):
        layer(topology=tmp_path / "none.csv", gemm=(1, 2, 3))
    with pytest.raises(UsageError, match="--topology: .*SCALE-Sim"):
        layer(topology=tmp_path / "net.txt")
