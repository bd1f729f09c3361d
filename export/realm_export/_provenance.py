"""Where each node of an exported graph comes from: the step's part and the aten op it serves.

The trace records, on every fx node, the aten op it was decomposed from (torch's
``original_aten``) and the part of the step that was running (:func:`part`, through
torch's node annotations). The rewrites hand a replaced node's provenance to the nodes that
replace it (:func:`inherit`), and :func:`stamp` writes both onto the ONNX nodes the
exporter made of each fx node, as ``metadata_props``. ONNX Runtime's profiler names the
nodes it times, so a profile can say what each millisecond computes: a depthwise input
gradient, a hard-swish mask, a norm's backward, the update. Where the installed torch
lacks node annotations, nothing is recorded and the graphs are the same.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import onnx
from torch import fx

from realm_runtime.contract import NODE_PART_KEY, NODE_SOURCE_KEY

from ._subgraphs import graphs_within

try:
    from torch.fx import traceback as _fx_traceback
except ImportError:  # pragma: no cover - every torch this package supports has it
    _fx_traceback = None  # type: ignore[assignment]

_PART = "realm_part"  # the keys of torch's "custom" node annotations this module sets
_LAYER = "realm_layer"
LAYER_PREFIX = "realm."  # a layer form's source name: "realm.batch_norm"
_SOURCE = "original_aten"  # torch's own: the aten op a decomposed node was written for
_CUSTOM = "custom"  # torch's: the annotations in force when the node was made
# The exporter's record of the fx node an ONNX node was made from: "<fx name>: <target>",
# and its name scopes, the innermost the fx node's name.
_ONNX_ORIGIN = "namespace"
_SCOPES = "pkg.torch.onnx.name_scopes"


def recording() -> contextlib.AbstractContextManager[Any]:
    """The context a trace runs in for its nodes to keep their provenance."""
    preserve = getattr(_fx_traceback, "preserve_node_meta", None)
    return preserve() if preserve is not None else contextlib.nullcontext()


def part(name: str) -> contextlib.AbstractContextManager[Any]:
    """Label the nodes traced inside as part ``name`` of the step (a ``PART_*`` name)."""
    return _annotated(_PART, name)


def layer(name: str) -> contextlib.AbstractContextManager[Any]:
    """Label the nodes traced inside as computing layer form ``name`` (either direction)."""
    return _annotated(_LAYER, name)


def _annotated(key: str, value: str) -> contextlib.AbstractContextManager[Any]:
    annotate = getattr(_fx_traceback, "annotate", None)
    return annotate({key: value}) if annotate is not None else contextlib.nullcontext()


def provenance(node: fx.Node) -> tuple[str | None, str | None]:
    """``(part, source)`` recorded on ``node``: the layer form, else the aten op; or None."""
    custom = node.meta.get(_CUSTOM)
    custom = custom if isinstance(custom, dict) else {}
    if custom.get(_LAYER) is not None:
        return custom.get(_PART), LAYER_PREFIX + str(custom[_LAYER])
    source = node.meta.get(_SOURCE)
    return custom.get(_PART), (str(source) if source is not None else None)


@contextlib.contextmanager
def inherit(graph: fx.Graph, source: fx.Node) -> Iterator[None]:
    """Give the nodes added to ``graph`` inside the block ``source``'s provenance.

    A rewrite replaces one traced node by several; they compute what it did.
    """
    before = set(graph.nodes)
    meta = {k: source.meta[k] for k in (_CUSTOM, _SOURCE) if k in source.meta}
    yield
    for node in graph.nodes:
        if node not in before:
            for key, value in meta.items():
                node.meta.setdefault(key, value)


def stamp(proto: onnx.ModelProto, nodes: Iterable[fx.Node]) -> int:
    """Write each fx node's provenance onto the ONNX nodes made of it; how many were stamped."""
    origin = {n.name: provenance(n) for n in nodes}
    stamped = 0
    for node in (n for graph in graphs_within(proto.graph) for n in graph.node):
        props = {p.key: p.value for p in node.metadata_props}
        label, source = origin.get(_fx_name(node, props), (None, None))
        for key, value in ((NODE_PART_KEY, label), (NODE_SOURCE_KEY, source)):
            if value is not None and key not in props:
                node.metadata_props.add(key=key, value=value)
        stamped += label is not None or source is not None
    return stamped


def _fx_name(node: onnx.NodeProto, props: dict[str, str]) -> str:
    """The fx node an ONNX node was made from, as the exporter recorded it.

    Its "namespace" starts with the fx name; where torch.export captured the graph again,
    the namespace names the capture instead, and the innermost name scope holds the name.
    """
    name = props.get(_ONNX_ORIGIN, "").split(":", 1)[0].strip()
    if name:
        return name
    scopes = props.get(_SCOPES, "").strip("[]").split(",")
    last = scopes[-1].strip().strip("'\"") if scopes else ""
    return last or node.name.removeprefix("node_")
