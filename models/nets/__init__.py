"""Network builders; importing this package registers every zoo model.

A network module registers its builders with :func:`models.nets.registry.register`; adding a model family
means adding its module here (one line below) and nothing else (``models.zoo`` reads the registry).
"""

# The import order is the zoo's listing order (models.zoo.names() is registration order): not sorted.
# isort: off
from models.nets import (  # noqa: F401 - imported for their registrations
    vgg,
    resnet,
    densenet,
    mobilenet,
    inception,
    yolo,
    transformer,
)
# isort: on
