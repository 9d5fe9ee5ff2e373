"""dse: design-space exploration of adaptive gradient prediction (ADA-GP) training on DNN accelerators."""

from __future__ import annotations

__version__ = "0.1.0"

from dse.errors import UsageError

__all__ = ["__version__", "UsageError"]
