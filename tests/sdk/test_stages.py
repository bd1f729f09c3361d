"""``adapt_stages``: only the norms of the last K stages adapt; the rest stay at the source."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from realm_export import ExportOptions, export_realm_artifacts
from realm_runtime import RealmConfig, RealmRuntime
from realm_sdk import RealmAdapter, norm_affine_names, select_trainable

timm = pytest.importorskip("timm")


def _norm_names_under(model: nn.Module, prefixes: tuple[str, ...]) -> list[str]:
    """The norm affine names whose module path starts with one of ``prefixes``, read from the
    modules themselves (not from the code under test's stage reading)."""
    return [n for n in norm_affine_names(model) if n.startswith(prefixes)]


@pytest.mark.parametrize(
    ("name", "count", "prefixes"),
    [
        # torchvision-style ResNet: the stages are layer1…layer4, nothing with norms after.
        ("resnet18", 1, ("layer4.",)),
        ("resnet18", 2, ("layer3.", "layer4.")),
        # an isotropic ViT: timm groups it block by block; the final norm comes after them.
        ("vit_tiny_patch16_224", 2, ("blocks.10.", "blocks.11.", "norm.")),
        # ConvNeXt: stages.3 holds its downsample norm; the head's norm comes after.
        ("convnext_atto", 1, ("stages.3.", "head.norm.")),
    ],
)
def test_the_last_k_stages_and_what_follows_them_adapt(name, count, prefixes):
    model = timm.create_model(name, pretrained=False, num_classes=10)
    selected = select_trainable(model, adapt_stages=count)
    assert selected == _norm_names_under(model, prefixes)
    assert len(selected) < len(norm_affine_names(model))


def test_a_plain_module_is_read_by_its_attributes():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.BatchNorm2d(2)
            self.layers = nn.ModuleList(nn.GroupNorm(1, 2) for _ in range(3))
            self.norm = nn.LayerNorm(2)

    net = Net()
    assert select_trainable(net, adapt_stages=1) == [
        "layers.2.weight",
        "layers.2.bias",
        "norm.weight",
        "norm.bias",
    ]


def test_bad_stage_counts_are_one_sentence():
    model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    with pytest.raises(ValueError, match=r"adapt_stages=5, but ResNet has 4 stages"):
        select_trainable(model, adapt_stages=5)
    with pytest.raises(ValueError, match=r"by freeze_last_block=True and adapt_stages=1: nothing"):
        select_trainable(model, freeze_last_block=True, adapt_stages=1)
    with pytest.raises(ValueError, match="cannot tell the stages of Sequential"):
        select_trainable(nn.Sequential(nn.Linear(2, 2), nn.LayerNorm(2)), adapt_stages=1)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="adapt_stages must be an integer ≥ 1 or None"):
            RealmConfig(num_classes=10, adapt_stages=bad)  # type: ignore[arg-type]


def test_the_runtime_adapts_the_same_stages_and_leaves_the_rest_at_the_source(tmp_path):
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10, in_chans=1).eval()
    # the rate raised so that six steps move a random-init model's norms well above float32's
    # noise: BatchNorm's own (lr_batch_norm), as resnet18's norms are all BatchNorm
    config = RealmConfig.preset(
        "cifar", num_classes=10, adapt_stages=1, diversity_margin=1.0, lr_batch_norm=0.5
    )
    info = export_realm_artifacts(
        model, tmp_path / "k1", ExportOptions(config=config, input_shape=(1, 1, 32, 32))
    )
    assert info.portable_validation.passed
    runtime = RealmRuntime(tmp_path / "k1")
    sdk = RealmAdapter(model, config)
    assert runtime.trainable_names == sdk.trainable_names == _norm_names_under(model, ("layer4.",))
    source = {n: p.detach().clone() for n, p in model.named_parameters()}
    xs = np.random.default_rng(0).standard_normal((6, 1, 1, 32, 32)).astype(np.float32)
    for x in xs:
        a, b = runtime.adapt(x), sdk.adapt(torch.from_numpy(x))
        assert a.updated == b.updated
        np.testing.assert_allclose(a.logits, b.logits.numpy(), rtol=1e-4, atol=1e-4)
    assert runtime.state.updates > 0
    mine, theirs = runtime.trainable_parameters(), sdk.trainable_parameters()
    moved = {n: (theirs[n] - source[n]).numpy() for n in sdk.trainable_names}
    scale = max(float(np.abs(d).max()) for d in moved.values())
    assert scale > 1e-4  # the stages adapted
    for n in sdk.trainable_names:  # the runtime's update is the SDK's, to 1e-3 of its size
        gap = np.abs((mine[n] - source[n].numpy()) - moved[n]).max()
        assert gap <= 1e-3 * scale, (n, gap, scale)
    for n, p in model.named_parameters():
        if n not in sdk.trainable_names:
            assert torch.equal(p.detach(), source[n]), n  # the rest stayed at the source
