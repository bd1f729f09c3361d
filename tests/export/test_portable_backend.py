"""The onnx backend the portable graphs run on: which backend ``auto`` picks and what it
refuses (a batch to adapt on, a device it has no build for), the adapted inference model it
writes, its state kept on the GPU under CUDA, and the step graph's ``realm.finite`` flag that
tells a step with a non-finite loss or gradient from a normal one.
"""

from __future__ import annotations

import onnxruntime as ort
import pytest
import torch

from realm_runtime import RealmRuntime


def test_backend_choice_and_errors(digits_artifacts):
    directory, _ = digits_artifacts
    assert RealmRuntime(directory).backend == "onnx"  # auto: the portable graph
    assert RealmRuntime(directory, backend="ort-training").backend == "ort-training"
    with pytest.raises(ValueError, match="backend must be one of"):
        RealmRuntime(directory, backend="tensorrt")
    rt = RealmRuntime(directory, backend="onnx")
    x = torch.randn(3, 1, 32, 32).numpy()
    with pytest.raises(ValueError, match=r"at most 1 sample.*backend=.ort-training."):
        rt.adapt(x)
    assert rt.state.samples == 0  # refused before anything changed
    assert rt.predict(x).shape == (3, 10)  # prediction takes any batch, one sample at a time
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        with pytest.raises(RuntimeError, match="onnxruntime-gpu"):
            RealmRuntime(directory, backend="onnx", device="cuda")
    with pytest.raises(ValueError, match="device must be"):
        RealmRuntime(directory, backend="onnx", device="tpu")


def test_inference_model_of_the_onnx_backend(digits_artifacts, digits_stream, tmp_path):
    rt = RealmRuntime(digits_artifacts[0], backend="onnx", threads=1)
    xs = digits_stream[0][:30]
    for i in range(30):
        rt.adapt(xs[i : i + 1])
    assert rt.state.updates > 0
    rt.export_inference_model(tmp_path / "adapted.onnx")
    session = ort.InferenceSession(str(tmp_path / "adapted.onnx"))
    assert [i.name for i in session.get_inputs()] == ["input"]  # parameters baked in
    (logits,) = session.run(None, {"input": xs[:1]})
    assert abs(logits - rt.predict(xs[:1])).max() < 1e-5


@pytest.mark.cuda
@pytest.mark.skipif(
    "CUDAExecutionProvider" not in ort.get_available_providers(),
    reason="needs onnxruntime-gpu (CUDAExecutionProvider) and an NVIDIA GPU",
)
def test_onnx_backend_on_cuda_keeps_state_on_the_gpu(digits_artifacts, digits_stream):
    rt = RealmRuntime(digits_artifacts[0], backend="onnx", device="cuda")
    cpu = RealmRuntime(digits_artifacts[0], backend="onnx", threads=1)
    xs = digits_stream[0][:40]
    for i in range(40):
        a, b = rt.adapt(xs[i : i + 1]), cpu.adapt(xs[i : i + 1])
        assert a.updated == b.updated
    # The whole adapt graph's state, never copied to the host per step.
    assert {v.device_name() for v in rt._backend._state.values()} == {"cuda"}
    options = rt._backend._adapt.get_provider_options()["CUDAExecutionProvider"]
    assert options["use_tf32"] == "0"  # float32 as the SDK; TF32 put logits 1e-3 off
    mine, ref = rt.trainable_parameters(), cpu.trainable_parameters()
    assert max(abs(mine[n] - ref[n]).max() for n in ref) < 1e-4


def test_step_graph_reports_a_non_finite_step(digits_artifacts, digits_stream):
    """realm.finite: true on a normal step, false when the loss or a gradient is not finite.

    λ = 0 in the fed parameter vector makes t = H/λ infinite: the loss and the α, λ
    gradients are NaN/inf while the logits stay finite, which only the flag can tell.
    """
    import numpy as np

    from realm_runtime import load_manifest

    directory = digits_artifacts[0]
    manifest = load_manifest(directory)
    session = ort.InferenceSession(str(directory / manifest.portable["step_model"]))
    source = np.load(directory / manifest.portable["source_params"])
    feeds = {
        "input": digits_stream[0][:1],
        "realm.sample_weight": np.ones(1, np.float32),
        "realm.lr": np.array(0.005, np.float32),
        "realm.lr_alpha_lambda": np.array(0.01, np.float32),
        "realm.lr_batch_norm": np.array(0.0, np.float32),
        "realm.momentum": np.array(0.0, np.float32),
        "realm.entropy_margin": np.array(1.0, np.float32),
        "realm.params": source,
        "realm.velocity": np.zeros_like(source),
        "realm.anchor": np.array(0.0, np.float32),
        "realm.relax": np.array(0.0, np.float32),
    }
    names = [o.name for o in session.get_outputs()]
    out = dict(zip(names, session.run(None, feeds), strict=True))
    assert bool(out["realm.finite"]) and np.isfinite(out["realm.new_params"]).all()
    broken = source.copy()
    broken[-1] = 0.0  # λ, the last slot of the layout
    assert manifest.portable["layout"][-1]["name"] == "realm.lambda"
    out = dict(zip(names, session.run(None, {**feeds, "realm.params": broken}), strict=True))
    assert np.isfinite(out["logits"]).all()
    assert not bool(out["realm.finite"])
