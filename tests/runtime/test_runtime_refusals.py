"""What RealmRuntime refuses before it runs, each in one sentence that names the file or the
argument: tampered, edited or missing artifacts, a manifest or graph of another version, bad
constructor arguments, CUDA without the GPU build, and the legacy backend on an export without
its training artifacts.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from helpers import edit_manifest, export_digits, has_cuda

from realm_runtime import ArtifactError, RealmRuntime


def test_artifact_problems_are_named(digits_artifacts, tmp_path):
    src = digits_artifacts[0]
    bad = tmp_path / "copy"
    shutil.copytree(src, bad)
    with open(bad / "training_model.onnx", "ab") as handle:
        handle.write(b"tampered")
    with pytest.raises(ArtifactError, match=r"training_model\.onnx.*SHA-256"):
        RealmRuntime(bad)
    shutil.rmtree(bad)
    shutil.copytree(src, bad)
    with open(bad / "step_model.onnx", "r+b") as handle:  # the portable graph is listed too
        handle.seek(100)
        handle.write(b"\x00")
    with pytest.raises(ArtifactError, match=r"step_model\.onnx.*SHA-256"):
        RealmRuntime(bad)
    shutil.rmtree(bad)
    shutil.copytree(src, bad)
    manifest = json.loads((bad / "realm.json").read_text())
    manifest["versions"]["onnxruntime"] = "1.18.0"
    (bad / "realm.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match=r"realm\.json: its bytes do not hash to its own"):
        RealmRuntime(bad)  # an edit, not re-sealed
    shutil.rmtree(bad)
    shutil.copytree(src, bad)
    edit_manifest(bad, lambda m: m["versions"].update(onnxruntime="1.18.0"))
    # Training checkpoints load in their own ORT version only; the portable graph in any.
    with pytest.raises(ArtifactError, match=r"exported with onnxruntime 1\.18\.0"):
        RealmRuntime(bad, backend="ort-training")
    assert RealmRuntime(bad).backend == "onnx"
    (bad / "realm.json").write_text("{ truncated")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        RealmRuntime(bad)
    with pytest.raises(ArtifactError, match="not found"):
        RealmRuntime(tmp_path / "nothing-here")


def test_bad_constructor_arguments(digits_artifacts):
    with pytest.raises(ValueError, match="device"):
        RealmRuntime(digits_artifacts[0], device="tpu")
    with pytest.raises(ValueError, match="schedule"):
        RealmRuntime(digits_artifacts[0], schedule="sometimes")
    with pytest.raises(ValueError, match="threads"):
        RealmRuntime(digits_artifacts[0], threads=0)


@pytest.mark.skipif(has_cuda(), reason="this onnxruntime has CUDA; the error path is moot")
def test_cuda_without_the_gpu_build_says_what_to_install(digits_artifacts):
    with pytest.raises(RuntimeError, match=r"onnxruntime-gpu"):
        RealmRuntime(digits_artifacts[0], device="cuda")
    with pytest.raises(RuntimeError, match=r"onnxruntime-training==1\.19\.2"):
        RealmRuntime(digits_artifacts[0], device="cuda", backend="ort-training")


def _drop_lr_batch_norm_slot(data: dict) -> None:
    data["adapt"]["settings"].remove("realm.lr_batch_norm")


def _settings_as_constants(data: dict) -> None:
    data["adapt"].pop("settings")
    data["adapt"]["state"] = [e for e in data["adapt"]["state"] if e["input"] != "realm.settings"]


# A manifest or graph of another version, each edit re-sealed: (edit, what the sentence names).
FOREIGN = {
    "no batch_norm list": (
        lambda data: data.pop("batch_norm"),
        r"missing fields \['batch_norm'\]: not a manifest of this realm-tta's export",
    ),
    "a settings slot missing": (
        _drop_lr_batch_norm_slot,
        r"the adapt graph is not this realm-tta's \(adapt\.settings lacks "
        r"\['realm\.lr_batch_norm'\] and has \[\]\)",
    ),
    "settings as constants": (
        _settings_as_constants,
        r"the adapt graph is not this realm-tta's \(adapt\.settings is missing or not a list\)",
    ),
    "slots in another order": (
        lambda data: data["adapt"]["settings"].reverse(),
        r"adapt\.settings lists the settings in another order",
    ),
    "another version": (
        lambda data: data.update(version=1),
        r"artifact format version 1 is not supported \(this realm-tta reads version 2\)",
    ),
}


@pytest.mark.parametrize("case", list(FOREIGN))
def test_a_manifest_of_another_version_is_refused_in_one_sentence(case, digits_artifacts, tmp_path):
    """Every backend refuses it before any graph is read: the file, what is wrong, re-export."""
    edit, named = FOREIGN[case]
    directory = tmp_path / "a"
    shutil.copytree(digits_artifacts[0], directory)
    edit_manifest(directory, edit)
    for backend in ("auto", "onnx", "onnx-steps", "ort-training"):
        with pytest.raises(ArtifactError) as caught:
            RealmRuntime(directory, threads=1, backend=backend)
        message = str(caught.value)
        assert message.startswith(f"{directory / 'realm.json'}: "), message
        assert re.search(named, message) and "re-export the model" in message, message
        assert "\n" not in message


def test_ort_training_without_the_training_artifacts_says_to_re_export(digits_model, tmp_path):
    """An export not asked for them: the legacy backend names the flag, the default runs."""
    export_digits(digits_model, tmp_path / "a")
    assert not (tmp_path / "a" / "training_model.onnx").exists()
    with pytest.raises(ArtifactError) as caught:
        RealmRuntime(tmp_path / "a", backend="ort-training")
    message = str(caught.value)
    assert "this export has no training artifacts" in message and "\n" not in message
    assert "realm export --training" in message and "ExportOptions(training=True)" in message
    assert RealmRuntime(tmp_path / "a").backend == "onnx"
