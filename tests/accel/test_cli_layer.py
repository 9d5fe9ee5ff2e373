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
