"""What the rewrites read off a traced node: the aten namespace and a node's shape."""

from __future__ import annotations

from typing import Any

import torch

from .._errors import UnsupportedModelError

aten = torch.ops.aten


def node_shape(node: Any) -> tuple[int, ...]:
    """The shape the trace recorded for ``node`` (its fake value, else its tensor meta).

    Raises:
        UnsupportedModelError: the trace recorded none.
    """
    val = node.meta.get("val")
    if val is None:
        meta = node.meta.get("tensor_meta")
        if meta is None:
            raise UnsupportedModelError(f"no shape recorded for {node.name}")
        return tuple(int(d) for d in meta.shape)
    return tuple(int(d) for d in val.shape)
