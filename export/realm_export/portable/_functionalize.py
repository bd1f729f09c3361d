"""In-place ops of a traced graph as their functional forms, which the translator can write."""

from __future__ import annotations

from typing import Any

import torch


def functionalize_in_place(gm: torch.fx.GraphModule) -> bool:
    """Write each in-place op of ``gm`` (``relu_``, ``add_``, …) as its functional form.

    ``torch.export`` keeps a traced graph's in-place ops, which the translator cannot write;
    the exporter's decomposition pass removes them by tracing the whole graph again. Where
    the mutated tensor is an intermediate with no view of it (the in-place activations and
    residual additions of most models), the functional op with later readers reading its
    result is the same computation, for the cost of a walk over the graph.

    Returns:
        True where every mutation was rewritten; False (``gm`` half rewritten: discard it)
        where one writes into a graph input, a view, or a tensor a view was taken of.
    """
    if not functionalize(gm.graph):
        return False
    gm.recompile()
    return True


def functionalize(graph: torch.fx.Graph) -> bool:
    """:func:`functionalize_in_place` on a graph, not compiled (its caller compiles or exports)."""
    order = {node: k for k, node in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        if not target._schema.is_mutable:
            continue
        name = target.overloadpacket.__name__
        functional = getattr(getattr(torch.ops.aten, name[:-1], None), target._overloadname, None)
        mutated = node.args[0] if node.args else None
        if (
            not name.endswith("_")
            or functional is None
            or not isinstance(mutated, torch.fx.Node)
            or mutated.op != "call_function"
            or _is_view(mutated)
            or any(_is_view(user) for user in mutated.users)
            or any(_mutates(arg) for arg in target._schema.arguments[1:])
        ):
            return False
        with graph.inserting_after(node):
            pure = graph.call_function(functional, node.args, node.kwargs)
        pure.meta = dict(node.meta)
        order[pure] = order[node]
        node.replace_all_uses_with(pure)
        for user in list(mutated.users):
            if user is not pure and order.get(user, -1) > order[node]:
                user.replace_input_with(mutated, pure)
        graph.erase_node(node)
    return True


def _is_view(node: torch.fx.Node) -> bool:
    """``node``'s op returns a view of an input (an alias it does not write through)."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    return any(
        r.alias_info is not None and not r.alias_info.is_write for r in target._schema.returns
    )


def _mutates(argument: Any) -> bool:
    return argument.alias_info is not None and argument.alias_info.is_write
