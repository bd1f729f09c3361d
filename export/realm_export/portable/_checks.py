"""What makes a graph portable: standard ai.onnx ops, opset ≤ 21, IR ≤ 10, the ONNX checker."""

from __future__ import annotations

from pathlib import Path

import onnx

from .._errors import UnsupportedModelError

MAX_IR_VERSION = 10  # ORT 1.19.2 refuses newer IR versions


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
