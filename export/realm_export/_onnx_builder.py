"""A small ONNX graph builder: nodes named after their output, constants as initializers.

The loss graph (:func:`.legacy.append_loss`), the decision nodes
(:func:`.portable._decide.decision_model`) and the GEMM rewrite of the portable graphs
(:mod:`.portable._step`) write their nodes with it, so a node's name, its attributes and its
constants are spelled one way everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from numpy.typing import DTypeLike
from onnx import helper, numpy_helper


class GraphBuilder:
    """Collects nodes and initializers in the order they are written.

    Each :meth:`op` returns its output's name, so a computation reads as a sequence of
    named steps; the collected protos then go into a new graph (:meth:`make_graph`) or onto
    the end of an existing one (:meth:`append_to`).

    Attributes:
        nodes: the nodes written so far, in order.
        initializers: the initializers written so far, in order.
    """

    def __init__(self, const_prefix: str = "") -> None:
        """Start an empty builder.

        Args:
            const_prefix: prepended to the names given to :meth:`const` (e.g.
                ``"realm.const."``), which keeps added constants apart from the names of
                the graph they join.
        """
        self.const_prefix = const_prefix
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def op(
        self,
        kind: str,
        inputs: Sequence[str],
        output: str,
        *,
        node_name: str | None = None,
        **attrs: object,
    ) -> str:
        """Write one single-output node of the default (ai.onnx) domain.

        Args:
            kind: the op type, e.g. ``"ReduceSum"``.
            inputs: the names of its inputs.
            output: the name of its output.
            node_name: the node's name; None names it after ``output``, ``""`` leaves it
                unnamed.
            **attrs: the node's attributes (``helper.make_node``'s keywords).

        Returns:
            ``output``, to feed the next node.
        """
        name = output if node_name is None else node_name
        self.nodes.append(helper.make_node(kind, list(inputs), [output], name=name, **attrs))
        return output

    def initializer(self, name: str, value: object, dtype: DTypeLike = np.float32) -> str:
        """Add an initializer under exactly ``name`` (e.g. a trainable scalar).

        Args:
            name: the initializer's name, without :attr:`const_prefix`.
            value: a number or (nested) list, converted with ``np.array(value, dtype)``.
            dtype: its element type.

        Returns:
            ``name``.
        """
        array = np.array(value, dtype=dtype)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def const(self, name: str, value: object, dtype: DTypeLike = np.float32) -> str:
        """Add a constant initializer named ``const_prefix + name``.

        Args:
            name: the constant's name after the prefix.
            value: a number or (nested) list, converted with ``np.array(value, dtype)``.
            dtype: its element type.

        Returns:
            The initializer's full name.
        """
        return self.initializer(self.const_prefix + name, value, dtype)

    def constant(
        self,
        output: str,
        value: object,
        dtype: DTypeLike = np.int64,
        *,
        node_name: str | None = None,
        tensor_name: str | None = None,
    ) -> str:
        """Write a ``Constant`` node (a value inside the node list, not an initializer).

        Args:
            output: the name of its output.
            value: a number or (nested) list, converted with ``np.array(value, dtype)``.
            dtype: its element type.
            node_name: as in :meth:`op`.
            tensor_name: the name of the tensor held in the ``value`` attribute; None
                leaves it unnamed.

        Returns:
            ``output``.
        """
        tensor = numpy_helper.from_array(np.array(value, dtype=dtype), tensor_name)
        return self.op("Constant", [], output, node_name=node_name, value=tensor)

    def make_graph(
        self,
        name: str,
        inputs: Sequence[onnx.ValueInfoProto],
        outputs: Sequence[onnx.ValueInfoProto],
    ) -> onnx.GraphProto:
        """A new graph of the collected nodes and initializers.

        Args:
            name: the graph's name.
            inputs: its inputs.
            outputs: its outputs.

        Returns:
            The graph.
        """
        return helper.make_graph(self.nodes, name, list(inputs), list(outputs), self.initializers)

    def append_to(self, graph: onnx.GraphProto) -> None:
        """Append the collected initializers, then nodes, to those of ``graph``.

        Args:
            graph: the graph to extend in place (its inputs and outputs are left alone).
        """
        graph.initializer.extend(self.initializers)
        graph.node.extend(self.nodes)
