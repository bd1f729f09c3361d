"""The SDK alone, CPU torch against CUDA torch, step by step on parity streams.

Separates the reference's own device difference from the runtime's: both sides are
`RealmAdapter` (full float32, TF32 off). Prints one line per step and stops at the first
decision that differs. Usage, on a machine with a GPU, from the repository root::

    PYTHONPATH=sdk:export:runtime python dev/diag_cuda.py convnext_atto-cifar resnet50_gn-imagenet
"""

import copy
import sys

import torch

from realm_sdk import RealmAdapter, decision_margin
from realm_tools.parity import CASES, build_case, make_stream


def _max_abs(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[float, str]:
    worst = max(a, key=lambda n: float((a[n] - b[n].cpu()).abs().max()))
    return float((a[worst] - b[worst].cpu()).abs().max()), worst


def main(names: list[str]) -> None:
    """Run each named parity case on both devices, printing the differences per step."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    known = {c.name: c for c in CASES}
    for name in names:
        case = known[name]
        model, cfg, shape = build_case(case)
        cpu = RealmAdapter(copy.deepcopy(model), cfg)
        gpu = RealmAdapter(copy.deepcopy(model).cuda(), cfg)
        for step, x in enumerate(make_stream(case, shape)[:40]):
            margin_cpu, _ = decision_margin(cpu, x)
            margin_gpu, _ = decision_margin(gpu, x)
            xt = torch.from_numpy(x)
            sc, sg = cpu.adapt(xt), gpu.adapt(xt.cuda())
            dl = float((sc.logits - sg.logits.cpu()).abs().nan_to_num(0).max())
            dp, _ = _max_abs(cpu.trainable_parameters(), gpu.trainable_parameters())
            vc, vg = cpu.momentum_buffers(), gpu.momentum_buffers()
            scale = max(float(v.abs().max()) for v in vc.values()) or 1.0
            dv, worst = _max_abs(vc, vg)
            same = sc.selected.tolist() == sg.selected.cpu().tolist() and sc.updated == sg.updated
            print(
                f"{name} step {step}: logits {dl:.1e} margin cpu {margin_cpu:.2e} "
                f"gpu {margin_gpu:.2e} decision {'same' if same else 'DIFF'} "
                f"({sc.reason}/{sg.reason}) params {dp:.1e} momentum rel {dv / scale:.1e} "
                f"worst {worst} alpha {(cpu.state.alpha or 0.0) - (gpu.state.alpha or 0.0):.1e}"
            )
            if not same:
                break


if __name__ == "__main__":
    main(sys.argv[1:])
