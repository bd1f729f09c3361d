"""The TorchScript forward graphs: the inference model, and the legacy training graph's base.

``torch.onnx.export`` with every parameter kept as a named initializer, checked against what
onnxruntime 1.19.2 loads. The inference model keeps the model's own norm ops (ONNX Runtime
folds a BatchNorm into the convolution before it); the legacy training graph's base takes
the norms of :func:`._layers.export_friendly_norms`, which onnxruntime-training
differentiates, and :mod:`.legacy` puts REALM's loss on it.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Sequence

import onnx
import torch
from torch import nn

from realm_runtime.contract import INPUT_NAME, LOGITS_NAME

from ._errors import UnsupportedModelError
from ._layers import export_friendly_norms

OPSET = 17  # ≤ 21 (ORT 1.19.2); 17 is the first with LayerNormalization
MAX_IR_VERSION = 10  # ORT 1.19.2 refuses newer IR versions
MAX_OPSET = 21


def model_to_onnx(
    model: nn.Module, example: torch.Tensor, *, dynamic_batch: bool, for_training: bool = False
) -> tuple[onnx.ModelProto, list[str]]:
    """Export the forward pass with every parameter kept as a named initializer.

    The TorchScript exporter with constant folding off and initializers kept as inputs is the
    recipe that keeps every parameter name (the default flags fold away or de-duplicate
    equal-valued norm parameters, e.g. freshly initialised ones; the dynamo exporter folds or
    emits CastLike, which has no gradient). The initializers are then dropped from the graph
    inputs so they are weights, not feeds.

    Args:
        model: the classifier, in eval mode.
        example: an input of the export shape.
        dynamic_batch: make the batch axis symbolic.
        for_training: the legacy training graph's base (the export-friendly norms, every
            ``LayerNormalization`` with its three outputs); otherwise the inference model.

    Returns:
        The forward graph (input ``input``, output ``logits``), and the places where the
        tracer turned a tensor into a Python bool: data-dependent control flow, frozen into
        the branch that the example input took (reported if validation then fails).
    """
    buffer = io.BytesIO()
    axes = {INPUT_NAME: {0: "batch"}, LOGITS_NAME: {0: "batch"}} if dynamic_batch else None
    norms = export_friendly_norms() if for_training else contextlib.nullcontext()
    with norms, torch.no_grad(), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # recorded, not shown: the exporter is noisy
        try:
            torch.onnx.export(
                model,
                (example,),
                buffer,
                dynamo=False,
                opset_version=OPSET,
                do_constant_folding=False,
                keep_initializers_as_inputs=True,
                training=torch.onnx.TrainingMode.EVAL,
                input_names=[INPUT_NAME],
                output_names=[LOGITS_NAME],
                dynamic_axes=axes,
            )
        except UnsupportedModelError:
            raise
        except Exception as exc:  # the exporter's first sentence names the op; keep that
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            first = first.split(". ")[0].rstrip(".")[:300]
            raise UnsupportedModelError(
                f"torch.onnx.export (TorchScript, opset {OPSET}) failed on "
                f"{type(model).__name__}: {first}. Replace that layer, or export a model "
                "without data-dependent control flow"
            ) from exc
    branches = sorted(
        {
            f"{w.filename}:{w.lineno}"
            for w in seen
            if issubclass(w.category, torch.jit.TracerWarning)
            and "Python boolean" in str(w.message)
        }
    )
    proto = onnx.load_from_string(buffer.getvalue())
    initializers = {init.name for init in proto.graph.initializer}
    feeds = [i for i in proto.graph.input if i.name not in initializers]
    del proto.graph.input[:]
    proto.graph.input.extend(feeds)
    if for_training:
        declare_layer_norm_outputs(proto)
    return proto, branches


def declare_layer_norm_outputs(proto: onnx.ModelProto) -> int:
    """Give every ``LayerNormalization`` node its Mean and InvStdDev outputs.

    onnxruntime-training builds the LayerNormalization gradient only when the node declares
    all three outputs; the exporter declares just Y.

    Returns:
        How many nodes were changed.
    """
    changed = 0
    for index, node in enumerate(proto.graph.node):
        if node.op_type == "LayerNormalization" and len(node.output) == 1:
            base = node.name or f"layernorm_{index}"
            node.output.extend([f"{base}.mean", f"{base}.inv_std_dev"])
            changed += 1
    return changed


def check_versions(proto: onnx.ModelProto) -> dict[str, int]:
    """IR version and ai.onnx opset, checked against what ORT 1.19.2 loads.

    Raises:
        UnsupportedModelError: an IR version above 10 or an opset above 21.
    """
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if proto.ir_version > MAX_IR_VERSION or opset > MAX_OPSET:
        raise UnsupportedModelError(
            f"the graph has IR version {proto.ir_version} and opset {opset}; onnxruntime-training "
            f"1.19.2 loads IR ≤ {MAX_IR_VERSION} and opset ≤ {MAX_OPSET} (is onnx newer than "
            "1.17.0 installed?)"
        )
    return {"ir_version": int(proto.ir_version), "opset": int(opset)}


def check_trainable_names(proto: onnx.ModelProto, names: Sequence[str]) -> None:
    """Every trainable parameter must be an initializer of the graph, under its torch name.

    Raises:
        UnsupportedModelError: listing the names that vanished (folded, de-duplicated or not
            used by the forward pass).
    """
    present = {init.name for init in proto.graph.initializer}
    missing = [n for n in names if n not in present]
    if missing:
        raise UnsupportedModelError(
            f"{len(missing)} of {len(names)} trainable parameters are not initializers of the "
            f"exported graph (unused by forward(), or folded/renamed by the exporter): "
            f"{missing[:8]}{' …' if len(missing) > 8 else ''}"
        )
