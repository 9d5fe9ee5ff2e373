"""Network builders; importing this package registers every zoo model."""

from models.nets import (  # noqa: F401  (imported for their registrations)
    vgg,
    resnet,
    densenet,
    mobilenet,
    inception,
    yolo,
    transformer,
)
