"""Gradient predictors: ADA-GP's shared weight-gradient predictor and DNI's synthetic-gradient modules.

A layer's gradient is handled as one matrix ``G`` of shape ``(out_channels, fan_in + 1)``: row ``c`` is the
weight-gradient column of output channel ``c`` followed by its bias gradient (``G = [dW^T | db]``).

Both predictors learn on BP batches only, with Adam on an MSE loss against targets divided by a running RMS
of the layer's true gradient (so that layers and training stages of very different gradient scales weigh
alike; predictions are multiplied back by that scale). The scale normalization is our modelling choice.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Adam", "AdaGPPredictor", "DNIPredictor", "pool_matrix", "grad_matrix"]

_SCALE_DECAY = 0.9
_FEAT_DECAY = 0.95  # running mean of a layer's pooled map, for the deviation input (ours)


def grad_matrix(dW: np.ndarray, db: np.ndarray) -> np.ndarray:
    """``[dW^T | db]``: one row per output channel."""
    return np.concatenate([dW.T, db[:, None]], axis=1)


class Adam:
    def __init__(self, params, lr, b1=0.9, b2=0.999, eps=1e-8):
        self.params, self.lr, self.b1, self.b2, self.eps = params, lr, b1, b2, eps
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, grads):
        self.t += 1
        c1 = 1.0 - self.b1**self.t
        c2 = 1.0 - self.b2**self.t
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m *= self.b1
            m += (1.0 - self.b1) * g
            v *= self.b2
            v += (1.0 - self.b2) * (g * g)
            p -= (self.lr / c1) * m / (np.sqrt(v / c2) + self.eps)


def pool_matrix(length: int, size: int) -> np.ndarray:
    """``(length, size)`` adaptive average pooling: column j averages bins [floor(jL/P), ceil((j+1)L/P)).
    When ``length < size`` the bins repeat samples (nearest-neighbour upsampling)."""
    m = np.zeros((length, size), dtype=np.float32)
    for j in range(size):
        lo = (j * length) // size
        hi = max(lo + 1, -(-((j + 1) * length) // size))
        m[lo:hi, j] = 1.0 / (hi - lo)
    return m


class _Scales:
    """Running RMS of each layer's true gradient (or of its dL/dh for DNI)."""

    def __init__(self, n):
        self.s = [0.0] * n

    def update(self, i, target):
        rms = float(np.sqrt(np.mean(np.square(target, dtype=np.float64)))) + 1e-12
        self.s[i] = rms if self.s[i] == 0.0 else _SCALE_DECAY * self.s[i] + (1 - _SCALE_DECAY) * rms


class AdaGPPredictor:
    """One MLP shared by all predicted layers (ADA-GP).

    Input sample: one output channel of a layer after tensor reorganization (batch mean of the layer's
    output activations, adaptively average-pooled to ``pred_input`` values, divided by the RMS of the
    layer's whole pooled map), optionally followed by a one-hot layer code. Output: that channel's
    gradient row, from a head of width ``pred_head`` (0: the largest ``fan_in + 1``; masked for smaller
    layers; tiled when narrower than a layer's row). The head starts at zero (first predictions are zero).
    """

    def __init__(self, rows: list[int], cfg, rng, pooling=None):
        self.rows = list(rows)  # fan_in + 1 per predicted layer
        # the network's pooling rule: spatial shape, size -> (positions, size) matrix
        self.pooling = pooling if pooling is not None else (lambda shape, size: pool_matrix(int(np.prod(shape)), size))
        self.n_layers = len(rows)
        self.P = cfg.pred_input
        self.code = cfg.pred_layer_code
        self.feat = cfg.pred_features
        self.factored = cfg.pred_output == "factored"
        if self.factored:
            self.H = 1
        else:
            self.H = cfg.pred_head if cfg.pred_head > 0 else max(rows)
        n_in = self.P * (2 if self.feat == "both" else 1) + (self.n_layers if self.code else 0)
        dims = [n_in] + [cfg.pred_width] * cfg.pred_hidden_layers + [self.H]
        self.Ws, self.bs = [], []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            last = i == len(dims) - 2
            w = np.zeros((a, b)) if last else rng.standard_normal((a, b)) * np.sqrt(2.0 / a)
            self.Ws.append(w.astype(np.float32))
            self.bs.append(np.zeros(b, dtype=np.float32))
        self.opt = Adam(self.Ws + self.bs, cfg.pred_lr)
        self.scales = _Scales(self.n_layers)
        self._pool: dict[int, np.ndarray] = {}
        self.idx = [np.arange(f) % self.H for f in self.rows]
        self.steps = cfg.pred_steps
        self._mean: list = [None] * self.n_layers  # running mean of each layer's pooled map (deviation input)
        self._dev_rms = [0.0] * self.n_layers

    def n_params(self) -> int:
        return int(sum(w.size for w in self.Ws) + sum(b.size for b in self.bs))

    # -- tensor reorganization -------------------------------------------------------------------------
    def features(self, li: int, act: np.ndarray) -> np.ndarray:
        """The predictor's input for each output channel of layer ``li`` (one row per channel). It updates
        the layer's running statistics, so call it once per step and layer."""
        a = act.mean(axis=0)  # (*spatial, C) for a feature map, (C,) for a vector
        spatial = a.shape[:-1] if a.ndim > 1 else (1,)
        a = a.reshape(-1, a.shape[-1])  # (positions, C)
        pm = self._pool.get(spatial)
        if pm is None:
            pm = self._pool[spatial] = self.pooling(spatial, self.P)
        raw = (pm.T @ a).T  # (C, P)
        parts = []
        if self.feat in ("level", "both"):
            parts.append(raw / (np.sqrt(np.mean(raw * raw)) + 1e-8))
        if self.feat in ("deviation", "both"):
            m = self._mean[li]
            dev = np.zeros_like(raw) if m is None else raw - m
            self._mean[li] = raw.copy() if m is None else _FEAT_DECAY * m + (1 - _FEAT_DECAY) * raw
            rms = float(np.sqrt(np.mean(dev * dev)))
            if rms > 0:
                r = self._dev_rms[li]
                self._dev_rms[li] = rms if r == 0.0 else _SCALE_DECAY * r + (1 - _SCALE_DECAY) * rms
            parts.append(dev / (self._dev_rms[li] + 1e-8) if self._dev_rms[li] > 0 else dev)
        x = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        if self.code:
            code = np.zeros((x.shape[0], self.n_layers), dtype=np.float32)
            code[:, li] = 1.0
            x = np.concatenate([x, code], axis=1)
        return x.astype(np.float32, copy=False)

    def _forward(self, x):
        hs = [x]
        h = x
        for i, (w, b) in enumerate(zip(self.Ws, self.bs)):
            h = h @ w + b
            if i < len(self.Ws) - 1:
                h = np.maximum(h, 0)
            hs.append(h)
        return hs

    def _rows(self, li, out):
        return out[:, self.idx[li]]

    # -- use -------------------------------------------------------------------------------------------
    @staticmethod
    def _basis(xin: np.ndarray) -> np.ndarray:
        """The factored output's row direction: the layer's batch-mean input patch, then 1 (the bias)."""
        return np.concatenate([xin.astype(np.float32, copy=False), np.ones(1, np.float32)])

    def _expand(self, li, out, xin):
        if self.factored:
            return out[:, :1] * self._basis(xin)[None, :]
        return self._rows(li, out)

    def predict(self, li: int, act: np.ndarray, xin: np.ndarray | None = None) -> np.ndarray:
        """Layer ``li``'s predicted gradient ``G`` from its output ``act`` (and, for the factored output,
        ``xin``: the batch mean of its input patches, length fan-in)."""
        out = self._forward(self.features(li, act))[-1]
        return self._expand(li, out, xin) * np.float32(self.scales.s[li])

    def bp_step(
        self, acts: list[np.ndarray], trues: list[np.ndarray], xins: list[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """Predict every layer's gradient (before learning from this batch), then take ``pred_steps`` Adam
        steps towards the true gradients. Returns the predictions in the true scale."""
        x = np.concatenate([self.features(i, a) for i, a in enumerate(acts)], axis=0)
        sizes = [g.shape[0] for g in trues]
        hs = self._forward(x)
        preds, start = [], 0
        for i, n in enumerate(sizes):  # in the scale known before this batch
            xin = None if xins is None else xins[i]
            preds.append(self._expand(i, hs[-1][start : start + n], xin) * np.float32(self.scales.s[i]))
            start += n
        targets = []
        for i, g in enumerate(trues):
            if self.factored:  # least-squares coefficient of each row along the basis
                u = self._basis(xins[i])
                t = (g @ u / np.float32(u @ u))[:, None]
            else:
                t = g
            self.scales.update(i, t)
            targets.append(t / np.float32(self.scales.s[i]))
        for k in range(self.steps):
            if k:
                hs = self._forward(x)
            out = hs[-1]
            dout = np.zeros_like(out)
            start = 0
            for i, (n, tgt) in enumerate(zip(sizes, targets)):
                o = out[start : start + n]
                rows = o[:, :1] if self.factored else self._rows(i, o)
                diff = rows - tgt
                d = (2.0 / (diff.size * self.n_layers)) * diff
                f = tgt.shape[1]
                if f <= self.H:
                    dout[start : start + n, :f] += d
                else:
                    m = -(-f // self.H)
                    pad = np.zeros((n, m * self.H), dtype=d.dtype)
                    pad[:, :f] = d
                    dout[start : start + n] += pad.reshape(n, m, self.H).sum(axis=1)
                start += n
            # backward through the MLP
            gW, gb = [None] * len(self.Ws), [None] * len(self.bs)
            d = dout.astype(np.float32, copy=False)
            for i in range(len(self.Ws) - 1, -1, -1):
                gW[i] = hs[i].T @ d
                gb[i] = d.sum(axis=0)
                if i > 0:
                    d = (d @ self.Ws[i].T) * (hs[i] > 0)
            self.opt.step(gW + gb)
        return preds


class DNIPredictor:
    """Conditional DNI: per predicted layer, a linear module (zero-initialized) maps the flattened output
    ``h`` and the one-hot label to a synthetic dL/dh; the layer's own local backward turns it into its
    weight gradient. Trained by L2 regression on the true dL/dh of BP batches (Adam, scale-normalized)."""

    def __init__(self, out_sizes: list[int], n_classes: int, cfg, rng):
        self.n_classes = n_classes
        self.Ms = [np.zeros((d + n_classes, d), dtype=np.float32) for d in out_sizes]
        self.cs = [np.zeros(d, dtype=np.float32) for d in out_sizes]
        self.opts = [Adam([m, c], cfg.pred_lr) for m, c in zip(self.Ms, self.cs)]
        self.scales = _Scales(len(out_sizes))

    def n_params(self) -> int:
        return int(sum(m.size + c.size for m, c in zip(self.Ms, self.cs)))

    def _input(self, h, y):
        onehot = np.zeros((h.shape[0], self.n_classes), dtype=np.float32)
        onehot[np.arange(h.shape[0]), y] = 1.0
        return np.concatenate([h.reshape(h.shape[0], -1), onehot], axis=1)

    def synth(self, li: int, h: np.ndarray, y: np.ndarray) -> np.ndarray:
        z = self._input(h, y)
        return ((z @ self.Ms[li] + self.cs[li]) * np.float32(self.scales.s[li])).reshape(h.shape)

    def learn(self, li: int, h: np.ndarray, y: np.ndarray, true_dh: np.ndarray) -> None:
        z = self._input(h, y)
        self.scales.update(li, true_dh)
        target = true_dh.reshape(h.shape[0], -1) / np.float32(self.scales.s[li])
        diff = z @ self.Ms[li] + self.cs[li] - target
        d = (2.0 / diff.size) * diff
        self.opts[li].step([z.T @ d, d.sum(axis=0)])
