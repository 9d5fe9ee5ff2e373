"""The command line's frame: help, version, exit codes, the zoo listing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dse import __version__
from dse.cli import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dse.cli", *args], capture_output=True, text=True)


def test_version_and_help():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"dse {__version__}"
    r = run("--help")
    assert r.returncode == 0
    for word in ("models", "--debug", "--version", "Exit codes"):
        assert word in r.stdout


def test_models_json_has_the_documented_keys(capsys):
    with pytest.raises(SystemExit) as e:
        main(["models", "--json"])
    assert e.value.code == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"resnet50", "vgg16", "mobilenet_v2"} <= {r["name"] for r in rows}
    for r in rows:
        assert {"name", "input", "params", "macs", "layers"} <= set(r)
        assert r["params"] > 0 and r["macs"] > 0 and r["layers"] > 0


def test_models_ops_json(capsys):
    with pytest.raises(SystemExit) as e:
        main(["models", "resnet18", "--ops", "--batch", "4", "--json"])
    assert e.value.code == 0
    ops = json.loads(capsys.readouterr().out)
    fwd = [o for o in ops if o["phase"] == "fwd"]
    assert fwd[0]["M"] == 4 * 112 * 112 and fwd[0]["K"] == 3 * 7 * 7 and fwd[0]["N"] == 64


def test_unknown_model_is_a_one_line_usage_error():
    r = run("models", "resnet51")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "resnet50" in r.stderr
    r = run("--debug", "models", "resnet51")
    assert r.returncode == 2 and "Traceback" in r.stderr
    # where a user adds it, after the command (an error's hint says "rerun with --debug"): the same
    for args in (("models", "resnet51", "--debug"), ("--debug", "models", "resnet51", "--debug")):
        r = run(*args)
        assert r.returncode == 2 and "Traceback" in r.stderr and "No such option" not in r.stderr, args


def test_shell_completion_is_installed_and_completes_commands(tmp_path):
    """typer's completion: --show-completion prints the script for the shell, and the script's protocol
    completes a command name."""
    import os

    env = {**os.environ, "SHELL": "/bin/bash"}
    r = subprocess.run([sys.executable, "-m", "dse.cli", "--show-completion", "bash"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0 and "complete -o default -F _dse_completion dse" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-m", "dse.cli"], capture_output=True, text=True, timeout=60,
                       env={**env, "_DSE_COMPLETE": "complete_bash", "COMP_WORDS": "dse par", "COMP_CWORD": "1"})
    assert r.stdout.split() == ["pareto"], (r.stdout, r.stderr)
