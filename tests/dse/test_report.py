"""`dse report`: one self-contained HTML file, opened in a real headless Chromium (Debian's chromium and
chromium-driver, which .ci/run installs)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest


def _browser_paths() -> tuple[str, str] | None:
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chrome, driver) if chrome and driver else None


@pytest.fixture(scope="module")
def report(ran_study, tmp_path_factory) -> Path:
    """The report, written once by `dse report --out` (its one-line output is the file's path)."""
    from dse.cli import main

    out = tmp_path_factory.mktemp("report") / "tiny.html"
    with pytest.raises(SystemExit) as e:
        main(["report", str(ran_study), "--out", str(out)])
    assert e.value.code == 0
    return out


def test_report_is_self_contained_with_the_study_file_versions_and_reference(report, ran_study):
    text = report.read_text()
    # nothing is fetched: every src is a data URI, no external link or script
    srcs = re.findall(r'src="([^"]*)"', text)
    assert len(srcs) >= 3 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "<script src" not in text and "http://" not in text.split("<pre>")[0]
    assert text.count("<h2>") == len(set(re.findall(r"<h2>[^<]*</h2>", text)))
    assert text.count("<td class=\"t\">strategy</td>") == 1  # once, in the status
    assert "git commit" in text and "optuna" in text
    assert "<h2>Objectives and hypervolume reference point</h2>" in text and "Hypervolume of the feasible front" in text
    assert "[[objectives]]" in text  # the study file, verbatim (escaped)
    assert "twice the reference accelerator" in text  # area_mm2's reference comes from the reference design


def test_report_opens_in_headless_chromium(report, tmp_path):
    paths = _browser_paths()
    if paths is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Debian's chromium and chromium-driver (.ci/run installs them)")
        pytest.skip("chromium / chromedriver not installed (apt-get install chromium chromium-driver)")
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager look for a browser online
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chrome, driver_path = paths
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000"):
        opts.add_argument(flag)
    drv = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    try:
        drv.set_page_load_timeout(60)
        drv.get(report.resolve().as_uri())
        assert "dse study report" in drv.title
        images = drv.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]);")
        assert len(images) >= 3
        assert all(done and w > 100 and h > 100 for done, w, h in images), images
        rows = drv.execute_script(
            "return Array.from(document.querySelectorAll('table')).map(t => t.tBodies[0].rows.length);")
        assert len(rows) >= 5 and all(n > 0 for n in rows), rows
        front_rows = drv.execute_script(
            "const h = Array.from(document.querySelectorAll('h2')).find(e => e.textContent.startsWith('The front'));"
            "return h.nextElementSibling.querySelector('tbody').rows.length;")
        assert front_rows >= 1
        # the front sorts by a clicked header: speedup descending after two clicks
        col = drv.execute_script(
            "const t = document.querySelector('table.sortable');"
            "return Array.from(t.tHead.rows[0].cells).findIndex(c => c.title === 'speedup');")
        assert col > 0
        for clicks, want in ((1, sorted), (2, lambda v: sorted(v, reverse=True))):
            drv.execute_script(f"document.querySelector('table.sortable').tHead.rows[0].cells[{col}].click();")
            got = drv.execute_script(
                f"return Array.from(document.querySelector('table.sortable').tBodies[0].rows)"
                f".map(r => parseFloat(r.cells[{col}].getAttribute('data-v')));")
            assert got == want(got), (clicks, got)
        shot = tmp_path / "report.png"
        drv.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        drv.quit()


def test_report_refuses_an_output_that_is_not_html(cli, ran_study, tmp_path):
    r = cli("report", ran_study, "--out", tmp_path / "r.txt")
    assert r.returncode == 2 and "--out" in r.stderr and not (tmp_path / "r.txt").exists()


def test_the_commit_named_is_dse_checkouts_not_a_repository_it_is_installed_in(tmp_path):
    """An installed dse lives in site-packages; in a virtual environment inside the user's own repository the
    report named that repository's commit as dse's (found by probing the wheel)."""
    import subprocess

    from dse.figures.report import checkout_commit

    repo = tmp_path / "project"
    site = repo / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.txt").write_text("x")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert checkout_commit(repo) == head  # the top of a checkout: its commit
    assert checkout_commit(site).startswith("unknown")  # inside one: not dse's
    assert checkout_commit(tmp_path).startswith("unknown")  # in none
