"""The norm layers REALM adapts and the ones it leaves: the last block, taken from timm's own
stage groups (``group_matcher``, or ``feature_info``) for every model timm built, an explicit
error for a module timm did not build, and ResMLP's affine-only norms among the adapted ones.
"""

from __future__ import annotations

import re

import pytest
from torch import nn

from realm_sdk import RealmAdapter, RealmConfig, last_block_patterns, norm_affine_names

timm = pytest.importorskip("timm")


@pytest.mark.parametrize(
    ("name", "first", "last"),
    [
        ("regnetx_002", "s4.", "s4."),
        ("densenet121", "features.denseblock4.", "features.norm5."),
        ("inception_v3", "Mixed_7a.", "Mixed_7c."),
        ("vgg11_bn", "features.23.", "features.26."),
        ("resnet18", "layer4.", "layer4."),
        ("vit_tiny_patch16_224", "blocks.9.", "norm."),
        ("levit_128s", "stages.2.", "head_dist."),
        ("pit_ti_224", "transformers.2.", "norm."),  # feature_info: no group_matcher
    ],
)
def test_the_last_block_comes_from_timms_stage_groups(name, first, last):
    """timm's own grouping (``group_matcher``) for every model it built: the last stage and
    the norms after it, or the last quarter of an isotropic stack."""
    model = timm.create_model(name, pretrained=False, num_classes=10)
    patterns = last_block_patterns(model)
    frozen = [n for n in norm_affine_names(model) if any(re.match(p, n) for p in patterns)]
    assert frozen and frozen[0].startswith(first) and frozen[-1].startswith(last), frozen
    adapted = RealmAdapter(model, RealmConfig.preset("imagenet", num_classes=10)).trainable_names
    assert adapted and not set(adapted) & set(frozen)


def test_a_module_timm_did_not_build_still_gets_the_explicit_error():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.LazyLinear(5))
    with pytest.raises(ValueError, match=r"stage metadata.*RealmConfig\.frozen"):
        last_block_patterns(model)


def test_resmlp_affine_layers_adapt():
    """ResMLP's Affine stands where LayerNorm would: its alpha and beta adapt."""
    model = timm.create_model("resmlp_12_224", pretrained=False, num_classes=10)
    names = norm_affine_names(model)
    assert "blocks.0.norm1.alpha" in names and "norm.beta" in names
    assert not [n for n in names if not n.endswith((".alpha", ".beta"))]
