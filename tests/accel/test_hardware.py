"""Hardware validation, round-tripping, HardwareArray construction, predictor unit, technology tables."""

from __future__ import annotations

import json
import re
import tomllib

import numpy as np
import pandas as pd
import pytest

import accel
from accel import DATAFLOW_NAMES, Hardware, HardwareArray, area_breakdown, load_tech, peak_power_w


@pytest.mark.parametrize("field,value,pattern", [
    ("rows", 0, r"^rows: .*>= 1.*impossible hardware"),
    ("cols", -3, r"^cols: "),
    ("dataflow", "rs", "^dataflow: must be one of " + re.escape(", ".join(DATAFLOW_NAMES)) + "; got 'rs'"),
    ("word_bytes", 0, r"^word_bytes: "),
    ("acc_bytes", 1, r"^acc_bytes: must be an integer >= word_bytes"),
    ("bandwidth_gbps", 0.0, r"^bandwidth_gbps: .*impossible hardware: zero bandwidth"),
    ("clock_ghz", -1.0, r"^clock_ghz: "),
    ("ifmap_kb", 0.0, r"^ifmap_kb: "),
    ("vector_width", 0, r"^vector_width: "),
    ("pred_rows", 8, r"^pred_cols: must be 0 exactly when pred_rows is 0"),
    ("pred_kb", -1.0, r"^pred_kb: "),
    ("rows", 2.5, r"^rows: must be an integer"),
])
def test_invalid_hardware_names_the_field(field, value, pattern):
    with pytest.raises(ValueError, match=pattern):
        Hardware(**{field: value})
    with pytest.raises(ValueError, match=pattern):
        HardwareArray.from_dict({field: [Hardware().to_dict()[field], value]})


def test_buffer_that_cannot_hold_one_tile_edge_is_impossible():
    # 256 columns of fp32 partial sums = 1 KiB per half -> the ofmap needs 2 KiB
    with pytest.raises(ValueError, match=r"^ofmap_kb: impossible hardware: .*need ofmap_kb >= 2"):
        Hardware(rows=8, cols=256, ofmap_kb=1.5)
    Hardware(rows=8, cols=256, ofmap_kb=2.0)
    with pytest.raises(ValueError, match=r"^ifmap_kb: impossible hardware"):
        Hardware(rows=256, cols=8, ifmap_kb=0.5)
    with pytest.raises(ValueError, match=r"^pred_kb: impossible hardware"):
        Hardware(pred_rows=64, pred_cols=64, pred_kb=1.0)
    with pytest.raises(ValueError, match=r"configuration 2"):
        HardwareArray.from_dict(dict(rows=[8, 8, 256], ifmap_kb=[64, 64, 0.5]))


def test_round_trips_through_json_and_toml():
    hw = Hardware(rows=48, cols=24, dataflow="is", ifmap_kb=96.5, pred_rows=8, pred_cols=4, pred_kb=12)
    assert Hardware.from_dict(json.loads(json.dumps(hw.to_dict()))) == hw
    toml_text = "\n".join(f"{k} = {json.dumps(v)}" for k, v in hw.to_dict().items())
    assert Hardware.from_dict(tomllib.loads(toml_text)) == hw
    with pytest.raises(ValueError, match="^colz: unknown hardware field"):
        Hardware.from_dict({"colz": 3})
    arr = HardwareArray.from_list([hw, Hardware()])
    again = HardwareArray.from_dict(json.loads(json.dumps(arr.to_dict())))
    assert again == arr
    assert again[0] == hw and again[1] == Hardware()
    assert list(arr.dataflow_names) == ["is", "os"]


def test_pickles_for_worker_processes():
    import pickle

    from accel import gemm_cost
    hw = Hardware(rows=16, cols=8, dataflow="ws")
    gemm_cost([4], [4], [4], hw=hw)  # caches the one-configuration array on the instance
    assert pickle.loads(pickle.dumps(hw)) == hw
    arr = HardwareArray.from_list([hw, Hardware()])
    assert pickle.loads(pickle.dumps(arr)) == arr


def test_hardware_array_from_dataframe_and_codes():
    df = pd.DataFrame(dict(rows=[8, 16, 32], cols=[8, 16, 32], dataflow=["ws", "is", "os"]))
    arr = HardwareArray.from_dict(df)
    assert len(arr) == 3 and arr.dataflow.tolist() == [1, 2, 0]
    assert arr[1] == Hardware(rows=16, cols=16, dataflow="is")
    codes = HardwareArray.from_dict(dict(rows=np.array([8, 16, 32]), dataflow=np.array([1, 2, 0])))
    assert np.array_equal(codes.dataflow, arr.dataflow)
    assert len(arr.take(arr.rows > 8)) == 2
    with pytest.raises(AttributeError):
        arr.rows = np.array([1, 2, 3])
    with pytest.raises(ValueError, match="equal lengths"):
        HardwareArray.from_dict(dict(rows=[8, 16], cols=[8]))


def test_predictor_unit_view():
    shared = Hardware(rows=32, cols=32)
    assert shared.predictor_unit() is shared
    own = Hardware(rows=32, cols=32, pred_rows=8, pred_cols=16, pred_kb=24)
    p = own.predictor_unit()
    assert (p.rows, p.cols, p.ifmap_kb, p.filter_kb, p.ofmap_kb, p.pred_rows) == (8, 16, 8.0, 8.0, 8.0, 0)
    assert p.bandwidth_gbps == own.bandwidth_gbps and p.dataflow == own.dataflow
    arr = HardwareArray.from_list([shared, own]).predictor_unit()
    assert arr[0] == shared and arr[1] == p
    a = area_breakdown(own)
    assert a["predictor_pe"] == pytest.approx(8 * 16 * 5824e-6)
    assert a["predictor_sram"] == pytest.approx(24 * 0.00472)
    assert peak_power_w(own) > peak_power_w(shared)


def test_tech_table_every_constant_has_a_source_and_custom_tables_load(tmp_path):
    tech = load_tech()
    for key in accel.tech._CONSTANTS:
        assert tech.sources[key].strip(), key
    text = (tmp_path / "t.toml")
    base = accel.tech.resources.files("accel").joinpath("data/tech_default.toml").read_text()
    text.write_text(base.replace("value = 160.0", "value = 80.0"))
    custom = load_tech(text)
    assert custom.dram_pj_per_byte == 80.0 and tech.dram_pj_per_byte == 160.0
    from accel import gemm_cost
    hw = Hardware()
    e1 = gemm_cost([256], [256], [256], hw=hw, tech=tech).energy_pj["dram"]
    e2 = gemm_cost([256], [256], [256], hw=hw, tech=custom).energy_pj["dram"]
    np.testing.assert_allclose(e2, e1 / 2)
    text.write_text(base.replace('source = "Horowitz ISSCC 2014 (45 nm era DDR3', '# source = "x'))
    with pytest.raises(ValueError, match=r"\[dram_pj_per_byte\] needs a non-empty 'source'"):
        load_tech(text)
    text.write_text(base + '\n[bogus]\nvalue = 1\nsource = "x"\n')
    with pytest.raises(ValueError, match="unknown technology key 'bogus'"):
        load_tech(text)
    # a table of the earlier layout (per-word register costs, fixed accesses per MAC) says what replaced them
    text.write_text(base.replace("[rf_pj_per_byte]", "[rf_pj]"))
    with pytest.raises(ValueError, match="'rf_pj' was replaced: use rf_pj_per_byte"):
        load_tech(text)


@pytest.mark.parametrize("edit, message", [
    (("value = 160.0", "value = 1e308"), r"t.toml: dram_pj_per_byte: must be a number from 0 to 1e\+09, got 1e\+308"),
    (("value = 2.0", "value = " + "1" * 400), r"t.toml: \[mac_pj\] value must be a number from 0 to 1e\+09"),
    (("value = 5.0\n", "value = 1e-308\n"), r"t.toml: sram_large_pj: the two SRAM anchors give an energy exponent"),
    (("value = 160.0", "value = 160.0\nvalu = 3.0"),
     r"\[dram_pj_per_byte\] has 'valu': a misspelt 'value'\?"),
    (("[mac_pj]", "[mac_pj"), r"t.toml: not a valid TOML file"),
])
def test_a_table_whose_figures_would_overflow_is_refused_naming_the_key(tmp_path, edit, message):
    """Found by probing: a finite but huge constant (DRAM 1e308 pJ/B), or SRAM anchors whose power law is steep
    (a 1e-308 pJ anchor: exponent 147), printed energy `null` with exit 0 (a table view: an internal
    OverflowError); a 400-digit integer was an internal error; a misspelt entry key was ignored; the
    table's own checks did not name the file."""
    base = accel.tech.resources.files("accel").joinpath("data/tech_default.toml").read_text()
    assert base.count(edit[0]) >= 1
    text = tmp_path / "t.toml"
    text.write_text(base.replace(edit[0], edit[1], 1))
    with pytest.raises(ValueError, match=message) as e:
        load_tech(text)
    assert "\n" not in str(e.value)


def test_a_key_of_the_users_own_in_a_constants_table_is_theirs(tmp_path):
    """A note or a reference beside a constant's value is the user's (refusing any extra key would have
    locked out studies naming such a table); only a near-miss of value, unit or source is refused (above)."""
    base = accel.tech.resources.files("accel").joinpath("data/tech_default.toml").read_text()
    text = tmp_path / "t.toml"
    text.write_text(base.replace("value = 160.0", 'value = 160.0\nnote = "measured on our board"\nref = 3', 1))
    assert load_tech(text).dram_pj_per_byte == 160.0


def test_sram_energy_power_law_hits_both_anchors():
    tech = load_tech()
    assert tech.sram_pj_per_byte(8.0) * 4 == pytest.approx(5.0)
    assert tech.sram_pj_per_byte(1024.0) * 4 == pytest.approx(50.0)


def test_accel_does_not_import_optuna_or_models():
    import pathlib
    import re
    src = pathlib.Path(accel.__file__).parent
    for f in src.rglob("*.py"):
        text = f.read_text()
        assert not re.search(r"^\s*(import|from)\s+(optuna|models|dse)\b", text, re.M), f


def test_a_rate_too_small_for_finite_figures_is_refused():
    """Found by probing: bandwidth_gbps = 1e-300 (or a link of 1e-300 GB/s) was accepted and the job's time and
    energy overflowed to null, with exit 0."""
    from accel.hardware import MIN_RATE
    from accel.pipeline import Link

    for field in ("bandwidth_gbps", "clock_ghz"):
        with pytest.raises(ValueError, match=f"{field}: must be a finite .* >= 0.001"):
            Hardware(**{field: 1e-300})
        Hardware(**{field: MIN_RATE})
    with pytest.raises(ValueError, match="link_gbps: must be a bandwidth in GB/s >= 0.001"):
        Link(1e-300)
