"""Network builders; importing this package registers every zoo model.

A network module registers its builders with :func:`models.nets.registry.register`; adding a model family
means adding its module here (one line below) and nothing else (``models.zoo`` reads the registry).
"""

from models.nets import (  # noqa: F401  (imported for their registrations, in the zoo's listing order)
    vgg,
    resnet,
    densenet,
    mobilenet,
    inception,
    yolo,
    transformer,
)
