"""Timing helpers shared by the bench scripts (run as ``python bench/<script>.py``: this folder is on sys.path)."""

from __future__ import annotations

import statistics
import time


def best_of(fn, repeat=5):
    """(best, median) wall seconds of ``fn()`` over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


def best_cpu(fn, repeat=5):
    """(best wall seconds, best CPU seconds) over ``repeat`` runs."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)
