"""The prediction entropy as ONNX nodes, for every graph that writes it (SPEC §2).

The decision graph and the training graph's loss write ``H = −Σ_c p_c log p_c`` from the
log-softmax of the logits; they differ only in how the log-softmax is written.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._onnx_builder import GraphBuilder


@dataclass(frozen=True)
class EntropyNodes:
    """The names of what :func:`entropy_nodes` wrote."""

    entropy: str  # (B,) H per row
    probs: str | None  # (B, C) softmax, where the shifted form computes it on the way


def entropy_nodes(
    b: GraphBuilder, logits: str, axis: str, *, prefix: str = "", shifted: bool = False
) -> EntropyNodes:
    """Write the nodes of ``H = −Σ_c p_c log p_c`` per row of ``logits`` (B, C).

    Args:
        b: the builder to write into.
        logits: the name of the (B, C) logits.
        axis: the name of an int64 ``[1]`` constant, the class axis.
        prefix: prepended to every name written, to keep them apart from the graph's.
        shifted: the log-softmax as the runtime's numpy computes it (the logits less their
            maximum, less the log of the sum of their exponentials), bit for bit the same
            decisions on every client, and the softmax on the way; False: ONNX's
            ``LogSoftmax``, one node with a gradient in onnxruntime-training.

    Returns:
        The names of H, and of the softmax where it was written.
    """
    probs = None
    if shifted:
        max_logit = b.op("ReduceMax", [logits, axis], f"{prefix}max", keepdims=1)
        shift = b.op("Sub", [logits, max_logit], f"{prefix}shifted")
        e = b.op("Exp", [shift], f"{prefix}exp")
        total = b.op("ReduceSum", [e, axis], f"{prefix}sum", keepdims=1)
        probs = b.op("Div", [e, total], f"{prefix}probs")
        log_sum = b.op("Log", [total], f"{prefix}log_sum")
        log_p = b.op("Sub", [shift, log_sum], f"{prefix}log_p")
    else:
        log_p = b.op("LogSoftmax", [logits], f"{prefix}log_p", axis=1)
    p = b.op("Exp", [log_p], f"{prefix}p")
    p_log_p = b.op("Mul", [p, log_p], f"{prefix}p_log_p")
    sum_p_log_p = b.op("ReduceSum", [p_log_p, axis], f"{prefix}sum_p_log_p", keepdims=0)
    return EntropyNodes(b.op("Neg", [sum_p_log_p], f"{prefix}entropy"), probs)
