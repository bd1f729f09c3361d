"""The ONNX-node form of each method that needs one (``realm_runtime.methods``'s names).

A method's per-sample loss ``L(H)`` where it is more than the entropy itself, as nodes
appended to a graph that already computes ``H`` (the legacy training graph).
"""

from __future__ import annotations

from collections.abc import Callable

from realm_sdk import RealmConfig

from .._onnx_builder import GraphBuilder
from . import realm

# (builder, the name of H, the name of the constant 1.0, configuration) → the name of L(H)
OnnxLoss = Callable[[GraphBuilder, str, str, RealmConfig], str]

ONNX_LOSSES: dict[str, OnnxLoss] = {"realm": realm.per_sample_nodes}

__all__ = ["ONNX_LOSSES", "OnnxLoss"]
