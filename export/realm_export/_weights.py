"""One weights file for the portable graphs: each large initializer stored once, as external data.

The step graph and the forward graph carry the same frozen weights (byte for byte the same
in both, hundreds of megabytes for a ViT-Base). Embedded in each ``.onnx`` file, every session that
loads a graph holds its own copy, and reads the whole file while it loads. Here the large
float32 initializers of both graphs go into one :data:`SHARED_WEIGHTS` file, written once, at
page-aligned offsets, and each graph keeps only an ONNX external-data reference to them
(``location``/``offset``/``length``). Any ONNX loader given the graph's path still resolves
them; ``RealmRuntime`` reads the file once and hands the same buffers to both sessions
(``SessionOptions.add_initializer``), and the JavaScript clients pass its bytes as
``externalData``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from realm_runtime.contract import SHARED_WEIGHTS

# Smaller tensors (shape constants, per-channel vectors) stay in the graph: moving them saves
# nothing and costs a reference each.
MIN_BYTES = 4096
ALIGN = 4096  # offsets on page boundaries: ONNX Runtime may map such data instead of reading it
_GEMM_OPS = ("MatMul", "Gemm")


def save_with_shared_weights(
    graphs: dict[str, onnx.ModelProto], directory: Path, files: dict[str, str]
) -> dict[str, Any]:
    """Write ``graphs`` (role → model) into ``directory``, their weights in one shared file.

    Each model is changed in place: its large float32 initializers lose their bytes for an
    external-data reference into :data:`SHARED_WEIGHTS`. A tensor of the same name and the
    same bytes in several graphs is stored once, whatever its name in each.

    Args:
        graphs: role (``"step_model"``, ``"forward_model"``) → model.
        directory: where the graphs and the weights file go.
        files: role → the graph's file name in ``directory``.

    Returns:
        The manifest's ``portable.weights`` section: the file, and per role the tensors
        ``[name, offset, shape]`` its graph reads from it; ``gemm_bytes``, how many of the
        step graph's shared bytes feed matrix products as constant operands (what ONNX
        Runtime would pre-pack into a second copy per session).
    """
    digests = _read_transposed(list(graphs.values()))
    stored: dict[str, int] = {}  # sha256 -> offset
    tables: dict[str, list[list[Any]]] = {}
    with open(directory / SHARED_WEIGHTS, "wb") as out:
        for (role, model), digest in zip(graphs.items(), digests, strict=True):
            table = tables.setdefault(role, [])
            for tensor in model.graph.initializer:
                key = digest.get(tensor.name)  # by bytes: the graphs name the same weights apart
                if key is None:
                    continue
                if key not in stored:
                    data = _shared(tensor)
                    assert data is not None  # digested above
                    out.write(b"\0" * (-out.tell() % ALIGN))
                    stored[key] = out.tell()
                    out.write(data)
                offset = stored[key]
                _point_to(tensor, offset, 4 * int(np.prod(tensor.dims)))
                table.append([tensor.name, offset, [int(d) for d in tensor.dims]])
            onnx.save_model(model, str(directory / files[role]), save_as_external_data=False)
    return {
        "file": SHARED_WEIGHTS,
        "gemm_bytes": _gemm_bytes(graphs.get("step_model"), tables.get("step_model", [])),
        "graphs": tables,
    }


def shared_table(model: onnx.ModelProto) -> list[list[Any]]:
    """``[name, offset, shape]`` of each tensor ``model`` reads from :data:`SHARED_WEIGHTS`.

    A graph written after the weights file (the adapt graph) may read its tensors in shapes
    of its own (a 1×1 kernel as a matrix): its table comes from the graph itself.
    """
    table: list[list[Any]] = []
    for tensor in model.graph.initializer:
        info = {entry.key: entry.value for entry in tensor.external_data}
        if tensor.data_location == onnx.TensorProto.EXTERNAL and info.get("location") == (
            SHARED_WEIGHTS
        ):
            table.append([tensor.name, int(info.get("offset", 0)), [int(d) for d in tensor.dims]])
    return table


def _shared(tensor: onnx.TensorProto) -> bytes | None:
    """The little-endian float32 bytes of a tensor the weights file would hold, else None."""
    if (
        tensor.data_type != onnx.TensorProto.FLOAT
        or tensor.data_location == onnx.TensorProto.EXTERNAL
    ):
        return None
    data = numpy_helper.to_array(tensor).astype("<f4", copy=False).tobytes()
    return data if len(data) >= MIN_BYTES else None


def _read_transposed(models: list[onnx.ModelProto]) -> list[dict[str, str]]:
    """A matrix an earlier graph holds transposed becomes ``Transpose`` of that layout.

    The dynamo-exported graphs keep a linear layer's weight as ``Wᵀ`` (their matrix
    product's layout), the inference graph as ``W``: the same weights in two layouts, which
    the weights file would hold twice. Such a tensor is replaced by an initializer with the
    earlier layout's bytes (stored once, by the caller) and a ``Transpose`` node that
    ONNX Runtime folds when it loads the graph.

    Returns:
        Per model, the sha256 of each tensor the weights file holds, by name: each tensor's
        bytes are read and hashed once.
    """
    earlier: set[str] = set()
    digests: list[dict[str, str]] = []
    for model in models:
        own: set[str] = set()
        digest: dict[str, str] = {}
        digests.append(digest)
        kept, added, nodes = [], [], []
        for tensor in model.graph.initializer:
            data = _shared(tensor)
            if data is None:
                kept.append(tensor)
                continue
            key = hashlib.sha256(data).hexdigest()
            own.add(key)
            digest[tensor.name] = key
            flipped = (
                np.ascontiguousarray(numpy_helper.to_array(tensor).astype("<f4").T)
                if len(tensor.dims) == 2 and key not in earlier
                else None
            )
            flipped_key = None if flipped is None else hashlib.sha256(flipped.tobytes()).hexdigest()
            if flipped_key not in earlier:
                kept.append(tensor)
                continue
            source = numpy_helper.from_array(flipped, f"{tensor.name}.transposed")
            del digest[tensor.name]
            digest[source.name] = flipped_key
            added.append(source)
            nodes.append(
                onnx.helper.make_node(
                    "Transpose", [source.name], [tensor.name], name=f"{tensor.name}.transpose"
                )
            )
        if nodes:
            initializers = [*kept, *added]  # copies, taken before the fields are cleared
            rest = list(model.graph.node)
            del model.graph.initializer[:]
            model.graph.initializer.extend(initializers)
            del model.graph.node[:]
            model.graph.node.extend([*nodes, *rest])
        earlier |= own
    return digests


def _point_to(tensor: onnx.TensorProto, offset: int, length: int) -> None:
    """Replace ``tensor``'s bytes by a reference to ``length`` bytes at ``offset``."""
    for field in ("raw_data", "float_data"):
        tensor.ClearField(field)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", SHARED_WEIGHTS), ("offset", offset), ("length", length)):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)


def _gemm_bytes(model: onnx.ModelProto | None, table: list[list[Any]]) -> int:
    """Bytes of ``table``'s tensors used as a matrix product's constant operand."""
    if model is None or not table:
        return 0
    size = {name: 4 * int(np.prod(shape)) for name, _, shape in table}
    operands = {
        node.input[1]
        for node in model.graph.node
        if node.op_type in _GEMM_OPS and len(node.input) > 1 and node.input[1] in size
    }
    return sum(size[name] for name in operands)
