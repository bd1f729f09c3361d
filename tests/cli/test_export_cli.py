"""``realm export``: the command line over export_realm_artifacts."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from realm_tools.cli import main
from realm_tools.models import ResNet26GN, build_model

USER_MODEL = textwrap.dedent("""
    import torch
    from torch import nn

    def build():
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LayerNorm(16), nn.Linear(16, 5),
        )

    def not_a_model():
        return 42
""")


@pytest.fixture
def user_model(tmp_path):
    path = tmp_path / "my_model.py"
    path.write_text(USER_MODEL)
    return path


def test_export_user_model_with_weights(user_model, tmp_path, capsys):
    namespace: dict = {}
    exec(USER_MODEL, namespace)
    model = namespace["build"]()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05)  # weights that differ from a fresh init
    torch.save(model.state_dict(), tmp_path / "w.pt")
    out = tmp_path / "art"
    code = main(
        [
            "export",
            "--model",
            f"{user_model}:build",
            "--num-classes",
            "5",
            "--input-shape",
            "1,3,16,16",
            "--weights",
            str(tmp_path / "w.pt"),
            "--out",
            str(out),
            "--preset",
            "cifar",
            "--training",
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "validation against the PyTorch reference (training artifacts)" in printed.out
    assert "validation against the PyTorch reference (portable step graph)" in printed.out
    assert "logits" in printed.out and "yes" in printed.out
    assert "generating training artifacts" in printed.err  # progress
    assert "building the portable step graph" in printed.err
    assert "step_model.onnx" in printed.out  # the files table
    manifest = json.loads((out / "realm.json").read_text())
    assert manifest["model"]["weights"].endswith("w.pt")
    # the exported checkpoint carries the loaded weights, not the factory's init
    from realm_runtime import training_api

    state = training_api().CheckpointState.load_checkpoint(str(out / "checkpoint"))
    got = state.parameters["1.weight"].data
    assert torch.allclose(torch.from_numpy(got), model.state_dict()["1.weight"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "timm:not_a_model_name"], "timm has no model"),
        (["--model", "nowhere.py:build"], "file not found"),
        (["--model", "{user}:missing"], "no callable 'missing'"),
        (["--model", "{user}:not_a_model"], "not a torch.nn.Module"),
        (["--model", "{user}:build", "--input-shape", "1,3,x"], "expected B,C,H,W"),
        (["--model", "{user}:build", "--weights", "missing.pt"], "missing.pt does not exist"),
        (["--model", "something"], "expected timm:<name>"),
        (["--model", "fmnist_resnet26_gn"], "fmnist_resnet26_gn has 10 classes, not 5"),
    ],
)
def test_bad_arguments_are_named(args, message, user_model, tmp_path, capsys):
    args = [a.replace("{user}", str(user_model)) for a in args]
    code = main(["export", *args, "--num-classes", "5", "--out", str(tmp_path / "o")])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_weights_that_do_not_fit_are_named(user_model, tmp_path, capsys):
    torch.save({"bogus": torch.zeros(1)}, tmp_path / "bad.pt")
    code = main(
        [
            "export",
            "--model",
            f"{user_model}:build",
            "--num-classes",
            "5",
            "--input-shape",
            "1,3,16,16",
            "--weights",
            str(tmp_path / "bad.pt"),
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert code == 2 and "does not fit the model" in capsys.readouterr().err


def test_existing_directories(user_model, tmp_path, capsys):
    """An empty one (mkdtemp's) is exported into; a full one is kept, and the message names
    the CLI's flag, not the library's argument."""
    empty = tmp_path / "empty"
    empty.mkdir()
    common = ["export", "--model", f"{user_model}:build", "--num-classes", "5"]
    assert main([*common, "--input-shape", "1,3,16,16", "--out", str(empty)]) == 0
    assert (empty / "realm.json").is_file()
    capsys.readouterr()
    assert main([*common, "--input-shape", "1,3,16,16", "--out", str(empty)]) == 1
    err = capsys.readouterr().err
    assert "exists; add --overwrite to replace it" in err and "overwrite=True" not in err


def test_help_speaks_to_users(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split()).replace("on- device", "on-device")
    assert "Export it to on-device artifacts" in out and "thin wrapper" not in out
    assert "on your own model" in out  # the product command speaks to a user of their model


HARDSWISH_MODEL = textwrap.dedent("""
    from torch import nn

    def build():
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Hardswish(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5),
        )
""")


def test_the_training_artifacts_only_with_training(tmp_path, capsys, monkeypatch):
    """Not written unless asked for; --training makes their failure the export's, and names
    the package where it is missing; --no-training is no flag."""
    import importlib.util

    path = tmp_path / "hs.py"
    path.write_text(HARDSWISH_MODEL)
    common = ["export", "--model", f"{path}:build", "--num-classes", "5"]
    common += ["--input-shape", "1,3,8,8"]
    code = main([*common, "--out", str(tmp_path / "a")])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "legacy training artifacts not asked for" in printed.out
    assert "generating training artifacts" not in printed.err
    assert not (tmp_path / "a" / "training_model.onnx").exists()
    assert (tmp_path / "a" / "adapt_model.onnx").is_file()
    code = main([*common, "--out", str(tmp_path / "b"), "--training"])
    printed = capsys.readouterr()
    assert code != 0 and not (tmp_path / "b").exists()
    assert "HardSwish" in printed.err and "Traceback" not in printed.err
    with pytest.raises(SystemExit):
        main([*common, "--out", str(tmp_path / "c"), "--no-training"])
    assert "unrecognized arguments: --no-training" in capsys.readouterr().err

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxruntime.training" else real(name, *a),
    )
    code = main([*common, "--out", str(tmp_path / "d"), "--training"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not (tmp_path / "d").exists()
    assert err == (
        "realm export: training=True (realm export --training) needs onnxruntime-training "
        "1.19.2, which exists for Python 3.11: pip install 'onnxruntime-training==1.19.2' (the "
        "'realm-tta[runtime-training]' extra), or export without the training artifacts"
    )


def test_every_method_and_preset_of_the_sdk_can_be_exported():
    from realm_runtime import METHODS, PRESETS
    from realm_tools.cli import build_parser

    for method in METHODS:
        for preset in PRESETS:
            flags = ["--model", "digits", "--out", "o", "--method", method, "--preset", preset]
            args = build_parser().parse_args(["export", *flags])
            assert (args.method, args.preset) == (method, preset)


def test_a_method_only_the_sdk_runs_is_refused_in_one_sentence(tmp_path, capsys):
    """MEMO's AugMix views have no ONNX form: the export says so and where it runs."""
    from realm_runtime.methods import BY_NAME

    sdk_only = [m for m in BY_NAME.values() if not m.exports]
    assert {m.name for m in sdk_only} == {"memo", "sft", "ttaug"}
    for rules in sdk_only:
        out = tmp_path / rules.name
        flags = ["--model", "digits", "--method", rules.name, "--cache-dir", str(tmp_path)]
        assert main(["export", *flags, "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert f"{rules.label} cannot be exported" in err and "realm_sdk.RealmAdapter" in err
        assert "Traceback" not in err and not out.exists()


def test_a_shipped_model_is_named_as_the_registry_names_it():
    from realm_tools.models import model_from_spec

    model, info = model_from_spec("fmnist_resnet26_gn", 10, ".cache")
    assert info == {"name": "fmnist_resnet26_gn"}
    shipped, _, _ = build_model("fmnist_resnet26_gn")
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), shipped.state_dict().values(), strict=True)
    )
    assert not all(
        torch.equal(a, b)
        for a, b in zip(
            model.state_dict().values(), ResNet26GN().state_dict().values(), strict=True
        )
    )  # the shipped weights, not an init


def test_eata_exports_with_clean_images_and_says_what_to_pass_without(tmp_path, capsys):
    """``--clean-images`` feeds EATA's Fisher; without it (or --drift-check) one sentence."""
    import numpy as np

    images = np.random.default_rng(0).normal(size=(40, 1, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "clean.npz", images=images)
    base = ["export", "--model", "digits", "--method", "eata", "--cache-dir", str(tmp_path)]
    assert main([*base, "--out", str(tmp_path / "a")]) == 1
    err = capsys.readouterr().err
    assert "EATA needs the Fisher information" in err and "--clean-images" in err
    assert not (tmp_path / "a").exists()
    code = main(
        [*base, "--out", str(tmp_path / "b"), "--clean-images", str(tmp_path / "clean.npz")]
    )
    assert code == 0
    manifest = json.loads((tmp_path / "b" / "realm.json").read_text())
    assert (
        manifest["config"]["method"] == "eata" and manifest["config"]["eata"]["fisher_alpha"] == 1.0
    )
