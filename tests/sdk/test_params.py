"""SPEC §1: which parameters adapt, on real timm architectures (random init)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from realm_sdk import (
    RealmAdapter,
    RealmConfig,
    batch_norm_names,
    has_batch_norm,
    last_block_patterns,
    norm_affine_names,
    select_trainable,
)

timm = pytest.importorskip("timm")

# Expected counts, derived from each architecture's definition (not from the code under test):
# - resnet50_gn: stem norm + 16 bottlenecks × 3 norms + 4 downsample norms = 53 GroupNorms,
#   ×2 (weight, bias) = 106; layer4 holds 3 bottlenecks × 3 + 1 downsample = 10 → 20 frozen.
# - resnet18 (BatchNorm): 1 + 8 basic blocks × 2 + 3 downsample = 20 BNs → 40; layer4: 2×2 + 1
#   = 5 → 10 frozen.
# - vit_tiny_patch16_224: 12 blocks × 2 LayerNorms + final norm = 25 → 50; blocks 9-11
#   (6 norms) + final norm → 14 frozen.
# - convnext_atto: stem LN + 3 downsample LNs + (2+2+6+2) block LNs + head norm = 17 → 34;
#   stage 3 (downsample + 2 blocks) + head.norm = 4 → 8 frozen.
# - swin_tiny_patch4_window7_224: patch-embed LN + (2+2+6+2) blocks × 2 LNs + 3 patch-merging
#   LNs + final norm = 29 → 58; layer 3 (merging LN + 2 blocks × 2) + final norm = 6 → 12.
CASES = {
    "resnet50_gn": (106, 20, "layer1.0.bn1.weight", "layer4.2.bn3.bias", nn.GroupNorm),
    "resnet18": (40, 10, "layer1.0.bn1.weight", "layer4.1.bn2.bias", nn.BatchNorm2d),
    "vit_tiny_patch16_224": (50, 14, "blocks.0.norm1.weight", "blocks.9.norm2.bias", nn.LayerNorm),
    "convnext_atto": (34, 8, "stem.1.weight", "head.norm.bias", nn.LayerNorm),
    "swin_tiny_patch4_window7_224": (
        58,
        12,
        "patch_embed.norm.weight",
        "norm.weight",
        nn.LayerNorm,
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def timm_model(request):
    return request.param, timm.create_model(request.param, pretrained=False, num_classes=10)


def test_norm_affine_counts_and_names(timm_model):
    name, model = timm_model
    total, _, kept, frozen_name, norm_type = CASES[name]
    names = norm_affine_names(model)
    assert len(names) == total
    assert kept in names and frozen_name in names
    modules = dict(model.named_modules())
    for n in names:
        owner = modules[n.rsplit(".", 1)[0]]
        assert isinstance(owner, norm_type), n
        assert n.endswith((".weight", ".bias"))
    # Nothing that is not a norm layer's affine parameter slips in.
    non_norm = [n for n, _ in model.named_parameters() if n not in names]
    assert any("conv" in n or "qkv" in n or "fc" in n or "mlp" in n for n in non_norm)
    owners = [modules.get(n.rsplit(".", 1)[0]) if "." in n else model for n in non_norm]
    assert not any(isinstance(o, norm_type) for o in owners)


def test_imagenet_preset_freezes_the_last_block(timm_model):
    name, model = timm_model
    total, frozen_count, kept, frozen_name, _ = CASES[name]
    selected = select_trainable(model, freeze_last_block=True)
    assert len(selected) == total - frozen_count
    assert kept in selected and frozen_name not in selected
    # Freezing is by prefix patterns of the last block only: earlier blocks all adapt.
    assert last_block_patterns(model)


def test_adapter_configures_requires_grad(timm_model):
    _, model = timm_model
    adapter = RealmAdapter(model, RealmConfig.preset("imagenet", num_classes=10))
    grads = {n for n, p in model.named_parameters() if p.requires_grad}
    assert grads == set(adapter.trainable_names)
    assert not model.training
    assert set(adapter.trainable_parameters()) == grads


def test_user_frozen_patterns_apply():
    model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    selected = select_trainable(model, [r"layer[12]\."])
    assert not any(n.startswith(("layer1.", "layer2.")) for n in selected)
    assert "layer3.0.bn1.weight" in selected and "bn1.weight" in selected


def test_model_without_norm_layers_is_refused():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(10))
    with pytest.raises(ValueError, match="no normalisation layer"):
        RealmAdapter(model, RealmConfig.preset("cifar", num_classes=10))


def test_everything_frozen_is_refused():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    with pytest.raises(ValueError, match="nothing is left to adapt"):
        select_trainable(model, [r"1\."])


def test_invalid_pattern_is_named():
    with pytest.raises(ValueError, match="not a valid regex"):
        select_trainable(nn.Sequential(nn.LayerNorm(4)), ["(unclosed"])


def test_unknown_layout_cannot_freeze_last_block():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    with pytest.raises(ValueError, match="cannot tell the last block"):
        select_trainable(model, freeze_last_block=True)


def test_non_affine_norms_contribute_nothing():
    model = nn.Sequential(
        nn.LayerNorm(4, elementwise_affine=False),
        nn.GroupNorm(2, 4),
        nn.BatchNorm1d(4, affine=False),
    )
    assert norm_affine_names(model) == ["1.weight", "1.bias"]


def test_timm_norm_subclasses_are_found():
    from timm.layers import BatchNormAct2d, GroupNorm1, LayerNorm2d, RmsNorm

    model = nn.Sequential(BatchNormAct2d(4), GroupNorm1(4), LayerNorm2d(4), RmsNorm(4))
    assert norm_affine_names(model) == [
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "2.weight",
        "2.bias",
        "3.weight",
    ]
    assert torch.is_tensor(dict(model.named_parameters())["3.weight"])


def test_batch_norm_names_are_the_ones_with_running_statistics():
    from timm.layers import BatchNormAct2d

    model = nn.Sequential(
        nn.BatchNorm2d(4),
        nn.GroupNorm(2, 4),
        BatchNormAct2d(4),
        nn.BatchNorm2d(4, track_running_stats=False),  # normalises each batch, as GroupNorm
        nn.LayerNorm(4),
    )
    names = norm_affine_names(model)
    assert batch_norm_names(model, names) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert batch_norm_names(model, ["2.bias", "1.weight", "0.weight"]) == ["2.bias", "0.weight"]
    assert has_batch_norm(model)
    assert not has_batch_norm(nn.Sequential(*model[1:2], *model[3:]))


def test_the_mixed_digits_model_has_both_families():
    from realm_tools.models import DigitsGNNet

    model = DigitsGNNet(batch_norm_stages=1)
    names = norm_affine_names(model)
    assert len(names) == 16
    # the stem and stage 0's two blocks: three BatchNorms, six tensors; the rest GroupNorm
    assert batch_norm_names(model, names) == names[:6]
    assert names[:6] == [
        "stem.1.weight",
        "stem.1.bias",
        "stages.0.0.1.weight",
        "stages.0.0.1.bias",
        "stages.0.1.1.weight",
        "stages.0.1.1.bias",
    ]


def test_digits_model_adapts_its_eight_groupnorms():
    from realm_tools.models import DigitsGNNet

    # stem + stages of 2, 2, 2 and 1 conv blocks, each conv followed by a GroupNorm: 8 layers.
    names = norm_affine_names(DigitsGNNet())
    assert len(names) == 16
    assert names[:2] == ["stem.1.weight", "stem.1.bias"]
    assert names[-1] == "stages.3.0.1.bias"
