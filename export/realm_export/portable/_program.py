"""A traced graph as the ``ExportedProgram`` ``torch.export`` would capture, without capturing."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor

log = logging.getLogger(__name__)


def program_of(gm: torch.fx.GraphModule, graph: torch.fx.Graph) -> Any:
    """``graph`` (of ``gm``'s tensors) as the ``ExportedProgram`` ``torch.export`` would capture.

    The traced graph is already a flat, functional aten graph whose nodes carry their fake
    tensors; capturing it again only retraces it. Its constant tensors (the frozen weights)
    become lifted constants, its placeholders the user inputs. None where a node lacks the
    metadata the translator reads, or torch's program class refuses the result.
    """
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.export import graph_signature as sig
    from torch.export.exported_program import ExportedProgram, ModuleCallEntry

    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    fakes = [p.meta.get("val") for p in placeholders]
    if not fakes or not all(isinstance(v, FakeTensor) for v in fakes):
        return None
    mode = fakes[0].fake_mode
    if not _fill_values(graph, mode):
        return None
    constants: dict[str, Tensor] = {}
    specs: list[Any] = []
    lifted: dict[str, torch.fx.Node] = {}  # one input per tensor, however many nodes read it
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        target = str(node.target)
        value = getattr(gm, target, None)
        if not isinstance(value, Tensor):
            return None
        if target not in lifted:
            with graph.inserting_before(placeholders[0]):
                lifted[target] = graph.placeholder(f"c_{node.name}")
            name = lifted[target].name
            lifted[target].meta["val"] = mode.from_tensor(value, static_shapes=True)
            constants[name] = value
            specs.append(
                sig.InputSpec(sig.InputKind.CONSTANT_TENSOR, sig.TensorArgument(name), name)
            )
        node.replace_all_uses_with(lifted[target])
        graph.erase_node(node)
    specs += [
        sig.InputSpec(sig.InputKind.USER_INPUT, sig.TensorArgument(p.name), None)
        for p in placeholders
    ]
    (out,) = [n for n in graph.nodes if n.op == "output"]
    results = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    if not all(isinstance(r, torch.fx.Node) for r in results):
        return None
    out.args = (tuple(results),)
    outputs = [
        sig.OutputSpec(sig.OutputKind.USER_OUTPUT, sig.TensorArgument(r.name), None)
        for r in results
    ]
    try:  # the program compiles a module of its own from the graph
        return ExportedProgram(
            root=gm,
            graph=graph,
            graph_signature=sig.ExportGraphSignature(specs, outputs),
            state_dict={},
            range_constraints={},
            module_call_graph=[ModuleCallEntry("")],
            constants=constants,
        )
    except Exception as exc:
        log.debug("the traced graph is no ExportedProgram as it stands: %s", exc)
        return None


def _fill_values(graph: torch.fx.Graph, mode: Any) -> bool:
    """Give each node the rewrites added after the trace its fake value; False where one fails."""
    from torch._subclasses.fake_tensor import FakeTensor

    for node in graph.nodes:
        if node.op != "call_function" or isinstance(node.meta.get("val"), FakeTensor):
            continue
        try:
            with mode:
                args, kwargs = torch.fx.node.map_arg(
                    (node.args, node.kwargs), lambda n: n.meta["val"]
                )
                node.meta["val"] = node.target(*args, **kwargs)
        except Exception as exc:
            log.debug("no fake value for %s: %s", node.name, exc)
            return False
    return True
