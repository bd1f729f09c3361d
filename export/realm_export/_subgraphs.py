"""An ONNX graph with the graphs nested in its nodes (If branches, Loop and Scan bodies)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx

# Bytes per element of each ONNX tensor type (TensorProto's numbering); others count 4.
_ELEMENT_BYTES = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 16: 2}


def graphs_within(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph``, then every graph nested in its nodes' attributes, depth first."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from graphs_within(attribute.g)
            for sub in attribute.graphs:
                yield from graphs_within(sub)


def value_bytes(graph: onnx.GraphProto) -> dict[str, int]:
    """Bytes of each value whose shape ``graph`` states, in it and the graphs nested in it.

    Run ONNX shape inference first for the values between nodes; a symbolic dimension counts
    as 1 (batch 1), and a value whose shape is unknown is left out.
    """
    size: dict[str, int] = {}
    for g in graphs_within(graph):
        for info in (*g.value_info, *g.output, *g.input):
            t = info.type.tensor_type
            if not t.HasField("shape"):
                continue
            dims = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
            size[info.name] = int(np.prod(dims)) * _ELEMENT_BYTES.get(t.elem_type, 4)
    return size
