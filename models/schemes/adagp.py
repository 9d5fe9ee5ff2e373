"""``adagp``: ADA-GP's shared predictor (the default scheme).

Training: one shared predictor turns each predicted layer's reorganized output into its weight-gradient rows
(:class:`models.surrogate.predictors.AdaGPPredictor`) and learns by MSE on the true gradients of BP steps.

Cost: reorganization and inference after every predicted layer (``models.predictor``); GP steps update the
predicted layers, no backward, no stash. Size knobs: the predictor's (``pred_*``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from models.graph import Net
from models.predictor import PredictorShape, predicted_layers as weighted_layers, predictor_ops, predictor_params
from models.schemes.base import GradientScheme, predicted_layers
from models.schemes.plan import SchemePlan
from models.surrogate.predictors import AdaGPPredictor

__all__ = ["AdaGP", "adagp_shape", "adagp_plan"]


class AdaGP(GradientScheme):
    """ADA-GP: one shared predictor turns each layer's reorganized output into its weight-gradient rows
    (:class:`models.surrogate.predictors.AdaGPPredictor`); learns by MSE on the true gradients."""

    name = "adagp"
    size_knobs = ("pred_input", "pred_hidden_layers", "pred_width", "pred_head", "pred_layer_code")

    def __init__(self, cfg, net, n_classes, seed, task=None):
        super().__init__(cfg, net, n_classes, seed, task)
        layers = predicted_layers(cfg, net)
        self.p = AdaGPPredictor([l.fan_in + 1 for l in layers], cfg, np.random.default_rng([seed, 2]),
                                pooling=net.pooling)
        self.factored = cfg.pred_output == "factored"

    def state(self):
        return {f"W{i}": w for i, w in enumerate(self.p.Ws)} | {f"b{i}": b for i, b in enumerate(self.p.bs)}

    def n_params(self):
        return self.p.n_params()

    def _xins(self, layers):
        return [l.mean_input() for l in layers] if self.factored else None

    def bp_step(self, step):
        return self.p.bp_step([l.out for l in step.layers], step.trues, self._xins(step.layers))

    def gp_step(self, step):
        return [self.p.predict(i, l.out, l.mean_input() if self.factored else None)
                for i, l in enumerate(step.layers)]


def adagp_shape(cfg: Any) -> PredictorShape:
    """ADA-GP's predictor shape from the training knobs (the same knobs size the surrogate's predictor)."""
    features = 2 if cfg.pred_features == "both" else 1  # level and deviation maps side by side
    return PredictorShape(inputs=cfg.pred_input * features, hidden=(cfg.pred_width,) * cfg.pred_hidden_layers,
                          head=cfg.pred_head or None, layer_code=cfg.pred_layer_code,
                          factored=cfg.pred_output == "factored", train_steps=cfg.pred_steps)


def adagp_plan(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    """ADA-GP's cost: the predictor's ops on BP steps (it trains) and GP steps (it predicts)."""
    shape = adagp_shape(cfg)
    return SchemePlan("adagp", predictor_ops(shape, net, batch, train=True, word_bytes=word_bytes),
                      predictor_ops(shape, net, batch, train=False, word_bytes=word_bytes),
                      gp_update=tuple(weighted_layers(net)), overlap="per_layer",
                      params=predictor_params(shape, net))
