"""The portable pipeline: the step, forward, decide and adapt graphs in standard ONNX (SPEC §11).

Traced once from torch (``_step``), derived by graph surgery (``_adapt``, ``_decide``),
validated against the PyTorch reference (``_validate_adapt``) and written with the manifest
(``_write``). The onnxruntime-training artifacts are ``realm_export.legacy``, beside this.
"""

from ._step import PortableGraphs, build_portable_graphs
from ._write import write_portable

__all__ = ["PortableGraphs", "build_portable_graphs", "write_portable"]
