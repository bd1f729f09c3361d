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

The lean path's parts: the translator's modules, registry and signatures (``_translator``),
the traced graph as a program (``_program``), its in-place ops made functional
(``_functionalize``) and the optimiser (``_optimize``); ``_checks`` says whether a result is
portable.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import tempfile
import warnings
from collections.abc import Iterator, Sequence

import onnx
import torch
from torch import Tensor

from .._errors import UnsupportedModelError
from .._provenance import stamp
from ._functionalize import functionalize, functionalize_in_place
from ._optimize import optimize
from ._program import program_of
from ._translator import (
    CUSTOM,
    PORTABLE_OPSET,
    exporter_modules,
    registry,
    signatures_cached,
    untranslated,
)

log = logging.getLogger(__name__)


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
    stamp(proto, gm.graph.nodes)
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
            custom_translation_table=CUSTOM,
            artifacts_dir=scratch,
        )
        assert program is not None
        proto = program.model_proto
        captured = getattr(program, "exported_program", None)
        if captured is not None:  # the capture renames nodes: stamp by its own graph's names
            stamp(proto, captured.graph.nodes)
        return proto


def _lean_export(
    gm: torch.fx.GraphModule,
    inputs: tuple[Tensor, ...],
    input_names: Sequence[str],
    output_names: Sequence[str],
) -> onnx.ModelProto | None:
    """The lean path; None where torch lacks its modules or the translator refuses the graph."""
    exporter = exporter_modules()
    if exporter is None:
        return None
    import onnx_ir as ir

    core, fx_passes, ir_passes = exporter
    graph = _graph_copy(gm.graph)  # the public path, where this one gives up, takes gm
    if not functionalize(graph):
        log.debug("an in-place op writes through a view: the public path takes the graph")
        return None
    missing = untranslated(graph)
    if missing:
        log.debug("torchlib cannot write %s: the public path decomposes them", missing)
        return None
    program = program_of(gm, graph)
    if program is None:  # metadata the direct form needs is missing: torch.export captures
        copied = torch.fx.GraphModule(gm, _graph_copy(gm.graph))
        functionalize_in_place(copied)
        program = torch.export.export(copied, inputs, strict=False)
    module = program.graph_module
    fx_passes.insert_type_promotion_nodes(module)
    program._graph_module = fx_passes.remove_assertion_nodes(module)
    try:
        with signatures_cached():
            model = core._exported_program_to_onnx_program(program, registry=registry()).model
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
