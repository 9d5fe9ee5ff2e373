"""The `dse layer` command function, registered on a throw-away typer app."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from dse.cli_layer import layer
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
    (["--gemm", "0", "2", "3"], "--gemm"),
])
def test_bad_input_raises_usage_error(args, pattern):
    res = runner.invoke(app, ["layer", *args])
    assert isinstance(res.exception, UsageError), res.output
    assert pattern in str(res.exception)
    assert "\n" not in str(res.exception)
