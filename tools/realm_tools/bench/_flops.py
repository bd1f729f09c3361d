"""The physical floor of a step: FLOPs counted on the torch reference, and the CPU's peak FLOP/s.

FLOPs are counted with ``torch.utils.flop_counter.FlopCounterMode`` on what the reference
actually runs (2 FLOPs per multiply-add). It counts matrix products, convolutions and
attention only: normalisation, activations, softmax, the loss and the SGD update are left
out, so ``FLOPs / peak`` is a lower bound on the time of a call, never an estimate of it.

Frozen weights cost no weight gradient, in the count as in the kernels. Checked on torch
2.14 (and by ``tests/cli/test_bench.py``): the backward of a 3×3 convolution whose weight and bias
have ``requires_grad=False`` counts exactly its forward FLOPs (``convolution_backward`` is
asked for the input gradient only, through its ``output_mask``), and twice that with
``requires_grad=True``; a ``Linear`` likewise runs one ``mm`` backward instead of two. So the
counted backward of an adapt step is the input-gradient pass that the normalisation affine
parameters (and α, λ) need, without any convolution or linear weight gradient; the first
layer, whose input and weight both need no gradient, gets no backward at all.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from realm_runtime import onnxruntime_module
from realm_runtime.measure import updating_overrides
from realm_sdk import RealmAdapter, RealmConfig

# FP32 FLOPs per core per cycle, by the widest vector FMA path in /proc/cpuinfo's flags:
# (flag set that must be present, label, FLOPs/cycle, how that number is made up).
_ISA_TABLE: tuple[tuple[frozenset[str], str, int, str], ...] = (
    (frozenset({"avx512f"}), "avx512f", 64, "2 FMA units × 16 lanes × 2"),
    (frozenset({"avx2", "fma"}), "avx2+fma", 32, "2 FMA units × 8 lanes × 2"),
    (frozenset({"avx"}), "avx", 16, "1 add + 1 mul unit × 8 lanes"),
    (frozenset({"sse2"}), "sse2", 8, "1 add + 1 mul unit × 4 lanes"),
)


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs (2 per multiply-add) of the matmuls, convolutions and attention ``fn`` runs.

    Args:
        fn: runs the work to count, e.g. ``lambda: adapter.adapt(x)``.

    Returns:
        The total of ``FlopCounterMode`` over everything ``fn`` dispatched (backward included).
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=_cpu_attention_formulas()) as counter:
        fn()
    return int(counter.get_total_flops())


def _cpu_attention_formulas() -> dict[Any, Callable[..., int]]:
    # torch's CPU attention kernel (what F.scaled_dot_product_attention, hence timm's ViT,
    # runs on CPU) has no formula in torch 2.14's registry: without these, attention would
    # count 0. The formulas are torch's own for the GPU kernels, whose arguments start alike.
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    formulas: dict[Any, Callable[..., int]] = {}
    for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", _sdpa_flop),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", _sdpa_backward_flop),
    ):
        op = getattr(aten, name, None)
        if op is not None and op not in flop_registry:  # a later torch may count it itself
            formulas[op] = formula
    return formulas


def _sdpa_flop(q: Any, k: Any, v: Any, *_args: Any, out_shape: Any = None, **_kw: Any) -> int:
    # Shapes (B, heads, S, D): scores = q @ kᵀ, then scores @ v.
    b, h, s_q, d = q
    s_k, d_v = k[2], v[3]
    return 2 * b * h * s_q * s_k * (d + d_v)


def _sdpa_backward_flop(
    grad_out: Any, q: Any, k: Any, v: Any, *_args: Any, out_shape: Any = None, **_kw: Any
) -> int:
    # As torch counts the flash backward: recompute the scores (1 product), then the
    # gradients of the scores, v, q and k (4 products).
    b, h, s_q, d = q
    s_k, d_v = k[2], v[3]
    return 2 * b * h * s_q * s_k * (d + d_v + d_v + d + d)


@dataclass(frozen=True)
class MachinePeak:
    """The FP32 FLOP/s a floor divides by: measured with torch, and from the CPU's spec."""

    threads: int  # torch threads of the measured matmul
    cores: int  # cores counted in the theoretical peak: threads, at most the CPU count
    measured_gflops: float  # the fastest of `by_library`: what this machine's matmul reaches
    matmul_n: int  # n of the measured matmul (2·n³ FLOPs each)
    # GFLOP/s per library (best of `repeats` n×n float32 products at `threads`): torch.mm's
    # BLAS (MKL, which takes a slower path on AMD CPUs: docs/BENCHMARKS.md) and
    # ONNX Runtime's MatMul (MLAS), so neither side's library defines the other's ceiling.
    by_library: dict[str, float]
    repeats: int  # timed matmuls; the fastest counts (the others met noise or a cold cache)
    ghz: float | None  # clock per core: cpufreq's max if the kernel exposes it, else "cpu MHz"
    ghz_source: str  # where ghz came from ("cpuinfo_max_freq", "/proc/cpuinfo cpu MHz", "")
    isa: str  # widest FP32 FMA path in /proc/cpuinfo's flags (avx512f, avx2+fma, …, unknown)
    flops_per_cycle: int | None  # FP32 FLOPs per core per cycle assumed for `isa`
    flops_per_cycle_basis: str  # how flops_per_cycle is made up, e.g. "2 FMA units × 8 lanes × 2"
    theoretical_gflops: float | None  # cores × ghz × flops_per_cycle; None without /proc/cpuinfo

    def describe(self) -> str:
        """One line: both peaks and the assumption behind the theoretical one."""
        libraries = ", ".join(f"{k} {v:.1f}" for k, v in self.by_library.items())
        measured = (
            f"measured {self.measured_gflops:.1f} GFLOP/s ({self.matmul_n}² float32 matmul, "
            f"{_count(self.threads, 'thread')}, best of {self.repeats}; {libraries})"
        )
        if self.theoretical_gflops is None:
            return f"peak FP32: {measured}; theoretical unknown (no /proc/cpuinfo)"
        boost = (
            "; the measured one is above it: the cores run faster than that clock"
            if self.measured_gflops > self.theoretical_gflops
            else ""
        )
        return (
            f"peak FP32: {measured}; theoretical {self.theoretical_gflops:.1f} GFLOP/s "
            f"({_count(self.cores, 'core')} × {self.ghz:.2f} GHz [{self.ghz_source}] × "
            f"{self.flops_per_cycle} FLOP/cycle [{self.isa}: {self.flops_per_cycle_basis}, "
            f"assumed]){boost}"
        )


def step_flops(model: nn.Module, config: RealmConfig, x: torch.Tensor) -> tuple[float, float]:
    """GFLOPs of a predict and of an updating adapt step of a fresh (forced) reference."""
    adapter = RealmAdapter(
        copy.deepcopy(model), config.with_overrides(**updating_overrides(config))
    )
    predict = count_flops(lambda: adapter.predict(x))
    results = []
    step = count_flops(lambda: results.append(adapter.adapt(x)))
    if not results[0].updated:  # counted a skip, not a step: the floor would be a forward's
        raise RuntimeError(f"the counted {config.method} step did not update ({results[0].reason})")
    return predict / 1e9, step / 1e9


def machine_peak(threads: int, *, n: int = 2048, repeats: int = 5) -> MachinePeak:
    """Measure the matmul peak at ``threads`` threads and read the CPU's theoretical peak.

    The measured peak is the fastest float32 matrix product this machine's libraries make:
    torch.mm and, where onnxruntime is importable, ONNX Runtime's MatMul.

    Args:
        threads: threads for the matmuls, and cores counted in the theoretical peak
            (capped at the CPU count).
        n: matrix size; 2048 (17 GFLOP) is large enough to reach the BLAS's peak.
        repeats: timed matmuls after one warm-up; the fastest counts.

    Returns:
        Both peaks, with where the clock and the FLOPs per cycle came from.
    """
    a, b = torch.randn(n, n), torch.randn(n, n)
    by_library = {"torch.mm": _torch_gflops(a, b, threads, repeats)}
    ort_gflops = _onnxruntime_gflops(a.numpy(), b.numpy(), threads, repeats)
    if ort_gflops is not None:
        by_library["onnxruntime MatMul"] = ort_gflops
    cores = min(threads, os.cpu_count() or threads)
    ghz, ghz_source = _clock_ghz()
    isa, per_cycle, basis = _isa()
    theoretical = cores * ghz * per_cycle if ghz is not None and per_cycle is not None else None
    return MachinePeak(
        threads=threads,
        cores=cores,
        measured_gflops=max(by_library.values()),
        matmul_n=n,
        by_library=by_library,
        repeats=repeats,
        ghz=ghz,
        ghz_source=ghz_source,
        isa=isa,
        flops_per_cycle=per_cycle,
        flops_per_cycle_basis=basis,
        theoretical_gflops=theoretical,
    )


def _best_gflops(call: Callable[[], object], n: int, repeats: int) -> float:
    call()  # warm-up: thread pool, page faults of the output
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def _torch_gflops(a: torch.Tensor, b: torch.Tensor, threads: int, repeats: int) -> float:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = torch.empty_like(a)
        return _best_gflops(lambda: torch.mm(a, b, out=out), a.shape[0], repeats)
    finally:
        torch.set_num_threads(before)


def _onnxruntime_gflops(a: Any, b: Any, threads: int, repeats: int) -> float | None:
    """ONNX Runtime's MatMul on the same matrices (None where onnx/onnxruntime are missing)."""
    try:
        from onnx import TensorProto, helper, numpy_helper

        ort = onnxruntime_module()  # without ORTModule: no CUDA_HOME warning
    except ImportError:
        return None
    n = a.shape[0]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "peak",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(b, "b")],  # a constant, as the graphs' weights are
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return _best_gflops(lambda: session.run(None, {"a": a}), n, repeats)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:  # not Linux
        return []


def _clock_ghz() -> tuple[float | None, str]:
    # cpufreq's maximum (boost included) where the kernel exposes it; a VM usually does not,
    # and then /proc/cpuinfo's "cpu MHz" is the nominal clock the hypervisor reports.
    max_freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    try:
        return int(max_freq.read_text()) / 1e6, "cpuinfo_max_freq"  # kHz
    except (OSError, ValueError):
        pass
    mhz = [float(line.split(":")[1]) for line in _cpuinfo() if line.startswith("cpu MHz")]
    if not mhz:
        return None, ""
    return max(mhz) / 1e3, "/proc/cpuinfo cpu MHz"


def _isa() -> tuple[str, int | None, str]:
    flags: set[str] = set()
    for line in _cpuinfo():
        if line.startswith(("flags", "Features")):
            flags = set(line.split(":", 1)[1].split())
            break
    for needed, label, per_cycle, basis in _ISA_TABLE:
        if needed <= flags:
            return label, per_cycle, basis
    return "unknown", None, ""
