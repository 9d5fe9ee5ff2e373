"""Load a repository script (bench/, tools/, test data generators) as a module, by its path."""

import importlib.util
from pathlib import Path


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
