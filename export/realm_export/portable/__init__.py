"""The portable pipeline: the step, forward, decide and adapt graphs in standard ONNX (SPEC §11).

Traced once from torch (``_step``) and written as ONNX by torch.onnx's translator
(``_to_onnx``, checked by ``_checks``); the forward, adapt and decide graphs derived by graph
surgery (``_step``, ``_adapt``, ``_decide``), validated against the PyTorch reference
(``_validate_adapt``) and written with the manifest (``_write``). The onnxruntime-training
artifacts are ``realm_export.legacy``, beside this. :func:`trace` (one step as an aten
graph, its backward rewritten) and :data:`ACTIVATION_FORMS` (the activations' backward as
the graph writes it) are here for tests and tools that check a form alone.
"""

from .._rewrites import ACTIVATION_FORMS
from .._subgraphs import graphs_within, value_bytes
from .._trace import trace
from ._branch import AGAIN_PREFIX
from ._checks import check_written
from ._functionalize import functionalize_in_place
from ._step import PortableGraphs, build_portable_graphs, forward_of
from ._to_onnx import to_onnx
from ._write import write_portable

__all__ = [
    "ACTIVATION_FORMS",
    "AGAIN_PREFIX",
    "PortableGraphs",
    "build_portable_graphs",
    "check_written",
    "forward_of",
    "functionalize_in_place",
    "graphs_within",
    "to_onnx",
    "trace",
    "value_bytes",
    "write_portable",
]
