"""The architectures ``realm coverage`` measures, their families and the input size each takes."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the worker imports these where it needs them
    from torch import nn

# name → family, the table's grouping. The first 40 are the list users asked for; the others cover
# every other timm family with an edge or mobile variant, at its smallest size.
COVERAGE_MODELS: dict[str, str] = {
    "mobilenetv3_small_100": "mobilenet",
    "mobilenetv3_large_100": "mobilenet",
    "mobilenetv4_hybrid_medium": "mobilenet",
    "efficientnet_b0": "efficientnet",
    "tf_efficientnetv2_b0": "efficientnet",
    "lcnet_050": "lcnet",
    "resnet18": "resnet",
    "resnet50": "resnet",
    "resnet18d": "resnet",
    "repvit_m0_9": "repvit",
    "fastvit_t8": "fastvit",
    "edgenext_xx_small": "edgenext",
    "mobilevit_xxs": "mobilevit",
    "mobilevitv2_050": "mobilevit",
    "levit_128s": "levit",
    "deit_tiny_patch16_224": "vit",
    "vit_small_patch16_224": "vit",
    "tiny_vit_5m_224": "tinyvit",
    "poolformer_s12": "metaformer",
    "convnextv2_atto": "convnext",
    "swin_tiny_patch4_window7_224": "swin",
    "cs3darknet_s": "cspnet",
    "mobilenetv2_100": "mobilenet",
    "efficientnet_lite0": "efficientnet",
    "mnasnet_100": "mnasnet",
    "mobileone_s0": "mobileone",
    "mobilenetv4_conv_small": "mobilenet",
    "efficientformer_l1": "efficientformer",
    "efficientvit_b0": "efficientvit",
    "efficientformerv2_s0": "efficientformer",
    "ghostnet_100": "ghostnet",
    "regnetx_002": "regnet",
    "regnety_002": "regnet",
    "densenet121": "densenet",
    "vgg11_bn": "vgg",
    "dla34": "dla",
    "hrnet_w18_small": "hrnet",
    "inception_v3": "inception",
    "nf_resnet26": "nfnet",  # no norm layer: refused by design
    "resmlp_12_224": "mlp",
    # the other edge and mobile families (and smaller variants of some above)
    "mobilenetv1_100": "mobilenet",
    "mobilenetv4_conv_medium": "mobilenet",
    "tf_mobilenetv3_small_minimal_100": "mobilenet",  # no SE, no hard-swish: accelerators
    "tinynet_a": "efficientnet",
    "efficientnet_es": "efficientnet",  # EfficientNet-EdgeTPU
    "fbnetc_100": "fbnet",
    "spnasnet_100": "nas",
    "semnasnet_100": "mnasnet",
    "mixnet_s": "mixnet",
    "hardcorenas_a": "nas",
    "ghostnetv2_100": "ghostnet",
    "repghostnet_050": "ghostnet",
    "efficientvit_m0": "efficientvit",
    "resnet10t": "resnet",
    "repvgg_a0": "repvgg",
    "convnext_atto": "convnext",
    "convnext_zepto_rms": "convnext",  # RMSNorm
    "rexnet_100": "rexnet",
    "hgnetv2_b0": "hgnet",
    "ese_vovnet19b_slim_dw": "vovnet",
    "cspnext_tiny": "cspnet",
    "lcnetv2_small": "lcnet",
    "pvt_v2_b0": "pvt",
    "xcit_nano_12_p16_224": "xcit",
    "pit_ti_224": "pit",
    "coat_lite_tiny": "coat",
    "mambaout_femto": "mambaout",
    "inception_next_atto": "inception",
    "starnet_s050": "starnet",
    "fasternet_t0": "fasternet",
    "shvit_s1": "shvit",
    "iformer_t": "iformer",
    "swiftformer_xs": "swiftformer",
    "efficientvim_m1": "efficientvim",
    "cpubone_nano": "cpubone",
    "fastvit_mci0": "fastvit",  # MobileCLIP's image tower
    "lowformer_b0": "lowformer",
    "visformer_tiny": "visformer",  # BatchNorm in its attention stages; ill-conditioned at init
}

COVERAGE_CLASSES = 100  # the head every model is built with
COVERAGE_PRESET = "imagenet"


def family_of(name: str) -> str:
    """The family label of a model: :data:`COVERAGE_MODELS`' or its name's leading letters."""
    if name in COVERAGE_MODELS:
        return COVERAGE_MODELS[name]
    match = re.match(r"[a-z]+", name)
    return match.group(0) if match else name


def coverage_input_size(model: nn.Module, image_size: int) -> tuple[int, int, int]:
    """(C, H, W) a model runs at: its own where its ``pretrained_cfg`` fixes it, else N px.

    Transformers with absolute position embeddings or fixed windows (ViT, DeiT, Swin, LeViT,
    ...) declare ``fixed_input_size``; convolutional models take any size.
    """
    import torch

    cfg = getattr(model, "pretrained_cfg", None) or {}
    own = tuple(int(d) for d in cfg.get("input_size", (3, image_size, image_size)))
    if cfg.get("fixed_input_size"):
        return own  # type: ignore[return-value]
    asked = (own[0], image_size, image_size)
    try:  # some fix their size without saying so (EfficientFormerV2's attention biases)
        with torch.no_grad():
            model.eval()(torch.zeros(1, *asked))
    except Exception:  # any failure means: not at this size
        return own  # type: ignore[return-value]
    return asked
