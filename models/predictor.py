"""ADA-GP's gradient predictor as a workload: its shape, parameters, and the ops it adds to a training step.

The predictor (ADA-GP, arXiv 2305.13236) is one small network shared by all layers with weights. For a layer with
``C_out`` output channels and output activation ``(C_out, P, Q)`` per sample:

* **tensor reorganization** averages the activation over the batch and pools each channel's ``P x Q`` map
  down to ``inputs`` values: each output channel becomes one predictor sample of ``inputs`` values (plus a
  one-hot layer index when ``layer_code`` is set);
* the predictor maps each sample through its hidden layers to a **head** that predicts the channel's
  weight-gradient row (``fan_in = C_in/groups * R * S`` for a conv, ``in_features`` for a linear layer). The
  head is as wide as the model's largest fan-in, masked for smaller layers (``head=None``, the full head), or
  narrower and tiled: ``ceil(fan_in / head)`` passes of the head per sample (a tile index selects the tile);
* in a **BP phase** the predictor is trained against the true gradient: an MSE loss over the head's outputs,
  the backward GEMMs of every predictor layer, and an Adam update of its parameters;
* in a **GP phase** only reorganization and inference run, and the layer's weight update uses the prediction.

Predictor GEMMs follow the project's convention (``models.graph``): forward ``(samples, in, out)``, input
gradient ``(samples, out, in)`` (none for its first layer), weight gradient ``(in, samples, out)``. Compute on
a full head is charged in full (masking saves no cycles on a systolic array).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from models.graph import Net, TrainingOps

__all__ = ["PredictorShape", "predicted_layers", "predictor_ops", "predictor_params"]

#: the predictor is trained with Adam (a scale-robust optimizer): two state tensors per parameter
_PRED_UPDATE_ELEMS_PER_PARAM = 3 + 2 * 2


@dataclass(frozen=True)
class PredictorShape:
    """The predictor's shape knobs.

    ``inputs``: values per sample after pooling; ``hidden``: widths of the hidden layers (may be empty: a
    linear predictor); ``head``: output width, ``None`` for as wide as the model's largest fan-in (masked),
    or a narrower width that is tiled; ``layer_code``: a one-hot layer index is appended to the input;
    ``factored``: the head predicts one number per channel, which scales the layer's batch-mean input patch
    (``dW = x^T delta``) into the row -- a head of width 1 plus an outer-product vector op; ``train_steps``:
    optimizer steps of the predictor per BP batch (its training work is repeated).
    """

    inputs: int = 8
    hidden: tuple[int, ...] = (64,)
    head: int | None = None
    layer_code: bool = False
    factored: bool = False
    train_steps: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))
        if not isinstance(self.inputs, int) or self.inputs < 1:
            raise ValueError(f"predictor.inputs: a positive integer (pooled values per channel), got {self.inputs!r}")
        if any(h < 1 for h in self.hidden):
            raise ValueError(f"predictor.hidden: positive layer widths, got {list(self.hidden)}")
        if self.head is not None and (not isinstance(self.head, int) or self.head < 1):
            raise ValueError(f"predictor.head: a positive integer or omitted (full head), got {self.head!r}")
        if not isinstance(self.train_steps, int) or self.train_steps < 1:
            raise ValueError(f"predictor.train_steps: a positive integer, got {self.train_steps!r}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        if d["head"] is None:
            del d["head"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PredictorShape":
        allowed = {"inputs", "hidden", "head", "layer_code", "factored", "train_steps"}
        unknown = set(d) - allowed
        if unknown:
            raise ValueError(f"predictor: unknown key {sorted(unknown)[0]!r}; allowed: {', '.join(sorted(allowed))}")
        return cls(**d)

    def head_width(self, net: Net) -> int:
        if self.factored:
            return 1
        return self.head if self.head is not None else net.max_fan_in

    def widths(self, net: Net) -> list[int]:
        """Layer widths from input to head."""
        code = len(predicted_layers(net)) if self.layer_code else 0
        return [self.inputs + code, *self.hidden, self.head_width(net)]


def predictor_params(shape: PredictorShape, net: Net) -> int:
    """Weights and biases of the predictor sized for ``net``."""
    w = shape.widths(net)
    return sum(a * b + b for a, b in zip(w[:-1], w[1:]))


def predicted_layers(net: Net) -> list[int]:
    """Indices of the layers whose weight gradients the predictor predicts: conv and linear layers with
    weights of their own (a tied projection updates with the embedding it shares, in BP steps)."""
    return [i for i, l in enumerate(net.layers) if l.kind in ("conv", "linear") and l.fan_in > 0 and l.params > 0]


def predictor_ops(shape: PredictorShape, net: Net, batch: int, *, train: bool, word_bytes: int = 2
                  ) -> TrainingOps:
    """The predictor's ops for one training step of ``net`` at ``batch`` (``train``: a BP-phase step)."""
    widths = shape.widths(net)
    head = widths[-1]
    rows: list[tuple] = []
    for i in predicted_layers(net):
        l = net.layers[i]
        c, p, q = l.out
        samples = l.out_channels
        tiles = 1 if shape.factored else math.ceil(l.fan_in / head)
        # batch mean (read the batch's activations, write one map) then pooling (read it, write pool x pool)
        rows.append((i, "reorg", 0, 0, 0, 0, batch * c * p * q + 2 * c * p * q + c * shape.inputs, 0))
        if shape.factored:
            # the batch-mean input patch (read the layer's input, write fan_in values), then one row per
            # channel: its predicted scale times the patch (read patch and scale, write the row)
            rows.append((i, "reorg", 0, 0, 0, 0, batch * math.prod(l.inp) + l.fan_in
                         + samples * (2 * l.fan_in + 1), 0))
        for j, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            rep = tiles if j == len(widths) - 2 else 1
            rows.append((i, "pred_fwd", samples, a, b, rep, 0, 0))
        if not train:
            continue
        for step in range(shape.train_steps):
            if step:  # a further optimizer step re-runs the forward at the updated weights
                for j, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
                    rep = tiles if j == len(widths) - 2 else 1
                    rows.append((i, "pred_refwd", samples, a, b, rep, 0, 0))
            # MSE against the true gradient row: read prediction and target, write the loss gradient
            rows.append((i, "pred_loss", 0, 0, 0, 0, 3 * samples * l.fan_in, 0))
            for j, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
                rep = tiles if j == len(widths) - 2 else 1
                if j > 0:
                    rows.append((i, "pred_igrad", samples, b, a, rep, 0, 0))
                rows.append((i, "pred_wgrad", a, samples, b, rep, 0, 0))
    if train and rows:
        # Adam updates of the predictor per step (its gradients accumulate over the layers)
        for _ in range(shape.train_steps):
            rows.append((-1, "pred_update", 0, 0, 0, 0,
                         predictor_params(shape, net) * _PRED_UPDATE_ELEMS_PER_PARAM, 0))
    return TrainingOps.from_rows(net, batch, "adam", word_bytes, rows)
