"""realm_runtime: the torch-free on-device REALM loop over exported ONNX Runtime artifacts.

Not implemented yet: ``RealmRuntime`` is the subject of issue 4 (see README, "Status"). The
package exists so that the distribution's layout is final; it must never import torch.
"""

__all__: list[str] = []
