"""Rewrites of a traced aten graph's backward into ops the ONNX exporter writes in standard ONNX.

One module per kind of op: piecewise activations (``_activations``), convolution
(``_conv``), max pooling (``_max_pool``), upsampling and adaptive average pooling
(``_resample``), writes through strided views of a buffer (``_buffers``);
:func:`rewrite_backward_ops` (``_backward``) applies them to a traced graph.
"""

from ._activations import ACTIVATION_FORMS, ACTIVATIONS_WHOLE
from ._backward import rewrite_backward_ops
from ._buffers import restride_
from ._max_pool import max_pool_translation
from ._nodes import aten

__all__ = [
    "ACTIVATIONS_WHOLE",
    "ACTIVATION_FORMS",
    "aten",
    "max_pool_translation",
    "restride_",
    "rewrite_backward_ops",
]
