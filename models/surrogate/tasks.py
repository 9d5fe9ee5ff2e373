"""Offline tasks: MNIST-1D (generated with ``mnist1d``'s ``make_dataset``, never its download path) and
scikit-learn's bundled digits, each built once and cached as ``.npz`` under the cache directory; and
``fashion``, a fixed class-balanced 14x14 subset of Fashion-MNIST shipped in the package
(``models/surrogate/data/fashion-mnist-14.npz``, MIT licence, rebuilt by ``tools/build_fashion_subset.py``)."""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["Task", "load_task", "cache_dir", "CacheError", "data_path", "TASK_NAMES"]

_MEMO: dict[str, "Task"] = {}


def cache_dir() -> Path:
    """``$DSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/dse``, else ``~/.cache/dse``."""
    env = os.environ.get("DSE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "dse"


class CacheError(RuntimeError):
    """The cache directory cannot be used (a file in its place, no permission, a full disk); the message names
    the path and what to do."""


def cache_error(path: Path, e: OSError) -> CacheError:
    """The cache's error for ``e`` while writing ``path``: it names the path at fault (a file where a folder
    should be, or the other way round: remove it) and the cache folder."""
    why = e.strerror or type(e).__name__
    # the path at fault: a rename's destination (its source is the temporary file), else the one named
    at = Path(getattr(e, "filename2", None) or getattr(e, "filename", None) or path)
    fix = "remove it, or set DSE_CACHE_DIR to another folder" if isinstance(
        e, (FileExistsError, NotADirectoryError, IsADirectoryError)) else "set DSE_CACHE_DIR to a writable folder"
    return CacheError(f"surrogate cache {cache_dir()}: {at} cannot be written ({why}); {fix}")


@dataclass(frozen=True)
class Task:
    """A classification task as float32 channels-last inputs, ``(n, length, 1)`` for a 1-D task and
    ``(n, height, width, 1)`` for an image task, and int64 labels."""

    name: str
    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int = 10

    @property
    def length(self) -> int:
        return self.x.shape[1]

    @property
    def shape(self) -> tuple[int, ...]:
        """One input's shape without the channel axis: ``(length,)`` or ``(height, width)``."""
        return tuple(self.x.shape[1:-1])

    @property
    def ndim(self) -> int:
        """1 for a 1-D task, 2 for an image task."""
        return self.x.ndim - 2


def _make_mnist1d() -> dict[str, np.ndarray]:
    from mnist1d.data import get_dataset_args, make_dataset

    state = np.random.get_state()  # make_dataset seeds numpy's global generator: leave it as it was
    try:
        data = make_dataset(get_dataset_args())  # defaults: 4000 train / 1000 test, length 40, seed 42
    finally:
        np.random.set_state(state)
    return {"x": data["x"], "y": data["y"], "x_test": data["x_test"], "y_test": data["y_test"]}


def _make_digits() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = d.data / 16.0
    x = (x - x.mean()) / x.std()
    perm = np.random.default_rng(0).permutation(len(x))  # fixed split, independent of training seeds
    x, y = x[perm], d.target[perm]
    n_test = 360
    return {"x": x[n_test:], "y": y[n_test:], "x_test": x[:n_test], "y_test": y[:n_test]}


_MAKERS = {"mnist1d": ("mnist1d-v1", _make_mnist1d), "digits": ("digits-v1", _make_digits)}

#: Shipped image tasks: name -> file in ``models/surrogate/data``.
PACKAGED = {"fashion": "fashion-mnist-14.npz"}
TASK_NAMES = tuple(_MAKERS) + tuple(PACKAGED)


def data_path(name: str) -> Path:
    """The shipped archive of an image task."""
    return Path(__file__).resolve().parent / "data" / PACKAGED[name]


def _load_packaged(name: str) -> "Task":
    """A shipped image task: uint8 pixels scaled to [0, 1], then standardized by the training set's mean and
    standard deviation (one scalar each); shape ``(n, H, W, 1)``."""
    path = data_path(name)
    try:
        with np.load(path) as f:
            arrays = {k: f[k] for k in ("x", "y", "x_test", "y_test")}
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"task {name!r}: its data file {path} is missing or damaged ({exc}); reinstall the "
                         f"package or rebuild it with tools/build_fashion_subset.py") from None
    x = arrays["x"].astype(np.float64) / 255.0
    mean, std = float(x.mean()), float(x.std())
    def norm(a):
        return ((a.astype(np.float64) / 255.0 - mean) / std).astype(np.float32)[..., None]
    return Task(name=name, x=norm(arrays["x"]), y=arrays["y"].astype(np.int64), x_test=norm(arrays["x_test"]),
                y_test=arrays["y_test"].astype(np.int64))


def _digest(arrays: dict) -> str:
    """A checksum of a generated task's arrays (shapes, types and values), stored with them in the cache: a
    file damaged or edited since is generated again, not read (shuffled labels gave a wrong accuracy)."""
    h = hashlib.sha256()
    for k in ("x", "y", "x_test", "y_test"):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"{k}{a.shape}{a.dtype.str}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def load_task(name: str) -> Task:
    """The task's arrays: a shipped image task read from the package, the others generated on first use and
    cached in ``cache_dir()/data``."""
    if name in PACKAGED:
        key = f"packaged:{name}"
        if key not in _MEMO:
            _MEMO[key] = _load_packaged(name)
        return _MEMO[key]
    if name not in _MAKERS:
        raise ValueError(f"task: one of {', '.join(repr(k) for k in TASK_NAMES)} (got {name!r})")
    fname, make = _MAKERS[name]
    path = cache_dir() / "data" / f"{fname}.npz"
    key = str(path)
    if key in _MEMO:
        return _MEMO[key]
    arrays = None
    if path.exists():
        try:  # (the file opened here: numpy leaves its own open when the zip cannot be read)
            with path.open("rb") as fh, np.load(fh) as f:
                arrays = {k: f[k] for k in ("x", "y", "x_test", "y_test")}
                if str(f["digest"]) != _digest(arrays):  # (a file written before digests: rebuilt once)
                    arrays = None
        except Exception:  # any damage (a cut zip, a bad CRC, a missing array): generated again
            arrays = None
    if arrays is None:
        arrays = make()
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(tmp, **arrays, digest=np.array(_digest(arrays)))
            os.replace(tmp, path)
        except OSError as e:
            with contextlib.suppress(OSError):  # a full disk: the part written is not left behind
                tmp.unlink()
            raise cache_error(path, e) from e
    task = Task(
        name=name,
        x=np.asarray(arrays["x"], dtype=np.float32)[:, :, None],
        y=np.asarray(arrays["y"], dtype=np.int64),
        x_test=np.asarray(arrays["x_test"], dtype=np.float32)[:, :, None],
        y_test=np.asarray(arrays["y_test"], dtype=np.int64),
    )
    _MEMO[key] = task
    return task
