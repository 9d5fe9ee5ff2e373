"""The front as a researcher first sees it: a table that fits the terminal and shows what varies, the noise of
the accuracy figures (``<metric>_se``, ``seeds``) wherever the front is shown, DataFrames with NaN.

The seeded trials are crafted here (a copy of the small study's trials whose metrics carry standard errors and
seed counts), so these tests do not depend on how a study comes to train several seeds."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest


def _seeds(number: int) -> int:
    return 1 if number % 3 == 0 else 3  # the trials whose accuracy_drop is not raised below: on the front


@pytest.fixture(scope="module")
def noisy(ran_study, tmp_path_factory) -> Path:
    """The small study's complete trials copied into a study 'noisy' whose accuracy figures carry a standard
    error (absent on one-seed trials, as the contract says) and a seed count, and whose accuracy_drop varies."""
    import optuna

    from dse.search.study import open_study
    from dse.search.studyfile import load_study

    src_spec = load_study(ran_study)
    src = open_study(src_spec, create=False)
    p = tmp_path_factory.mktemp("noisy") / "noisy.toml"
    p.write_text(ran_study.read_text().replace('name = "tiny"', 'name = "noisy"'))
    spec = load_study(p)
    dst = open_study(spec, create=True)
    for t in src.get_trials(deepcopy=True, states=(optuna.trial.TrialState.COMPLETE,)):
        attrs = dict(t.user_attrs)
        m = dict(attrs["metrics"])
        m["accuracy_drop"] = m["accuracy_drop"] + 0.25 * (t.number % 3)
        m["accuracy"] = m["accuracy"] - 0.25 * (t.number % 3)
        n = _seeds(t.number)
        m["seeds"] = n
        if n > 1:
            m["accuracy_se"] = m["accuracy_drop_se"] = 0.05 + 0.01 * t.number
        attrs["metrics"] = m
        dst.add_trial(optuna.trial.create_trial(
            params=t.params, distributions=t.distributions, values=[m[k] for k in spec.metrics],
            user_attrs=attrs, system_attrs=t.system_attrs))
    return p


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_machine_formats_carry_the_standard_error_and_the_seeds(cli, noisy):
    rows = json.loads(cli("pareto", noisy, "--format", "json").stdout)
    keys = list(rows[0])
    for m in ("accuracy_drop", "accuracy"):
        assert keys[keys.index(m) + 1] == f"{m}_se"
    assert "seeds" in keys
    for r in rows:
        assert r["seeds"] == _seeds(r["trial"])
        want = None if r["seeds"] == 1 else pytest.approx(0.05 + 0.01 * r["trial"])
        assert r["accuracy_drop_se"] == want
    got = list(csv.DictReader(io.StringIO(cli("pareto", noisy, "--format", "csv").stdout)))
    assert {"accuracy_drop_se", "seeds"} <= set(got[0]) and len(got) == len(rows)


def test_table_puts_the_standard_error_right_after_each_accuracy_objective(cli, noisy, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one header line
    r = cli("pareto", noisy, "--all")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    head = _cells(lines[0])
    i = head.index("accuracy_drop [points]")
    assert head[i + 1] == "±"
    rows = json.loads(cli("pareto", noisy, "--format", "json").stdout)
    body = [_cells(ln) for ln in lines[2:]]
    assert [int(b[0]) for b in body] == [x["trial"] for x in rows]
    for b, x in zip(body, rows):  # the one-seed trials have no error: '-'
        assert b[i + 1] == ("-" if x["seeds"] == 1 else f"{x['accuracy_drop_se']:.4g}")
    assert "standard error" in r.stderr


@pytest.mark.parametrize("width", [120, 80])
def test_default_table_fits_the_terminal_and_shows_only_what_varies(cli, noisy, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    r = cli("pareto", noisy, "--all")
    assert r.returncode == 0, r.stderr
    assert all(len(ln) <= width for ln in (r.stdout + r.stderr).splitlines())
    lines = r.stdout.splitlines()
    rule = next(k for k, ln in enumerate(lines) if set(ln.replace(" ", "")) == {"-"})
    body = [ln.split() for ln in lines[rule + 1:]]
    assert len({len(b) for b in body}) == 1
    for j in range(1, len(body[0])):  # every shown column (trial aside) varies on the front
        assert len({b[j] for b in body}) > 1, j
    rows = json.loads(cli("pareto", noisy, "--format", "json").stdout)
    assert len(body) == len(rows)
    note = " ".join(r.stderr.split())
    for c in rows[0]:
        vals = {json.dumps(x[c]) for x in rows}
        if c.startswith(("hardware.", "training.")) and len(vals) == 1:
            assert f"{c}=" in note  # a constant knob is named under the table


def test_rows_beyond_the_limit_are_counted(cli, noisy, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    n = len(json.loads(cli("pareto", noisy, "--format", "json").stdout))
    assert n > 2
    r = cli("pareto", noisy, "--limit", "2")
    assert f"{n - 2} of {n} rows not shown" in " ".join(r.stderr.split()) and "--all" in r.stderr
    lines = r.stdout.splitlines()
    rule = next(k for k, ln in enumerate(lines) if set(ln.replace(" ", "")) == {"-"})
    assert len(lines) - rule - 1 == 2
    assert cli("pareto", noisy, "--all", "--limit", "2").returncode == 2


@pytest.mark.parametrize("extra", [["--where", "speedup>=1e9"], ["--where", "speedup>=1e9", "--noise-aware"]])
def test_a_front_with_no_row_left_prints_none(cli, noisy, extra):
    """No point passes the filter: the table says so and the command succeeds (the notes under it need the
    terminal's width, which only the branch with rows used to read)."""
    r = cli("pareto", noisy, *extra)
    assert r.returncode == 0, r.stderr
    n = len(json.loads(cli("pareto", noisy, "--format", "json").stdout))
    assert r.stdout.strip() == f"(none: none of the {n} front points passes --where speedup>=1e9)"
    assert "proxy task" in " ".join(r.stderr.split())


def test_an_empty_front_table_says_why():
    """`(none)` alone did not say whether nothing ran, every trial failed, none met the constraints."""
    from dse.cli.study import _why_none

    def status(complete=0, fail=0, feasible=0, front=0):
        return {"trials": {"complete": complete, "fail": fail}, "feasible": feasible, "front": front,
                "constraints": ["area_mm2 <= 4"]}

    assert _why_none(status(), []) == "no complete trial yet: run the study first"
    assert _why_none(status(fail=3), []) == "no complete trial yet; 3 failed, `dse status` says why"
    assert _why_none(status(complete=5), []) == ("none of the 5 complete trials meets the constraints "
                                                 "(area_mm2 <= 4): relax them or widen the space")
    assert _why_none(status(complete=5, feasible=2, front=2), ["speedup>9", "area_mm2<1"]) == \
        "none of the 2 front points passes --where speedup>9 and area_mm2<1"


def test_a_metric_the_study_never_recorded_is_named_not_sorted_last_or_filtered_to_nothing(cli, noisy):
    """predictor_gain needs the null control, which this study does not train: --sort listed the front in
    trial order as if sorted, --where printed an empty front, --best said to run more trials."""
    for args, option in ((["pareto", noisy, "--sort", "predictor_gain"], "--sort"),
                         (["pareto", noisy, "--where", "predictor_gain>-100"], "--where"),
                         (["export", noisy, "--best", "predictor_gain"], "--best"),
                         (["export", noisy, "--best", "speedup", "--where", "predictor_gain>0"], "--where")):
        r = cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert f"{option}: no trial" in r.stderr and "recorded predictor_gain" in r.stderr, r.stderr
        assert "null control" in r.stderr and "run more trials" not in r.stderr


def test_columns_all_is_the_full_table(cli, noisy, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    rows = json.loads(cli("pareto", noisy, "--format", "json").stdout)
    r = cli("pareto", noisy, "--columns", "all", "--limit", "1")
    lines = r.stdout.splitlines()
    rule = next(k for k, ln in enumerate(lines) if set(ln.replace(" ", "")) == {"-"})
    assert len(lines[rule].split()) == len(rows[0])  # every column, none left out for width


def test_table_columns_leave_out_constant_and_empty_columns():
    from types import SimpleNamespace

    from dse.results.views import left_out_note, table_columns

    spec = SimpleNamespace(metrics=["accuracy_drop", "energy_j"], constraints=[SimpleNamespace(metric="power_w")])
    rows = [{"trial": i, "accuracy_drop": 1.0 + i, "accuracy_drop_se": None, "energy_j": 5.0, "power_w": 2.0 * i,
             "bubble_rate": 0.0, "seeds": 3, "hardware.rows": 16 * (i + 1), "hardware.bandwidth_gbps": 51.2}
            for i in range(3)]
    shown, left = table_columns(spec, rows)
    assert shown == ["trial", "accuracy_drop", "power_w", "hardware.rows"]
    assert left["constant"] == {"energy_j": 5.0, "seeds": 3, "hardware.bandwidth_gbps": 51.2}
    assert left["empty"] == ["accuracy_drop_se"] and left["other"] == ["bubble_rate"]
    note = left_out_note(left, 5, 8)
    assert "hardware.bandwidth_gbps=51.2" in note and "seeds=3" in note and "accuracy_drop_se" in note
    assert "5 of 8 rows not shown" in note
    shown, _ = table_columns(spec, rows[:1])  # one row: nothing to compare, only empty columns go
    assert "energy_j" in shown and "accuracy_drop_se" not in shown
    # a metric constant on the front whose spread varies: its ± went too, else it read as the spread of the
    # column before it (predictor_gain's beside energy_j: "37.81 ± 0.56 kJ")
    spec = SimpleNamespace(metrics=["accuracy_drop", "energy_j", "predictor_gain"], constraints=[])
    rows = [{"trial": i, "accuracy_drop": 1.0 + i, "energy_j": 5.0 - i, "predictor_gain": -0.09,
             "predictor_gain_se": 0.4 + i} for i in range(3)]
    shown, left = table_columns(spec, rows)
    assert shown == ["trial", "accuracy_drop", "energy_j"] and left["constant"] == {"predictor_gain": -0.09}
    assert left["other"] == ["predictor_gain_se"]


def test_show_prints_the_standard_error_beside_the_value(cli, noisy):
    rows = json.loads(cli("pareto", noisy, "--format", "json").stdout)
    x = next(r for r in rows if r["seeds"] > 1)
    r = cli("show", noisy, str(x["trial"]))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    k = next(i for i, ln in enumerate(lines) if ln.startswith("metric "))
    head = _cells(lines[k])
    assert head[:3] == ["metric", "value", "±"]
    row = next(_cells(ln) for ln in lines[k:] if ln.startswith("accuracy_drop "))
    assert float(row[2]) == pytest.approx(x["accuracy_drop_se"], rel=1e-3)
    assert "mean of 3 surrogate seeds" in r.stdout
    assert not any(ln.startswith(("accuracy_drop_se", "seeds ")) for ln in lines[k:])


def test_api_frames_have_the_noise_columns_and_nan(noisy):
    import dse

    s = dse.open_study(noisy)
    f = s.front()
    assert {"accuracy_drop_se", "accuracy_se", "seeds"} <= set(f.columns)
    assert f["accuracy_drop_se"].dtype == float and f["predictor_gain"].dtype == float
    one = f[f["seeds"] == 1]
    assert len(one) and one["accuracy_drop_se"].isna().all()
    assert not any(v is None for v in f.to_numpy().ravel())
    t = s.trials()
    assert len(t) == len(s.optuna.get_trials()) and set(f["trial"]) == set(t.loc[t.on_front, "trial"])
    assert t["fail_reason"].isna().all() and (t["state"] == "complete").all()
    assert "hardware.pred_rows" in f.columns and "hardware.predictor_unit" not in f.columns
    assert math.isnan(f["predictor_gain"].iloc[0])


def test_objective_plots_draw_error_bars_on_the_accuracy_axis(noisy, ran_study):
    """Error bars on every panel with accuracy_drop as an axis, as long as the standard error of each front
    point (0 for one-seed points); none without standard errors (the small study as it ran)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dse.figures import charts
    from dse.results.views import label_of
    from dse.search.pareto import front
    from dse.search.study import load_points, open_study
    from dse.search.studyfile import load_study

    for path, want in ((noisy, True), (ran_study, False)):
        spec = load_study(path)
        pts = load_points(open_study(spec, create=False), spec)
        f = front(pts, spec.directions)
        fig = charts.objective_pairs(spec, pts, {p.number for p in f}, label_of)
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            bars = [c for c in ax.containers if isinstance(c, matplotlib.container.ErrorbarContainer)]
            on_acc = "accuracy_drop" in ax.get_xlabel() + ax.get_ylabel()
            assert bool(bars) == (want and on_acc), ax.get_xlabel()
            if bars:
                (bar,) = bars
                segs = bar.lines[2][0].get_segments()
                lengths = sorted(round(abs(np.diff(np.asarray(s), axis=0)).sum() / 2, 9) for s in segs)
                se = sorted(round(p.metrics.get("accuracy_drop_se", 0.0), 9) for p in f)
                assert lengths == pytest.approx(se)
        plt.close(fig)
