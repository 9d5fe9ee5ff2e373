"""Comparing what a study was made from (``StudySpec.identity()``) with a study file as it is now."""

from __future__ import annotations

import json

__all__ = ["identity_change", "ABSENT"]


def identity_change(stored: dict, now: dict) -> str | None:
    """The first difference between two :meth:`StudySpec.identity` documents, as "what: old -> new"
    (None when they are equal)."""
    def show(v) -> str:
        return "(absent)" if v is ABSENT else json.dumps(v, default=str)

    def walk(a, b, path):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in list(a) + [k for k in b if k not in a]:
                d = walk(a.get(k, ABSENT), b.get(k, ABSENT), f"{path}.{k}" if path else str(k))
                if d:
                    return d
            return None
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and path != "space" \
                and not path.startswith("space."):
            for i, (x, y) in enumerate(zip(a, b)):
                d = walk(x, y, f"{path}.{i}")
                if d:
                    return d
            return None
        if a != b:
            return f"{path}: {show(a)} -> {show(b)}"
        return None

    stored = json.loads(json.dumps(stored, default=str))  # both sides as JSON sees them
    now = json.loads(json.dumps(now, default=str))
    return walk(stored, now, "")


#: a value missing on one side
ABSENT = object()
