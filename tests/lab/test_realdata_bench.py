"""The quality benchmark and its command on small CIFAR-10-C and ImageNet-C folders."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from realm_lab.bench import bench_quality, quality_table, runs_from_json, runs_to_json
from realm_runtime import Guardrails
from realm_tools.data import load_cifar10c, load_imagenetc
from realm_tools.models import source_model

# ---------------------------------------------------------------------------- benchmark


class _TinyGN(nn.Module):
    """Three classes, one GroupNorm: enough to adapt on 224-pixel inputs in milliseconds."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 8, stride=8)
        self.norm = nn.GroupNorm(2, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.norm(self.conv(x))).mean(dim=(2, 3)))


def test_bench_quality_streams_lazy_imagenetc_and_has_no_forgetting(imagenet_root):
    torch.manual_seed(0)
    ds = load_imagenetc(imagenet_root)
    runs = bench_quality(
        corruptions=["fog"], seeds=[0, 1], methods=["none", "tent"], dataset=ds, source=_TinyGN()
    )
    assert [(r.method, r.seed) for r in runs] == [(m, s) for s in (0, 1) for m in ("none", "tent")]
    for r in runs:
        assert r.clean_after is None and 0 <= r.accuracy <= 100 and len(r.online_accuracy) == 6
    assert runs[0].updates == 0 and 0 < runs[1].updates <= 6
    table = quality_table(runs)
    assert "clean after" not in table and "| corruption | no-adapt | Tent |" in table
    assert "| fog | " in table and "| average | " in table
    back = runs_from_json(runs_to_json(runs, {}))
    assert [r.clean_after for r in back] == [None] * 4
    assert [r.accuracy for r in back] == [r.accuracy for r in runs]
    with pytest.raises(ValueError, match="needs its source model"):
        bench_quality(corruptions=["fog"], dataset=ds)
    with pytest.raises(ValueError, match=r"unknown corruptions \['snow'\] for imagenetc"):
        bench_quality(corruptions=["snow"], dataset=ds, source=_TinyGN())


def test_source_model_loads_checks_and_refuses_weights(tmp_path):
    import timm

    torch.manual_seed(1)
    trained = timm.create_model("resnet18", num_classes=10)
    path = tmp_path / "w.pth"
    torch.save({"state_dict": trained.state_dict()}, path)  # a wrapped checkpoint
    model = source_model("resnet18", num_classes=10, weights=path)
    assert not model.training
    torch.testing.assert_close(model.fc.weight, trained.fc.weight)
    with pytest.raises(FileNotFoundError, match=r"weights file .*nope\.pth does not exist"):
        source_model("resnet18", num_classes=10, weights=tmp_path / "nope.pth")
    with pytest.raises(ValueError, match=r"fc.weight: file \(10, 512\) vs model \(100, 512\)"):
        source_model("resnet18", num_classes=100, weights=path)
    torch.save({"conv1.weight": trained.conv1.weight, "extra": torch.zeros(1)}, path)
    with pytest.raises(ValueError, match=r"missing keys .*1 unexpected keys \['extra'\]"):
        source_model("resnet18", num_classes=10, weights=path)
    path.write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a readable torch state_dict file"):
        source_model("resnet18", num_classes=10, weights=path)


def test_cli_quality_on_cifar10c_fixture(cifar_root, tmp_path, capsys):
    from realm_lab.cli import main

    out = tmp_path / "q"
    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root)]
    argv += ["--model", "resnet18", "--random-init", "--methods", "none", "tent", "realm"]
    argv += ["--seeds", "0", "--limit", "8", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert "meaningless" in capsys.readouterr().err
    data = json.loads((out / "quality.json").read_text())
    assert data["settings"]["dataset"] == "cifar10c" and data["settings"]["preset"] == "cifar"
    assert data["settings"]["model"] == "resnet18" and data["settings"]["random_init"] is True
    runs = data["runs"]
    assert [(r["corruption"], r["method"]) for r in runs] == [
        (c, m) for c in ("gaussian_noise", "fog") for m in ("none", "tent", "realm")
    ]
    for r in runs:
        assert r["clean_after"] is None and r["severity"] == 5 and r["seed"] == 0
        assert 0 <= r["accuracy"] <= 100 and len(r["online_accuracy"]) == 8
        assert r["updates"] <= 8
    assert [len(r["alpha"]) for r in runs if r["method"] == "realm"] == [8, 8]
    table = (out / "quality.md").read_text()
    assert "| REALM |" in table and "clean after" not in table
    assert (out / "online_accuracy.png").is_file() and (out / "alpha_lambda.png").is_file()


def test_cli_streams_on_data_without_a_clean_split_leave_junk_out(cifar_root, tmp_path, capsys):
    from realm_lab.cli import main

    out = tmp_path / "s"
    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root)]
    argv += ["--model", "resnet18", "--random-init", "--methods", "none", "realm"]
    argv += ["--settings", "all", "--seeds", "0", "--limit", "6", "--passes", "1"]
    argv += ["--horizon", "24", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    assert "no clean split: the junk streams are left out" in capsys.readouterr().out
    data = json.loads((out / "streams.json").read_text())
    assert data["settings"]["settings"] == ["episodic", "continual", "mixed", "gradual",
                                            "correlated", "long"]  # fmt: skip
    assert {r["setting"] for r in data["runs"]} == set(data["settings"]["settings"])
    assert all(r["clean_after"] is None for r in data["runs"])
    # Named explicitly, a junk stream is refused before anything runs.
    argv[argv.index("all")] = "junk-noise"
    assert main(argv) == 2
    assert "junk-noise need clean images of cifar10c" in capsys.readouterr().err


def test_cli_streams_keep_finished_runs_and_go_on(cifar_root, tmp_path, capsys):
    from realm_lab.cli import main

    out = tmp_path / "s"
    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root)]
    argv += ["--model", "resnet18", "--random-init", "--methods", "none", "realm"]
    argv += ["--settings", "continual", "--seeds", "0", "--limit", "4", "--passes", "1"]
    argv += ["--out", str(out), "--no-progress"]
    assert main(argv) == 0
    log = (out / "runs.jsonl").read_text().splitlines()  # kept: more seeds add to these
    assert len(log) == 3 and all(json.loads(line)["run"]["seconds"] > 0 for line in log[1:])
    data = json.loads((out / "streams.json").read_text())
    assert len(data["settings"]["source_sha256"]) == 64 and len(data["settings"]["cpus"]) == 1
    # A run log another benchmark left there is refused, not mixed in; --fresh starts over.
    (out / "runs.jsonl").write_text('{"fingerprint": {"dataset": "digits"}}\n')
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "holds runs of another benchmark" in err and "--fresh" in err
    assert main([*argv, "--fresh"]) == 0
    assert len((out / "runs.jsonl").read_text().splitlines()) == 3
    again = json.loads((out / "streams.json").read_text())["runs"]
    timeless = [{k: v for k, v in r.items() if k != "seconds"} for r in again]
    assert timeless == [{k: v for k, v in r.items() if k != "seconds"} for r in data["runs"]]


def test_cli_streams_count_only_the_runs_they_reused(cifar_root, tmp_path, capsys):
    from realm_lab.cli import main

    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root)]
    argv += ["--model", "resnet18", "--random-init", "--methods", "none", "realm"]
    argv += ["--settings", "continual", "--seeds", "0", "--limit", "4", "--passes", "1"]
    argv += ["--out", str(tmp_path / "s"), "--no-progress"]
    assert main(argv) == 0
    # The page names the CPU its runs were made on, where they came from another machine.
    log = tmp_path / "s" / "runs.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    lines[1:] = [{**line, "cpu": "Another CPU (family 99)"} for line in lines[1:]]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(argv) == 0
    assert "; 2 runs came from an earlier invocation" in capsys.readouterr().out
    page = (tmp_path / "s" / "streams.md").read_text()
    assert "core-minutes (one torch thread each), on Another CPU (family 99)." in page
    # Another configuration of REALM's row: that run is done again, no-adapt's is reused.
    assert main([*argv, "--set", "lr=0.004"]) == 0
    said = capsys.readouterr().out
    assert "2 runs kept there" in said and "; 1 runs came from an earlier invocation" in said


def test_cli_streams_record_a_changed_guardrail(cifar_root, tmp_path):
    from realm_lab.cli import main

    out = tmp_path / "s"
    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root)]
    argv += ["--model", "resnet18", "--random-init", "--methods", "realm-guarded"]
    argv += ["--settings", "continual", "--seeds", "0", "--limit", "4", "--passes", "1"]
    argv += ["--set", "guardrails.max_drift=0.01", "guardrails.anchor=none"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    recorded = json.loads((out / "streams.json").read_text())["settings"]["overrides"]
    assert recorded["guardrails"]["max_drift"] == 0.01 and recorded["guardrails"]["anchor"] is None
    assert recorded["guardrails"]["relax"] == Guardrails().relax  # the rest: the defaults


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "resnet18"], "needs --weights"),
        (["--model", "resnet18", "--weights", "missing.pth"], "missing.pth does not exist"),
        (["--random-init"], "--dataset cifar10c needs --model"),
        (["--model", "resnet18", "--random-init", "--corruptions", "snow"],
         "unknown corruptions ['snow']"),
        (["--model", "resnet18", "--random-init", "--epochs", "3"],
         "--epochs trains the digits source model"),
        (["--model", "resnet18", "--random-init", "--limit", "0"], "--limit must be ≥ 1"),
        (["--model", "resnet18", "--random-init", "--classes", "wnids.txt"],
         "--classes is for --dataset imagenetc"),
    ],
)  # fmt: skip
def test_cli_quality_refuses_incomplete_real_data_runs(cifar_root, capsys, extra, message):
    from realm_lab.cli import main

    argv = ["bench", "quality", "--dataset", "cifar10c", "--data-root", str(cifar_root), *extra]
    assert main([*argv, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_cli_quality_refuses_real_data_flags_on_digits(capsys):
    from realm_lab.cli import main

    assert main(["bench", "quality", "--data-root", "x"]) == 2
    assert "are for --dataset fmnist-c, cifar10c or imagenetc" in capsys.readouterr().err


@pytest.mark.slow
def test_runtime_method_exports_at_the_dataset_input_shape(cifar_root):
    # realm-runtime exports the source at (1, 3, 32, 32) for CIFAR-10-C and follows REALM.
    torch.manual_seed(0)
    runs = bench_quality(
        corruptions=["fog"],
        seeds=[0],
        methods=["realm", "realm-runtime"],
        limit=8,
        dataset=load_cifar10c(cifar_root),
        source=source_model("resnet18", num_classes=10),
    )
    reference, runtime = runs
    assert runtime.method == "realm-runtime" and runtime.clean_after is None
    assert runtime.accuracy == reference.accuracy and runtime.updates == reference.updates
    np.testing.assert_allclose(runtime.alpha, reference.alpha, atol=1e-5)
