"""Rebuild ``models/surrogate/data/fashion-mnist-14.npz`` bit-identically from Debian's Fashion-MNIST files.

    apt-get install dataset-fashion-mnist      # MIT (Expat) licence, Zalando SE 2017
    python tools/build_fashion_subset.py [--src /usr/share/datasets/fashion-mnist] [--out PATH] [--check]

The subset: 1,000 images per class from the official training set (10,000) and 200 per class from the
official test set (2,000), chosen by a fixed permutation of each class's indices (``default_rng(20170825)``,
the date of the Fashion-MNIST paper), kept in their original order; each 28x28 image is downsampled to
14x14 by 2x2 averaging with integer rounding ((sum + 2) // 4), stored as uint8. The archive is written with
fixed zip timestamps, so the same inputs give the same bytes (``--check`` compares with the committed file's
SHA-256). Loaded at run time by ``models.surrogate.tasks`` with no download.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import sys
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SRC = Path("/usr/share/datasets/fashion-mnist")
DEFAULT_OUT = ROOT / "models" / "surrogate" / "data" / "fashion-mnist-14.npz"
N_TRAIN_PER_CLASS = 1000
N_TEST_PER_CLASS = 200
SEED = 20170825


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip-compressed, big-endian header) as a uint8 array."""
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    magic = int.from_bytes(data[:4], "big")
    if magic >> 8 != 0x08:  # 0x08: unsigned byte
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic:#x})")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def balanced(labels: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of ``per_class`` examples of each class, drawn by a fixed permutation."""
    picks = []
    for c in range(10):
        idx = np.flatnonzero(labels == c)
        picks.append(np.sort(idx[rng.permutation(len(idx))[:per_class]]))
    return np.sort(np.concatenate(picks))


def downsample(images: np.ndarray) -> np.ndarray:
    """(n, 28, 28) uint8 -> (n, 14, 14) uint8, 2x2 mean rounded half up."""
    s = images.astype(np.uint16).reshape(len(images), 14, 2, 14, 2).sum(axis=(2, 4))
    return ((s + 2) // 4).astype(np.uint8)


def build(src: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    x = read_idx(src / "train-images-idx3-ubyte.gz")
    y = read_idx(src / "train-labels-idx1-ubyte.gz")
    xt = read_idx(src / "t10k-images-idx3-ubyte.gz")
    yt = read_idx(src / "t10k-labels-idx1-ubyte.gz")
    tr = balanced(y, N_TRAIN_PER_CLASS, rng)
    te = balanced(yt, N_TEST_PER_CLASS, rng)
    return {
        "x": downsample(x[tr]),
        "y": y[tr].astype(np.uint8),
        "x_test": downsample(xt[te]),
        "y_test": yt[te].astype(np.uint8),
        "source_index": tr.astype(np.int32),
        "source_index_test": te.astype(np.int32),
    }


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> bytes:
    """A deflate-compressed ``.npz`` with fixed entry timestamps (reproducible bytes); returns them."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name in sorted(arrays):
            npy = io.BytesIO()
            np.lib.format.write_array(npy, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, npy.getvalue(), compresslevel=9)
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC, help="directory of the four IDX .gz files")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="rebuild to a temporary file and compare with --out")
    args = ap.parse_args()
    missing = [n for n in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz") if not (args.src / n).exists()]
    if missing:
        print(f"--src: {args.src} lacks {', '.join(missing)} (apt-get install dataset-fashion-mnist)", file=sys.stderr)
        return 2
    arrays = build(args.src)
    if args.check:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            data = write_npz(Path(tmp) / "rebuilt.npz", arrays)
        old = args.out.read_bytes() if args.out.exists() else b""
        same = data == old
        print(f"rebuilt sha256 {hashlib.sha256(data).hexdigest()}; {args.out}: "
              f"{hashlib.sha256(old).hexdigest() if old else 'missing'}; {'identical' if same else 'DIFFERENT'}")
        return 0 if same else 1
    data = write_npz(args.out, arrays)
    print(f"wrote {args.out} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}); "
          f"train {arrays['x'].shape}, test {arrays['x_test'].shape}, "
          f"train per class {np.bincount(arrays['y']).tolist()}, "
          f"test per class {np.bincount(arrays['y_test']).tolist()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
