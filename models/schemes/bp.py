"""``bp``: plain backpropagation, the reference every scheme is measured against.

Training: no GP step (no schedule). Cost: none of its own -- plain BP is the accelerator model's baseline
(``accel.schedule``), so it registers no lowering.
"""

from __future__ import annotations

from models.schemes.base import GradientScheme

__all__ = ["BP"]


class BP(GradientScheme):
    """Plain backprop (the reference): no GP step."""

    name = "bp"
    uses_schedule = False
    predicts = False
