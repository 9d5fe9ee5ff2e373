"""One BLAS thread while the model runs.

The model's reductions over ops (``sum_over``, per-layer sums in the schedule) are small matrix products.
Multi-threaded OpenBLAS gains nothing on them and, when other processes load the cores, its threads wait
for each other: a 486 x 61 by 61 x 30 product took 16 ms with two threads on the 2-core machine under
load, against 0.36 ms with one. The costing entry points run under :func:`one_blas_thread` (as the
surrogate's training does).
"""

from __future__ import annotations

import functools
import threading

_state = threading.local()
_controller = None


def one_blas_thread(fn):
    """Decorator: run ``fn`` with BLAS limited to one thread (nested calls enter the limit once)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if getattr(_state, "inside", False):
            return fn(*args, **kwargs)
        global _controller
        if _controller is None:
            from threadpoolctl import ThreadpoolController
            _controller = ThreadpoolController()
        _state.inside = True
        try:
            with _controller.limit(limits=1, user_api="blas"):
                return fn(*args, **kwargs)
        finally:
            _state.inside = False

    return wrapper
