"""The exported backward's own forms: piecewise activations' masks, strided grouped
convolutions' input gradients, and the provenance each node carries for a profile.

Whole steps against the SDK, on several architectures, are in test_parity.py and
test_portable.py; here each form is checked against torch's own backward op alone,
at the kinks too, where a mask decides which side a value is on.
"""

from __future__ import annotations

import onnx
import pytest
import torch
from torch import nn

from realm_export.portable import ACTIVATION_FORMS, trace
from realm_runtime.contract import (
    NODE_PART_KEY,
    NODE_SOURCE_KEY,
    PART_BACKWARD,
    PART_FORWARD,
    STEP_MODEL,
    STEP_PARTS,
)

aten = torch.ops.aten

# Values on every kink of the activations below, beside them, and away from them.
KINKS = torch.tensor(
    [-7.0, -6.0, -3.0001, -3.0, -2.9999, -1.5, -1e-7, 0.0, 1e-7, 1.5, 2.9999, 3.0, 3.0001,
     5.9999, 6.0, 6.0001, 9.0]
)  # fmt: skip


def _values() -> torch.Tensor:
    spread = torch.randn(4000, generator=torch.Generator().manual_seed(0)) * 4
    return torch.cat([KINKS, spread])


@pytest.mark.parametrize(
    ("op", "extra"),
    [
        (aten.hardswish_backward.default, ()),
        (aten.hardsigmoid_backward.default, ()),
        (aten.hardtanh_backward.default, (0.0, 6.0)),
        (aten.threshold_backward.default, (0.0,)),
        (aten.silu_backward.default, ()),
    ],
    ids=["hardswish", "hardsigmoid", "relu6", "relu", "silu"],
)
def test_an_activation_mask_takes_torchs_slope_on_each_side_of_every_kink(op, extra):
    x = _values()
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    if op is aten.threshold_backward.default:
        x = torch.relu(x)  # ReLU's backward reads its output
    ours = ACTIVATION_FORMS[op](grad, x, *extra)
    theirs = op(grad, x, *extra)
    # The slopes on the two sides of a kink differ by 1/6 or more (hard-swish at 3: 1.5
    # against 1); float32 rounding (x/3 + 1/2 against hardsigmoid(x) + x/6) is far below.
    torch.testing.assert_close(ours, theirs, rtol=2e-6, atol=1e-6)
    kinks = ours[: len(KINKS)] / grad[: len(KINKS)]
    assert torch.allclose(kinks, op(torch.ones_like(x), x, *extra)[: len(KINKS)], atol=1e-6)


CONVS = [  # (spatial, kernel, stride, padding, dilation, channels, groups, size)
    (2, 3, 2, 1, 1, 8, 8, 16),
    (2, 3, 2, 1, 1, 8, 8, 15),
    (2, 5, 2, 2, 1, 6, 6, 17),
    (2, 3, 3, 1, 1, 4, 4, 20),
    (2, 3, 2, 0, 1, 4, 4, 15),
    (2, 3, 2, 2, 2, 4, 4, 15),
    (2, 3, 2, 1, 1, 8, 2, 16),  # grouped, not depthwise
    (1, 5, 2, 2, 1, 6, 6, 31),
]


@pytest.mark.parametrize("case", CONVS, ids=[str(c) for c in CONVS])
def test_a_strided_grouped_convolutions_input_gradient_runs_at_stride_one(case):
    spatial, k, s, p, d, c, g, size = case
    conv_type = nn.Conv2d if spatial == 2 else nn.Conv1d
    torch.manual_seed(0)
    conv = conv_type(c, c, k, stride=s, padding=p, dilation=d, groups=g).requires_grad_(False)

    def grad_of_scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        shaped = w.view(1, -1, *([1] * spatial))
        return torch.autograd.grad((conv(x * shaped) ** 2).sum(), [w])[0]

    x = torch.randn(1, c, *([size] * spatial))
    w = torch.ones(c, requires_grad=True)
    gm = trace(grad_of_scale, [x, w])
    convs = [n for n in gm.graph.nodes if n.target == aten.convolution.default]
    assert len(convs) == 2 and not any(n.args[6] for n in convs), "no transposed convolution"
    assert all(list(n.args[3]) == [1] * spatial for n in convs[1:]), "the gradient at stride 1"
    expected = grad_of_scale(x, w)
    torch.testing.assert_close(gm(x, w).detach(), expected, rtol=1e-5, atol=1e-5)


def test_every_part_of_the_step_is_stamped_on_the_exported_nodes(tmp_path):
    timm = pytest.importorskip("timm")
    from realm_export import ExportOptions, export_realm_artifacts
    from realm_sdk import RealmConfig

    torch.manual_seed(0)
    model = timm.create_model("mobilenetv3_small_050", pretrained=False, num_classes=10).eval()
    config = RealmConfig.preset("imagenet", num_classes=10)
    export_realm_artifacts(
        model, tmp_path, ExportOptions(config=config, input_shape=(1, 3, 32, 32), training=False)
    )
    step = onnx.load(str(tmp_path / STEP_MODEL), load_external_data=False)
    stamps = [{p.key: p.value for p in n.metadata_props} for n in step.graph.node]
    parts = [s.get(NODE_PART_KEY) for s in stamps]
    assert set(STEP_PARTS) <= set(parts)
    assert sum(p is not None for p in parts) / len(parts) > 0.9
    by_source = {}
    for s in stamps:
        by_source.setdefault(s.get(NODE_SOURCE_KEY), set()).add(s.get(NODE_PART_KEY))
    assert by_source["aten.hardswish_backward.default"] == {PART_BACKWARD}
    assert by_source["aten.convolution_backward.default"] == {PART_BACKWARD}
    assert by_source["aten.convolution.default"] == {PART_FORWARD}
    assert by_source["realm.batch_norm"] == {PART_FORWARD, PART_BACKWARD}
