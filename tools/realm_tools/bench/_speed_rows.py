"""What the speed benchmark measures per model and per method, with the ratios it reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._flops import MachinePeak


class _AdaptRatios:
    """Runtime / torch ratios of the rows that time both sides' adapt and updating step."""

    torch_adapt_ms: float
    runtime_adapt_ms: float
    torch_step_ms: float
    runtime_step_ms: float

    @property
    def adapt_ratio(self) -> float:
        """Runtime adapt time / torch adapt time (target ≤ 1)."""
        return self.runtime_adapt_ms / self.torch_adapt_ms

    @property
    def step_ratio(self) -> float:
        """Runtime / torch time of a step that updates (target ≤ 1)."""
        return self.runtime_step_ms / self.torch_step_ms


@dataclass(frozen=True)
class MethodRow(_AdaptRatios):
    """One method's cost on one model (milliseconds per sample, batch 1, medians)."""

    model: str
    backend: str  # the runtime backend of the runtime_* figures
    method: str  # realm, tent or eata: the preset's settings with this method's loss/filters
    threads: int
    samples: int  # timed samples per measurement, after warm-up
    step_gflop: float  # counted FLOPs of one updating step of this method (torch reference)
    update_rate: float  # share of the runtime's normal-adapt samples that updated
    step_update_rate: float  # lowest share (torch, runtime) of forced samples that updated
    torch_adapt_ms: float  # adapt with the method's own filters
    torch_step_ms: float  # adapt with the filters forced open: every sample updates
    runtime_adapt_ms: float
    runtime_step_ms: float


@dataclass(frozen=True)
class SpeedRow(_AdaptRatios):
    """One model's figures on one runtime backend (milliseconds per sample, batch 1)."""

    model: str
    backend: str  # the runtime backend of the runtime_* figures ("onnx" or "ort-training")
    threads: int
    samples: int  # timed samples per measurement, after warm-up
    update_rate: float  # share of the timed REALM samples that updated
    torch_predict_ms: float  # median
    torch_adapt_ms: float  # median
    torch_adapt_p90_ms: float
    torch_step_ms: float  # median of a REALM step that updates every sample (d = 1)
    runtime_predict_ms: float  # median
    runtime_adapt_ms: float  # median
    runtime_adapt_p90_ms: float
    runtime_step_ms: float  # median of a REALM step that updates every sample (d = 1)
    torch_peak_rss_mb: float | None  # a torch-reference-only process; None: skipped (--quick)
    runtime_peak_rss_mb: float  # a process with realm_runtime only, torch unimportable
    predict_gflop: float  # counted FLOPs of one forward (matmul, conv, attention only)
    step_gflop: float  # the same for one updating REALM step: forward + input-gradient backward
    peak: MachinePeak  # the FLOP/s the floors divide by, at this row's thread count
    methods: tuple[MethodRow, ...] = ()  # REALM/Tent/EATA cost on the same stream
    # The REALM export the rows ran: wall time (validation included) and, per validated
    # graph ("training", "portable"), its largest logits / loss / relative gradient error.
    export_s: float | None = None
    validation: dict[str, dict[str, float]] = field(default_factory=dict)
    # The updating step's ratio in each of take_turns' blocks (ratio of the two sides'
    # medians within the block): how far one run's noise moves the ratio.
    step_ratio_blocks: tuple[float, ...] = ()

    @property
    def predict_ratio(self) -> float:
        """Runtime predict time / torch predict time (target ≤ 1)."""
        return self.runtime_predict_ms / self.torch_predict_ms

    @property
    def predict_floor_ms(self) -> float:
        """Predict FLOPs / measured peak: no implementation on this machine beats it."""
        return self.predict_gflop / self.peak.measured_gflops * 1e3

    @property
    def step_floor_ms(self) -> float:
        """Updating-step FLOPs / measured peak."""
        return self.step_gflop / self.peak.measured_gflops * 1e3

    @property
    def step_floor_theoretical_ms(self) -> float | None:
        """Updating-step FLOPs / theoretical peak (None where the CPU's spec is unknown)."""
        if self.peak.theoretical_gflops is None:
            return None
        return self.step_gflop / self.peak.theoretical_gflops * 1e3

    def achieved(self) -> dict[str, float]:
        """Floor / median time (share of the measured peak reached), per side and call."""
        return {
            "torch_predict_achieved": self.predict_floor_ms / self.torch_predict_ms,
            "runtime_predict_achieved": self.predict_floor_ms / self.runtime_predict_ms,
            "torch_step_achieved": self.step_floor_ms / self.torch_step_ms,
            "runtime_step_achieved": self.step_floor_ms / self.runtime_step_ms,
        }
