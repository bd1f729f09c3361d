"""A traced aten graph as ONNX: torch.onnx's translator, run once, with a lean optimiser.

``torch.onnx.export(gm, dynamo=True)`` on a graph :func:`.._trace.trace` made captures it
with ``torch.export`` (a full re-trace), decomposes it again with its own table (another, on
a graph the trace already decomposed into core aten ops), builds its op registry anew, and
runs onnxscript's optimiser with every default rewrite rule (each tried on every node,
where only a few ever match these graphs). The lean path captures nothing: the traced
graph, already flat, functional and carrying each node's fake tensor, is handed to the
translator as the program ``torch.export`` would have made of it. It keeps one registry per
process, builds each ONNX op's signature once, skips the second decomposition, and
optimises with the passes that change these graphs: constant folding, the rewrite rules
that fire on them, dead code and common subexpressions. It uses torch.onnx's private
exporter modules, so where they are missing or refuse a graph (an op only the exporter's
own decomposition could write), the public ``torch.onnx.export`` does the whole job, as
before.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import Tensor

from .._errors import UnsupportedModelError
from .._trace_rewrites import max_pool_translation

log = logging.getLogger(__name__)

PORTABLE_OPSET = 18  # the dynamo exporter's lowest well-supported opset; ORT 1.19.2 reads ≤ 21
MAX_IR_VERSION = 10  # ORT 1.19.2 refuses newer IR versions
# Ops written by this package's own translation, not torchlib's.
_CUSTOM: dict[Callable[..., Any], Callable[..., Any]] = {
    torch.ops.aten.max_pool2d_with_indices.default: max_pool_translation
}


def to_onnx(
    gm: torch.fx.GraphModule,
    args: Sequence[Tensor],
    input_names: Sequence[str],
    output_names: Sequence[str],
    *,
    lean: bool = True,
) -> onnx.ModelProto:
    """Export a traced aten graph as ONNX (opset 18), its inputs and outputs named.

    Args:
        gm: the traced graph (:func:`.._trace.trace`).
        args: example inputs of ``gm``.
        input_names: the graph inputs' names, in ``args``' order.
        output_names: the graph outputs' names.
        lean: the lean path where it works; False: the public ``torch.onnx.export`` only.

    Raises:
        UnsupportedModelError: the exporter failed, with its reason in one sentence.
    """
    inputs = tuple(a.detach() for a in args)
    proto = None
    try:
        with _quiet_exporter():
            if lean:
                proto = _lean_export(gm, inputs, input_names, output_names)
            if proto is None:
                proto = _public_export(gm, inputs, input_names, output_names)
    except Exception as exc:
        raise UnsupportedModelError(_exporter_reason(exc)) from exc
    return proto


def _public_export(
    gm: torch.fx.GraphModule,
    inputs: tuple[Tensor, ...],
    input_names: Sequence[str],
    output_names: Sequence[str],
) -> onnx.ModelProto:
    """``torch.onnx.export(dynamo=True)`` with its default decomposition and optimiser."""
    with tempfile.TemporaryDirectory() as scratch:
        program = torch.onnx.export(
            gm,
            inputs,
            dynamo=True,
            opset_version=PORTABLE_OPSET,
            input_names=list(input_names),
            output_names=list(output_names),
            optimize=True,
            external_data=False,
            custom_translation_table=_CUSTOM,
            artifacts_dir=scratch,
        )
        assert program is not None
        return program.model_proto


def _lean_export(
    gm: torch.fx.GraphModule,
    inputs: tuple[Tensor, ...],
    input_names: Sequence[str],
    output_names: Sequence[str],
) -> onnx.ModelProto | None:
    """The lean path; None where torch lacks its modules or the translator refuses the graph."""
    exporter = _exporter()
    if exporter is None:
        return None
    import onnx_ir as ir

    core, fx_passes, ir_passes = exporter
    graph = _graph_copy(gm.graph)  # the public path, where this one gives up, takes gm
    if not _functionalize(graph):
        log.debug("an in-place op writes through a view: the public path takes the graph")
        return None
    missing = _untranslated(graph)
    if missing:
        log.debug("torchlib cannot write %s: the public path decomposes them", missing)
        return None
    program = _program_of(gm, graph)
    if program is None:  # metadata the direct form needs is missing: torch.export captures
        copied = torch.fx.GraphModule(gm, _graph_copy(gm.graph))
        functionalize_in_place(copied)
        program = torch.export.export(copied, inputs, strict=False)
    module = program.graph_module
    fx_passes.insert_type_promotion_nodes(module)
    program._graph_module = fx_passes.remove_assertion_nodes(module)
    try:
        with _signatures_cached():
            model = core._exported_program_to_onnx_program(program, registry=_registry()).model
    except Exception as exc:  # e.g. an op the exporter's own decomposition would have split
        log.debug("the lean translation refused the graph, the public path takes it: %s", exc)
        return None
    optimize(model)
    ir_passes.rename_inputs(model, list(input_names))
    ir_passes.rename_outputs(model, list(output_names))
    return ir.serde.serialize_model(model)


def _graph_copy(graph: torch.fx.Graph) -> torch.fx.Graph:
    """A graph of its own with the same node metadata: the lean path rewrites only nodes."""
    copied = torch.fx.Graph()
    copied.output(copied.graph_copy(graph, {}))
    return copied


def _program_of(gm: torch.fx.GraphModule, graph: torch.fx.Graph) -> Any:
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
    if not _functionalize(gm.graph):
        return False
    gm.recompile()
    return True


def _functionalize(graph: torch.fx.Graph) -> bool:
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


@functools.cache
def _exporter() -> tuple[Any, Any, Any] | None:
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


def _untranslated(graph: torch.fx.Graph) -> list[str]:
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

    return frozenset(_decomp.get_onnx_implemented_overloads(_registry()))


@functools.cache
def _registry() -> Any:
    """Torchlib's translations at the portable opset, with this package's own: built once."""
    from torch.onnx._internal.exporter import _registration

    registry = _registration.ONNXRegistry.from_torchlib(opset_version=PORTABLE_OPSET)
    for op, function in _CUSTOM.items():
        registry.register_op(op, function, is_complex=False)
    return registry


@functools.cache
def _rules() -> Any:
    """The rewrite rules that match these graphs.

    The rest of onnxscript's default set never does, and trying each on every node is most
    of its optimiser's time.
    """
    from onnxscript.rewriter import RewriteRuleSet
    from onnxscript.rewriter.rules import common

    return RewriteRuleSet(
        [
            common.reshape_reshape_rule,
            common.max_min_rule,
            common.min_max_rule,
            common.max_max_rule,
            common.min_min_rule,
            common.fuse_pad_into_conv_rule,
            common.normalize_pad_format_conv_rule,
            common.remove_optional_bias_from_conv_rule,
            common.remove_optional_bias_from_conv_transpose_rule,
            common.remove_optional_bias_from_gemm_rule,
        ]
    )


def optimize(model: Any) -> None:
    """Fold constants, apply :func:`_rules`, remove dead code and common subexpressions.

    ``model`` is an ``onnx_ir.Model``, changed in place; the passes and their order are
    onnxscript's own optimiser's, with fewer rewrite rules.
    """
    import onnx_ir as ir
    import onnx_ir.passes.common as common
    from onnxscript.optimizer import fold_constants
    from onnxscript.rewriter import RewritePass

    common.InlinePass()(model)
    for _ in range(2):  # onnxscript's optimiser's two rounds, stopping when nothing changes
        folded = fold_constants(model).modified
        rewritten = RewritePass(_rules())(model).modified
        common.RemoveUnusedNodesPass()(model)
        if not (folded or rewritten):
            break
    ir.passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.RemoveUnusedFunctionsPass(),
        common.RemoveUnusedOpsetsPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(model)


@contextlib.contextmanager
def _signatures_cached() -> Iterator[None]:
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


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """torch.onnx's dynamo exporter prints progress lines and warnings: keep them in the log."""
    out = io.StringIO()
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(out),
    ):
        warnings.simplefilter("ignore")
        quiet = [logging.getLogger(n) for n in ("torch.onnx", "onnx_ir", "onnxscript")]
        levels = [q.level for q in quiet]
        for q in quiet:
            q.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for q, level in zip(quiet, levels, strict=True):
                q.setLevel(level)
    for line in out.getvalue().splitlines():
        log.debug("torch.onnx: %s", line)


def _exporter_reason(exc: BaseException) -> str:
    """One sentence from torch.onnx's (long, nested) export error: the op it could not write."""
    seen: list[str] = []
    cause: BaseException | None = exc
    while cause is not None and len(seen) < 10:
        seen.append(str(cause))
        cause = cause.__cause__ or cause.__context__
    for text in seen:
        match = re.search(r"No ONNX function found for <OpOverload\(op='([\w.]+)'", text)
        if match:
            return (
                f"the traced step uses {match.group(1)}, which torch.onnx {torch.__version__} "
                f"cannot write as ONNX (opset {PORTABLE_OPSET}); replace the layer that needs it "
                "or freeze the norm layers before it (RealmConfig.frozen)"
            )
    first = next((line for t in seen for line in t.splitlines() if line.strip()), "")
    first = re.sub(r"\x1b\[[0-9;]*m", "", first)  # the exporter colours its messages
    return (
        f"torch.onnx (dynamo, opset {PORTABLE_OPSET}) could not export the traced step: "
        f"{first[:300]}"
    )


def check_portable(proto: onnx.ModelProto) -> None:
    """Standard ai.onnx ops only, opset ≤ 21, IR ≤ 10 (what ORT 1.19 and later load).

    The ONNX checker runs on the written file (:func:`check_written`): on a proto that
    still holds its weights it serialises all of them first.

    Raises:
        UnsupportedModelError: naming the first op or version that breaks the rule.
    """
    if proto.ir_version > MAX_IR_VERSION:
        proto.ir_version = MAX_IR_VERSION  # onnx-ir stamps its newest; opset 18 needs only 8
    domains = {n.domain for n in proto.graph.node} | {
        n.domain for f in proto.functions for n in f.node
    }
    foreign = sorted(d for d in domains if d not in ("", "ai.onnx"))
    if proto.functions:
        foreign.append(f"{len(proto.functions)} local functions")
    if foreign:
        raise UnsupportedModelError(
            f"the portable graph uses ops outside the standard ai.onnx domain: {foreign}"
        )
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset > 21:
        raise UnsupportedModelError(f"the portable graph needs opset {opset}; ORT 1.19 reads ≤ 21")


def check_written(path: Path) -> None:
    """The ONNX checker on a written graph, its weights' external references included.

    Raises:
        UnsupportedModelError: the checker refuses the graph, with its reason.
    """
    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), "")
        raise UnsupportedModelError(
            f"the written {path.name} fails the ONNX checker: {first[:300]}"
        ) from exc
