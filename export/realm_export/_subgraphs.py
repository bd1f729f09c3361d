"""An ONNX graph with the graphs nested in its nodes (If branches, Loop and Scan bodies)."""

from __future__ import annotations

from collections.abc import Iterator

import onnx


def graphs_within(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph``, then every graph nested in its nodes' attributes, depth first."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from graphs_within(attribute.g)
            for sub in attribute.graphs:
                yield from graphs_within(sub)
