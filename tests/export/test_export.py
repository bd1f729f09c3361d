"""export_realm_artifacts on real architectures, validated against realm_sdk: what every
exported directory holds, its manifest, and its files loaded and checked.

Refused exports are in test_export_refusals.py; how the validation's tolerances are set in
test_validation_tolerance.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
import torch
from helpers import last_line_in_a_fresh_interpreter

from realm_export import ExportOptions, export_realm_artifacts
from realm_runtime import ArtifactError, load_manifest
from realm_runtime.contract import ADAPT_SETTINGS, ALPHA_NAME, LAMBDA_NAME
from realm_sdk import RealmAdapter, RealmConfig
from realm_tools.models import DigitsGNNet

timm = pytest.importorskip("timm")


def _small_swin():
    return timm.create_model(
        "swin_tiny_patch4_window7_224",
        pretrained=False,
        num_classes=10,
        img_size=64,
        window_size=4,
        embed_dim=24,
        depths=(1, 1, 2, 1),
        num_heads=(1, 2, 2, 4),
    )


# name -> (factory, input shape, classes); random init, pretrained=False.
FAST = {
    "digits_gn": (lambda: DigitsGNNet(), (1, 1, 32, 32), 10),
    "resnet18_bn": (
        lambda: timm.create_model("resnet18", pretrained=False, num_classes=10),
        (1, 3, 64, 64),
        10,
    ),
    "convnext_atto": (
        lambda: timm.create_model("convnext_atto", pretrained=False, num_classes=10),
        (1, 3, 64, 64),
        10,
    ),
    "swin_small_cfg": (_small_swin, (1, 3, 64, 64), 10),
    "vit_tiny": (
        lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10),
        (1, 3, 224, 224),
        10,
    ),
}
SLOW = {
    "resnet50_gn": (
        lambda: timm.create_model("resnet50_gn", pretrained=False, num_classes=1000),
        (1, 3, 224, 224),
        1000,
    ),
    "swin_tiny": (
        lambda: timm.create_model(
            "swin_tiny_patch4_window7_224", pretrained=False, num_classes=1000
        ),
        (1, 3, 224, 224),
        1000,
    ),
}


def _check_artifacts(info, model, config, tmp_path):
    """What every exported directory must satisfy."""
    manifest = load_manifest(info.directory)  # checksums verified
    expected = RealmAdapter(model, config).trainable_names  # the SDK's selection
    extra = [ALPHA_NAME, LAMBDA_NAME] if config.method == "realm" else []
    assert info.trainable == [*expected, *extra]
    assert list(manifest.trainable) == info.trainable
    # The checkpoint's trainable set, read back with ORT's own API.
    from realm_runtime import training_api

    state = training_api().CheckpointState.load_checkpoint(str(info.files["checkpoint"]))
    names = {n for n, p in state.parameters if p.requires_grad}
    assert names == set(info.trainable)
    for role in ("training_model", "eval_model", "inference_model"):
        proto = onnx.load(str(info.files[role]))
        opset = max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
        assert proto.ir_version <= 10 and opset <= 21, role
        ops = {n.op_type for n in proto.graph.node}
        if role == "inference_model":  # the model's own norms, BatchNorm on its running stats
            for node in proto.graph.node:
                if node.op_type == "BatchNormalization":
                    assert all(a.i == 0 for a in node.attribute if a.name == "training_mode")
            continue
        # No norm op that would train on batch statistics or lacks a gradient (SPEC §7).
        assert not ops & {"BatchNormalization", "InstanceNormalization", "GroupNormalization"}
    assert manifest.validation["passed"] is True
    inference = manifest.inference
    assert inference["graph"] == "torchscript" and inference["validation"]["passed"] is True
    assert inference["validation"]["batch_sizes"] == [1, 2]
    assert manifest.validation["logits_max_abs_diff"] <= 1e-4
    _check_portable(info, manifest)
    assert not list(tmp_path.glob(".*partial*"))


def _check_portable(info, manifest):
    """The portable step graph: standard ops only, validated, laid out like the manifest."""
    portable = manifest.portable
    assert info.portable_error is None, info.portable_error
    assert portable["validation"]["passed"] is True
    assert portable["validation"]["grad_max_rel_diff"] <= 1e-3
    assert [slot["name"] for slot in portable["layout"]] == info.trainable
    assert portable["size"] == sum(int(np.prod(slot["shape"])) for slot in portable["layout"])
    for role in ("step_model", "forward_model"):
        proto = onnx.load(str(info.files[role]))
        opset = max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
        assert proto.ir_version <= 10 and opset <= 21, role
        assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"}, role
        assert not proto.functions, role
    assert info.files["weights"].is_file()  # the portable graphs' external data
    source = np.load(info.files["source_params"])
    assert source.dtype == np.float32 and source.shape == (portable["size"],)


# The parity suite's fast tier exports and validates resnet18_bn, convnext_atto and
# swin_small_cfg with the ImageNet preset; here their CIFAR one. vit_tiny, whose graph is the
# largest, is in the slow tier with both presets (and in the slow parity tier); the digits
# keep both.
_PRESETS_SLOW = {
    "resnet18_bn": ("imagenet",),
    "convnext_atto": ("imagenet",),
    "swin_small_cfg": ("imagenet",),
    "vit_tiny": ("cifar", "imagenet"),
}
_EXPORTS = [
    pytest.param(
        name, preset, marks=[pytest.mark.slow] if preset in _PRESETS_SLOW.get(name, ()) else []
    )
    for name in sorted(FAST)
    for preset in ("cifar", "imagenet")
]


@pytest.mark.parametrize(("name", "preset"), _EXPORTS)
def test_fast_models_export_and_validate(name, preset, tmp_path):
    make, shape, classes = FAST[name]
    torch.manual_seed(0)
    model = make()
    config = RealmConfig.preset(preset, num_classes=classes)
    info = export_realm_artifacts(
        model, tmp_path / preset, ExportOptions(config=config, input_shape=shape, training=True)
    )
    _check_artifacts(info, model, config, tmp_path)
    assert info.validation.passed
    print(f"{name}/{preset}: {info.seconds:.1f} s\n{info.validation.table()}")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_large_models_export_and_validate(name, tmp_path):
    make, shape, classes = SLOW[name]
    torch.manual_seed(0)
    model = make()
    config = RealmConfig.preset("imagenet", num_classes=classes)
    info = export_realm_artifacts(
        model, tmp_path / "a", ExportOptions(config=config, input_shape=shape, training=True)
    )
    _check_artifacts(info, model, config, tmp_path)
    print(f"{name}: {info.seconds:.1f} s\n{info.validation.table()}")


@pytest.mark.parametrize("method", ["tent", "eta"])
def test_baseline_methods_train_only_norm_parameters(method, tmp_path):
    model = DigitsGNNet().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    config = RealmConfig.preset("cifar", num_classes=10, method=method)
    options = ExportOptions(config=config, input_shape=(1, 1, 32, 32), training=True)
    info = export_realm_artifacts(model, tmp_path / method, options)
    # The model is not modified: its mode, its gradient flags, its weights.
    assert model.training
    assert all(p.requires_grad for p in model.parameters())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])
    _check_artifacts(info, model, config, tmp_path)
    assert ALPHA_NAME not in info.trainable


def test_artifacts_load_with_onnxruntime_alone(digits_model, digits_artifacts, tmp_path):
    model, (directory, _) = digits_model, digits_artifacts
    x = np.random.default_rng(0).standard_normal((1, 1, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        from onnxruntime.training.api import CheckpointState, Module
        import onnxruntime as ort
        d = {str(directory)!r}
        state = CheckpointState.load_checkpoint(d + "/checkpoint")
        module = Module(d + "/training_model.onnx", state, d + "/eval_model.onnx")
        module.train()
        x = np.load({str(tmp_path / "x.npy")!r})
        loss, logits = module(x, np.ones(1, np.float32))[:2]
        grad = state.parameters["realm.alpha"].grad
        plain = ort.InferenceSession(d + "/inference_model.onnx").run(None, {{"input": x}})[0]
        assert not any(m.startswith("realm_") for m in sys.modules), "realm code was imported"
        print(json.dumps({{"loss": float(loss), "logits": logits.tolist(),
                          "plain": plain.tolist(), "alpha_grad": float(np.asarray(grad))}}))
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    with torch.no_grad():
        expected = model.eval()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(result["logits"], expected, atol=1e-5)
    np.testing.assert_allclose(result["plain"], expected, atol=1e-5)
    assert np.isfinite(result["loss"]) and result["alpha_grad"] != 0.0


def test_manifest_describes_the_export(tmp_path):
    model = timm.create_model("resnet10t", pretrained=False, num_classes=10)
    from realm_tools.cli import main

    directory = tmp_path / "a"
    argv = ["export", "--model", "timm:resnet10t", "--num-classes", "10", "--preset", "imagenet"]
    # Through the CLI's timm path (test_export_cli.py has its other paths).
    assert main([*argv, "--input-shape", "1,3,64,64", "--out", str(directory)]) == 0
    m = load_manifest(directory)
    assert m.input.shape == ["batch", 3, 64, 64] and m.input.dtype == "float32"
    assert m.num_classes == 10 and m.config["preset_name"] == "imagenet"
    assert m.preprocessing["mean"] == list(model.pretrained_cfg["mean"])
    assert {"onnxruntime", "onnx", "opset", "ir_version", "torch", "timm"} <= set(m.versions)
    assert m.versions["onnxruntime"] == "1.19.2" and m.versions["opset"] == 17
    assert set(m.files) == {  # no training artifacts unless asked for (--training)
        "inference_model.onnx",
        "step_model.onnx",
        "forward_model.onnx",
        "source_params.npy",
        "weights.bin",
        "adapt_model.onnx",
        *(e["initial"] for e in m.adapt["state"] if e["initial"] != "source_params.npy"),
    }
    # The adapt graph's initial state: one .npy per state tensor but the parameters.
    assert len(m.adapt["state"]) == 9 and m.adapt["file"] == "adapt_model.onnx"
    # The settings' slots: the export's values, in the manifest's order.
    settings = np.load(directory / "initial_realm.settings.npy")
    assert m.adapt["settings"] == list(ADAPT_SETTINGS) and settings.shape == (len(ADAPT_SETTINGS),)
    lr = m.adapt["settings"].index("realm.lr")
    assert settings[lr] == np.float32(m.config["lr"])
    assert m.portable["step_model"] == "step_model.onnx" and m.portable["batch"] == 1
    assert m.portable["opset"] == 18 and m.portable["ir_version"] <= 10
    assert [s["name"] for s in m.portable["layout"]] == list(m.trainable)
    assert m.training == {
        "written": False,
        "reason": "not asked for (ExportOptions(training=True), realm export --training)",
    }
    slots = m.portable["layout"]
    sizes = [int(np.prod(s["shape"])) for s in slots]
    assert [s["shape"] for s in slots] == [m.trainable[s["name"]] for s in slots]
    assert [s["offset"] for s in slots] == list(np.cumsum([0, *sizes])[:-1])
    assert m.portable["size"] == sum(sizes)
    assert m.trainable[ALPHA_NAME] == [] and m.trainable["bn1.weight"] == [64]
    assert m.model["name"] == "timm:resnet10t"
    assert "layer4.0.bn1.weight" not in m.trainable  # the imagenet preset freezes layer4
    assert json.loads((tmp_path / "a" / "realm.json").read_text())["format"] == m.format


def test_tampered_or_truncated_artifacts_are_named(digits_artifacts, tmp_path):
    directory = tmp_path / "a"
    shutil.copytree(digits_artifacts[0], directory)
    ckpt = directory / "checkpoint"
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError, match=r"checkpoint.*SHA-256"):
        load_manifest(directory)
    ckpt.write_bytes(data)
    load_manifest(directory)
    (directory / "eval_model.onnx").unlink()
    with pytest.raises(ArtifactError, match=r"eval_model\.onnx.*missing"):
        load_manifest(directory)
    (directory / "realm.json").write_text('{"format": "realm-tta/artifacts", "version": 99}')
    with pytest.raises(ArtifactError, match="version 99"):
        load_manifest(directory)
    with pytest.raises(ArtifactError, match="not found"):
        load_manifest(tmp_path / "nowhere")


def test_every_digits_export_carries_its_preprocessing(digits_artifacts, digits):
    """train_digits_model describes its input like a timm model, so the tests' export (as the
    demo's and `realm export --model digits`) writes it into the manifest."""
    from realm_runtime import load_manifest

    manifest = load_manifest(digits_artifacts[0])
    assert manifest.preprocessing == {
        "input_size": [1, 32, 32],
        "mean": [digits.mean],
        "std": [digits.std],
    }


def test_the_first_export_of_a_process_frees_the_model(tmp_path):
    """After the export that first imported onnxruntime, the model can be freed.

    onnxruntime-training's import-time check keeps a traceback for good; an export that
    imported onnxruntime itself left every frame on its stack, the model in them, alive.
    """
    script = (
        "import gc, sys, weakref\n"
        "from realm_export import ExportOptions, export_realm_artifacts\n"
        "from realm_runtime import RealmConfig\n"
        "from realm_tools.models import build_model\n"
        "assert 'onnxruntime' not in sys.modules\n"
        "model, shape, classes = build_model('digits')\n"
        "config = RealmConfig.preset('cifar', num_classes=classes)\n"
        "ref = weakref.ref(model)\n"
        "options = ExportOptions(config=config, input_shape=(1, *shape))\n"
        "export_realm_artifacts(model, sys.argv[1], options)\n"
        "del model\n"
        "gc.collect()\n"
        "print('freed' if ref() is None else 'alive')\n"
    )
    last = last_line_in_a_fresh_interpreter(script, str(tmp_path / "artifacts"), timeout=600)
    assert last == "freed"
