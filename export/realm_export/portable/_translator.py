"""torch.onnx's translator, as the lean path calls it: its modules, registry and op signatures."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .._rewrites import max_pool_translation

PORTABLE_OPSET = 18  # the dynamo exporter's lowest well-supported opset; ORT 1.19.2 reads ≤ 21
# Ops written by this package's own translation, not torchlib's.
CUSTOM: dict[Callable[..., Any], Callable[..., Any]] = {
    torch.ops.aten.max_pool2d_with_indices.default: max_pool_translation
}


@functools.cache
def exporter_modules() -> tuple[Any, Any, Any] | None:
    """torch.onnx's private exporter modules the lean path calls; None where they differ."""
    try:
        from torch.onnx._internal.exporter import _core, _decomp, _fx_passes, _ir_passes
    except ImportError:
        return None
    needed = (
        (_core, "_exported_program_to_onnx_program"),
        (_decomp, "get_onnx_implemented_overloads"),
        (_fx_passes, "insert_type_promotion_nodes"),
        (_fx_passes, "remove_assertion_nodes"),
        (_ir_passes, "rename_inputs"),
        (_ir_passes, "rename_outputs"),
    )
    if not all(callable(getattr(module, name, None)) for module, name in needed):
        return None
    return _core, _fx_passes, _ir_passes


def untranslated(graph: torch.fx.Graph) -> list[str]:
    """The ops of ``graph`` torchlib has no function for.

    The exporter's own decomposition would split them; the lean path has none.
    """
    known = _translated()
    return sorted(
        {
            str(node.target)
            for node in graph.nodes
            if node.op == "call_function"
            and isinstance(node.target, torch._ops.OpOverload)
            and node.target not in known
        }
    )


@functools.cache
def _translated() -> frozenset[Any]:
    """The op overloads the registry translates."""
    from torch.onnx._internal.exporter import _decomp

    return frozenset(_decomp.get_onnx_implemented_overloads(registry()))


@functools.cache
def registry() -> Any:
    """Torchlib's translations at the portable opset, with this package's own: built once."""
    from torch.onnx._internal.exporter import _registration

    registry = _registration.ONNXRegistry.from_torchlib(opset_version=PORTABLE_OPSET)
    for op, function in CUSTOM.items():
        registry.register_op(op, function, is_complex=False)
    return registry


@contextlib.contextmanager
def signatures_cached() -> Iterator[None]:
    """Build each ONNX op's signature once while translating.

    The translator converts the op's schema into a new signature at every call (a few
    thousand per graph, and most of its time); a signature is a pure function of the
    schema's domain, name and version. Where onnx-ir differs, nothing changes.
    """
    import onnx_ir as ir

    signature = getattr(getattr(ir, "schemas", None), "OpSignature", None)
    build = getattr(getattr(signature, "from_op_schema", None), "__func__", None)
    if build is None:
        yield
        return
    built: dict[tuple[str, str, int], Any] = {}

    def cached(cls: type, schema: Any) -> Any:
        key = (schema.domain, schema.name, schema.since_version)
        if key not in built:
            built[key] = build(cls, schema)
        return built[key]

    signature.from_op_schema = classmethod(cached)
    try:
        yield
    finally:
        signature.from_op_schema = classmethod(build)
