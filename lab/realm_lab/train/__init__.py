"""Training the source models the product ships (``realm-lab train``; docs/models.md)."""

from ._fashion import train_fashion_model

__all__ = ["train_fashion_model"]
