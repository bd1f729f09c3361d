"""A guard around one torch CPU bug: BatchNorm's backward on mixed memory layouts at batch 1.

``native_batch_norm_backward`` on the CPU (torch 2.14.1, eval and train mode alike) returns
wrong gradients for the input, the weight and the bias when one of ``input`` and
``grad_output`` is laid out channels-last with a batch of one and the other is not: a
transposed token tensor folded back into (1, C, H, W), as EfficientFormer's and LeViT's
stages do, feeds it exactly that. Finite differences and ONNX Runtime agree with each other
and not with torch (docs/SPEC.md §9). With both tensors contiguous the kernel is right, so
every BatchNorm of an adapted model gets contiguous inputs and output gradients: a copy
only where the layout is not already contiguous.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

_MARK = "_realm_contiguous_batch_norm"  # set on a BatchNorm once it has the hooks


def contiguous_batch_norms(model: nn.Module) -> int:
    """Give every BatchNorm of ``model`` contiguous inputs and output gradients.

    Idempotent (a marked layer is skipped), and copied along with the model.

    Returns:
        How many BatchNorm layers got the hooks now.
    """
    added = 0
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and not getattr(
            module, _MARK, False
        ):
            module.register_forward_pre_hook(_contiguous_input)
            module.register_forward_hook(_contiguous_output_grad)
            setattr(module, _MARK, True)
            added += 1
    return added


def _contiguous_input(_module: nn.Module, inputs: tuple[Any, ...]) -> tuple[Any, ...] | None:
    x = inputs[0] if inputs else None
    if isinstance(x, Tensor) and x.requires_grad and not x.is_contiguous():
        return (x.contiguous(), *inputs[1:])
    return None


def _contiguous_output_grad(_module: nn.Module, _inputs: Any, output: Any) -> None:
    if isinstance(output, Tensor) and output.requires_grad:
        output.register_hook(_contiguous)


def _contiguous(grad: Tensor) -> Tensor:
    return grad.contiguous()
