"""``oracle`` (diagnostic, ``train_run`` only): GP steps apply the true gradient of an independent random
batch at the current weights -- a perfect predictor of the expected gradient, with minibatch noise. Not a
configuration value, so no accelerator cost."""

from __future__ import annotations

import numpy as np

from models.schemes.base import GradientScheme
from models.surrogate.layers import softmax_cross_entropy
from models.surrogate.nets import kept_statistics
from models.surrogate.predictors import grad_matrix

__all__ = ["Oracle"]


class Oracle(GradientScheme):
    """Diagnostic: GP steps apply the true gradient of an independent random batch at the current weights
    (a perfect predictor of the expected gradient, with minibatch noise). Use ``adaptive=False``."""

    name = "oracle"
    predicts = False

    def __init__(self, cfg, net, n_classes, seed, task=None):
        super().__init__(cfg, net, n_classes, seed, task)
        self.rng = np.random.default_rng([seed, 3])
        self.g: list = []

    def begin_gp(self, step):
        n = len(self.task.x)
        idx = self.rng.choice(n, min(self.cfg.batch_size, n), replace=False)
        with kept_statistics(self.net):  # another batch's forward must not move batch-norm statistics
            _, d = softmax_cross_entropy(self.net.forward(self.task.x[idx]), self.task.y[idx])
        self.net.backward(d)
        self.g = [grad_matrix(l.dW, l.db) for l in step.layers]

    def gp_step(self, step):
        return self.g
