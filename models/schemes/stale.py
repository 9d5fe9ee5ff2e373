"""``stale`` (diagnostic, ``train_run`` only): GP steps apply each predicted layer's last true gradient
(gradient reuse, no predictor). Not a configuration value, so no accelerator cost."""

from __future__ import annotations

from models.schemes.base import GradientScheme, predicted_layers

__all__ = ["Stale"]


class Stale(GradientScheme):
    """Diagnostic: GP steps apply each predicted layer's last true gradient (gradient reuse, no predictor).
    Use ``adaptive=False``."""

    name = "stale"
    predicts = False

    def __init__(self, cfg, net, n_classes, seed, task=None):
        super().__init__(cfg, net, n_classes, seed, task)
        self.g: list = [None] * len(predicted_layers(cfg, net))

    def bp_step(self, step):
        self.g = list(step.trues)
        return None

    def gp_step(self, step):
        return self.g
