"""Reading TOML files into validated plain data, with one-line errors that name the field.

Every table of a study or configuration file is read through :func:`take`, which rejects unknown keys and
wrong types with a :class:`~dse.errors.UsageError` naming the dotted field and what is allowed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from dse.config.values import check_document, check_number
from dse.errors import UsageError

__all__ = ["load_toml", "file_path", "read_limited", "take", "check_keys", "TYPE_NAMES"]

TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
              list: "a list", dict: "a table"}


def file_path(path) -> Path:
    """``path`` (a string or path-like) as a :class:`Path`; anything else refused in one line."""
    import os

    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"path: a file path (a string or pathlib.Path), got {path!r}")
    return Path(path)


#: the most bytes a study or configuration file may hold (they hold a few KiB; a device such as /dev/zero
#: would be read for ever)
MAX_FILE_BYTES = 16 << 20


def read_limited(p: Path, kind: str) -> bytes:
    """The bytes of ``p`` (a file, a pipe or a device), without a byte-order mark; more than
    :data:`MAX_FILE_BYTES` refused in one line naming the path. OSError propagates."""
    with open(p, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise UsageError(f"{p}: more than {MAX_FILE_BYTES >> 20} MiB; expected a {kind} file of a few KiB")
    return data.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark is allowed


def load_toml(path: str | Path) -> dict:
    p = file_path(path)
    if p.is_dir():
        raise UsageError(f"{p}: is a folder; expected a TOML file")
    if not p.exists():
        raise UsageError(f"{p}: no such file")
    try:  # a pipe or a device (bash's <(...), /dev/stdin) is read like a file
        text = read_limited(p, "TOML").decode("utf-8")
        doc = tomllib.loads(text)
    except OSError as e:
        raise UsageError(f"{p}: cannot be read ({e.strerror or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{p}: not valid TOML: {e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{p}: not a UTF-8 text file (expected TOML)") from None
    check_document(doc)  # every number finite and in range, named by its dotted field
    return doc


def check_keys(table: dict, allowed: set[str] | dict, where: str) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise UsageError(f"{where}.{unknown[0]}: unknown key; allowed keys: {', '.join(sorted(allowed))}")


def _type_ok(value: Any, typ: type | tuple) -> bool:
    types = typ if isinstance(typ, tuple) else (typ,)
    if isinstance(value, bool) and bool not in types:
        return False
    if float in types and isinstance(value, int) and not isinstance(value, bool):
        return True
    return isinstance(value, types)


def take(table: dict, key: str, typ: type | tuple, where: str, *, default: Any = ..., choices=None,
         low: float | None = None, high: float | None = None) -> Any:
    """``table[key]`` checked for type, choices and bounds; ``default`` when absent (required if omitted)."""
    if key not in table:
        if default is ...:
            raise UsageError(f"{where}.{key}: required")
        return default
    v = table[key]
    if not _type_ok(v, typ):
        types = typ if isinstance(typ, tuple) else (typ,)
        want = " or ".join(TYPE_NAMES.get(t, t.__name__) for t in types)
        raise UsageError(f"{where}.{key}: expected {want}, got {v!r}")
    check_number(v, f"{where}.{key}")
    if choices is not None and v not in choices:
        raise UsageError(f"{where}.{key}: {v!r} is not allowed; choose one of {', '.join(map(str, choices))}")
    if low is not None and v < low:
        raise UsageError(f"{where}.{key}: must be >= {low}, got {v!r}")
    if high is not None and v > high:
        raise UsageError(f"{where}.{key}: must be <= {high}, got {v!r}")
    if float in (typ if isinstance(typ, tuple) else (typ,)) and isinstance(v, int):
        v = float(v)
    return v
