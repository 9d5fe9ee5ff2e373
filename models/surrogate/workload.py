"""The surrogate's own networks as accelerator workloads (``models.graph.Net``), so that a scheme's cost can
be stated on the very network whose accuracy the surrogate measures.

A 1-D signal of length L is a ``(channels, L, 1)`` tensor; ``Conv1d(k, stride, pad)`` is a ``k x 1``
convolution with bias, ReLU follows every hidden layer, ``cnn_pool``'s max-pool(2) is a ``2 x 1`` pool.
"""

from __future__ import annotations

from models.graph import Net, Tensor

__all__ = ["TASK_SHAPES", "surrogate_net"]

#: task -> (input length, classes), as ``models.surrogate.tasks`` loads them
TASK_SHAPES = {"mnist1d": (40, 10), "digits": (64, 10)}


def surrogate_net(network: str = "cnn", width: int = 25, task: str = "mnist1d") -> Net:
    """The surrogate's ``network`` of ``width`` channels on ``task`` (see ``models.surrogate.nets``)."""
    if task not in TASK_SHAPES:
        raise ValueError(f"task: one of {', '.join(TASK_SHAPES)} (got {task!r})")
    length, classes = TASK_SHAPES[task]
    net = Net(f"surrogate-{network}{width}-{task}", (1, length, 1), classes, input_desc=f"1x{length}")
    x = net.input()
    if network in ("cnn", "cnn_pool"):
        for i in range(3):
            if network == "cnn":
                x = net.relu(net.conv(x, width, (5, 1), stride=(2, 1), padding=(2, 0), bias=True,
                                      name=f"conv{i}"))
            else:
                x = net.relu(net.conv(x, width, (5, 1), stride=1, padding=(2, 0), bias=True, name=f"conv{i}"))
                x = net.pool(x, (2, 1), name=f"pool{i}")
        net.linear(Tensor(x.c * x.h * x.w, 1, 1, x.grad), classes, name="fc")  # flatten (a view), linear
    elif network == "mlp":
        x = net.relu(net.linear(Tensor(length, 1, 1, grad=False), width, name="fc0"))
        x = net.relu(net.linear(x, width, name="fc1"))
        net.linear(x, classes, name="fc2")
    else:
        raise ValueError(f"network: one of 'cnn', 'cnn_pool', 'mlp' (got {network!r})")
    return net
