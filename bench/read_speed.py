"""Reading a large study: Optuna's trial listing against dse's, and the read commands end to end.

    python bench/read_speed.py [--trials 10000] [--storage sqlite|postgresql://...]

Runs the quick start's study (hybrid, one worker) to 200 trials -- real trials, every attribute a dse trial
stores --, then copies them into the same study up to ``--trials`` (Optuna's ``add_trials``). Then, each in
a fresh process (the first read of a study is the one every read command pays; Optuna caches finished
trials within a process):

- the listing of every trial with Optuna's ``RDBStorage`` and with dse's ``FastRDBStorage``
  (``dse/search/rdb.py``), and whether the two give the same trials;
- ``dse status`` and ``dse pareto --format csv`` (wall time, the commands as a user runs them).

Prints the figures, the listing's ratio and the load average (a wall time on a loaded machine is an upper
bound). The surrogate cache is the environment's (``DSE_CACHE_DIR``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LISTING = """
import hashlib, sys, time, optuna
from optuna.storages import RDBStorage
from dse.search.rdb import FastRDBStorage
optuna.logging.set_verbosity(optuna.logging.WARNING)
url, name, which = sys.argv[1:4]
st = (RDBStorage if which == "optuna" else FastRDBStorage)(url)
sid = st.get_study_id_from_name(name)
t0, c0 = time.perf_counter(), time.process_time()
trials = st._get_trials(sid, None, set(), -1)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
fields = [(t.number, t.state, t.values, t.params, t.datetime_start, sorted(t.user_attrs.items()),
           sorted(t.system_attrs.items())) for t in trials]
print(wall, cpu, len(trials), hashlib.sha256(repr(fields).encode()).hexdigest())
"""


def _listing(url: str, name: str, which: str) -> tuple[float, float, int, str]:
    out = subprocess.run([sys.executable, "-c", LISTING, url, name, which], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2]), out[3]


def _command(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dse.cli", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--storage", default="sqlite",
                    help="sqlite (a file in a temporary folder; default) or a PostgreSQL URL")
    a = ap.parse_args()
    import optuna

    import dse
    from dse.search.study import close_study, open_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "read.toml"
        name = f"read_{os.getpid()}"
        f.write_text((root / "studies" / "quickstart.toml").read_text()
                     .replace('name = "quickstart"', f'name = "{name}"'))
        url = f"sqlite:///{tmp}/read.db" if a.storage == "sqlite" else a.storage
        spec = dse.load_study(f)
        t0 = time.perf_counter()
        dse.run(spec, storage=url, trials=200, workers=1)
        study = open_study(spec, url, create=False)
        real = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        copies = []
        while len(real) + len(copies) < a.trials:
            t = real[len(copies) % len(real)]
            copies.append(optuna.trial.create_trial(
                values=t.values, params=t.params, distributions=t.distributions, user_attrs=t.user_attrs,
                system_attrs=t.system_attrs, state=t.state))
        study.add_trials(copies)
        n = len(study.get_trials(deepcopy=False))
        close_study(study)
        print(f"study of {n} trials ({len(real)} real, the rest copies) made in {time.perf_counter() - t0:.0f} s; "
              f"storage {url.split('://')[0]}")
        ours, theirs = _listing(url, name, "dse"), _listing(url, name, "optuna")
        print(f"listing every trial, wall (cpu) s: Optuna {theirs[0]:.2f} ({theirs[1]:.2f}), "
              f"dse {ours[0]:.2f} ({ours[1]:.2f}): {theirs[0] / ours[0]:.1f}x faster; "
              f"same trials: {ours[2:] == theirs[2:]}")
        status = _command(["status", str(f), "--storage", url])
        pareto = _command(["pareto", str(f), "--storage", url, "--format", "csv"])
        print(f"dse status {status:.1f} s, dse pareto --format csv {pareto:.1f} s (wall, each a fresh process)")
    print(f"load average {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
