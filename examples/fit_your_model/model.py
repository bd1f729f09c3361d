"""A model of your own, as ``realm fit --model model.py:build`` takes it.

A small colour CNN with BatchNorm in its first blocks and GroupNorm in its last: the kind of
classifier an app trains itself, which no benchmark of the project ships or has tuned for.
"""

from __future__ import annotations

from torch import nn


def _block(cin: int, cout: int, norm: nn.Module) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), norm, nn.ReLU())


def build(num_classes: int = 10) -> nn.Module:
    """The untrained network: 3×32×32 colour images in, ``num_classes`` logits out."""
    return nn.Sequential(
        _block(3, 32, nn.BatchNorm2d(32)),
        nn.MaxPool2d(2),
        _block(32, 64, nn.BatchNorm2d(64)),
        nn.MaxPool2d(2),
        _block(64, 96, nn.GroupNorm(8, 96)),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(96, num_classes),
    )
