"""MEMO, SFT and TTAug in the SDK, each against its authors' procedure written out here.

The references follow MEMO's ``test_adapt.py`` (zhangmarvin/memo): load the source, draw the
views, SGD on the marginal entropy written as their code writes it, predict the clean image.
The views are drawn here from torchvision directly, under the seed the SDK promises.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn
from torchvision import transforms
from torchvision.transforms import InterpolationMode

from realm_runtime import RealmConfig
from realm_runtime.methods import MEMO, SFT, TTAUG
from realm_sdk import RealmAdapter

MEAN, STD = 0.25, 0.35  # the inputs' normalisation, as a user's data would have one
VIEWS = 8  # fewer than the paper's 64: the procedure is the same, the test quicker


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.GroupNorm(4, 8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1),
        nn.GroupNorm(4, 8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 10),
    ).double()


def _images(n: int, seed: int = 0) -> torch.Tensor:
    """8-bit images of 16×16, normalised as a dataset's loader would."""
    pixels = np.random.default_rng(seed).integers(0, 256, size=(n, 1, 16, 16))
    return (torch.from_numpy(pixels).double() / 255 - MEAN) / STD


def _config(method: str, preset: str = "cifar", **more) -> RealmConfig:
    return RealmConfig.preset(
        preset,
        num_classes=10,
        method=method,
        **{method: {"augmentations": VIEWS, "pixel_mean": [MEAN], "pixel_std": [STD], **more}},
    )


def _views(x: torch.Tensor, index: int, seed: int = 0) -> torch.Tensor:
    """The views of one sample ``(1, H, W)``: MEMO's crop and flip, then torchvision's AugMix."""
    pixels = ((x * STD + MEAN) * 255).round().clamp(0, 255).to(torch.uint8)
    draw = transforms.Compose(
        [
            transforms.RandomCrop(16, padding=2),
            transforms.RandomHorizontalFlip(),
            transforms.AugMix(
                severity=2,
                all_ops=False,
                interpolation=InterpolationMode.BILINEAR,
                fill=[128.0],
            ),
        ]
    )
    state = torch.get_rng_state()
    torch.manual_seed((index + seed * 0x9E3779B1) % 2**32)  # the SDK's promise (SPEC §4)
    views = torch.stack([draw(pixels) for _ in range(VIEWS)])
    torch.set_rng_state(state)
    return (views.double() / 255 - MEAN) / STD


def _memo_loss(outputs: torch.Tensor) -> torch.Tensor:
    """MEMO's ``marginal_entropy``, as their code has it."""
    logits = outputs - outputs.logsumexp(dim=-1, keepdim=True)
    avg_logits = logits.logsumexp(dim=0) - np.log(logits.shape[0])
    avg_logits = torch.clamp(avg_logits, min=torch.finfo(avg_logits.dtype).min)
    return -(avg_logits * torch.exp(avg_logits)).sum(dim=-1)


def _reference(model: nn.Module, xs: torch.Tensor, params, lr: float, episodic: bool):
    """MEMO's loop: (reload,) step on the views, predict the clean sample."""
    source = copy.deepcopy(model.state_dict())
    optimizer = torch.optim.SGD(params, lr=lr)
    predictions = []
    for i, x in enumerate(xs):
        if episodic:
            model.load_state_dict(source)
        model.eval()
        optimizer.zero_grad()
        _memo_loss(model(_views(x, i))).backward()
        optimizer.step()
        with torch.no_grad():
            predictions.append(model(x[None]))
    return torch.cat(predictions)


def test_memo_steps_every_parameter_on_its_views_and_predicts_after_as_its_authors_do():
    xs = _images(5)
    adapter = RealmAdapter(_model(), _config("memo"))
    assert adapter.trainable_names == [n for n, _ in _model().named_parameters()]
    results = [adapter.adapt(x[None]) for x in xs]
    reference = _model()
    want = _reference(reference, xs, reference.parameters(), 0.005, episodic=True)
    got = torch.cat([r.logits for r in results])
    assert float((got - want).abs().max()) < 1e-12
    assert all(r.updated and r.reason == "updated" for r in results)
    assert torch.allclose(results[0].probs, got[:1].softmax(-1), atol=0, rtol=0)
    # Episodic: the model is the source again after every sample.
    for name, value in adapter.trainable_parameters().items():
        assert torch.equal(value, dict(_model().named_parameters())[name].detach())
    # The step moved the prediction: it is not the source's.
    with torch.no_grad():
        assert float((got - _model()(xs)).abs().max()) > 1e-6


def test_sft_adapts_only_the_first_convolution_online():
    xs = _images(6, seed=1)
    adapter = RealmAdapter(_model(), _config("sft"))
    assert adapter.trainable_names == ["0.weight", "0.bias"]
    got = torch.cat([adapter.adapt(x[None]).logits for x in xs])
    reference = _model()
    first = list(reference[0].parameters())
    want = _reference(reference, xs, first, 0.005, episodic=False)
    assert float((got - want).abs().max()) < 1e-12
    after = adapter.trainable_parameters()
    assert float((after["0.weight"] - reference[0].weight.detach()).abs().max()) < 1e-14
    assert adapter.state.updates == 6 and adapter.state.drift > 0
    moved = {n for n, p in adapter.model.named_parameters() if not torch.equal(p, _param(n))}
    assert moved == {"0.weight", "0.bias"}


def _param(name: str) -> torch.Tensor:
    return dict(_model().named_parameters())[name].detach()


def test_ttaug_predicts_the_mean_softmax_of_the_views_and_never_steps():
    xs = _images(4, seed=2)
    adapter = RealmAdapter(_model(), _config("ttaug"))
    model = _model().eval()
    for i, x in enumerate(xs):
        result = adapter.adapt(x[None])
        with torch.no_grad():
            mean = model(_views(x, i)).softmax(-1).mean(0)
        assert float((result.probs[0] - mean).abs().max()) < 1e-13
        assert (result.updated, result.reason, bool(result.selected.any())) == (
            False,
            "fixed",
            False,
        )
    state = adapter.state
    assert (state.samples, state.updates, state.drift) == (4, 0, 0.0)


def test_the_views_depend_on_the_seed_and_the_place_and_leave_torch_s_rng_alone():
    xs = _images(2, seed=3)
    adapters = [RealmAdapter(_model(), _config("ttaug", seed=s)) for s in (0, 0, 1)]
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first, again, other = (torch.cat([a.adapt(x[None]).logits for x in xs]) for a in adapters)
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    # A batch of two draws as two calls do: sample b draws at its own index.
    adapter = RealmAdapter(_model(), _config("ttaug"))
    assert float((adapter.adapt(xs).logits - first).abs().max()) < 1e-13


def test_inputs_that_are_not_the_stated_normalisation_are_refused_in_a_sentence():
    adapter = RealmAdapter(_model(), _config("memo", pixel_mean=[0.0], pixel_std=[1.0]))
    with pytest.raises(ValueError, match=r"set memo's pixel_mean and pixel_std") as caught:
        adapter.adapt(_images(1))
    assert "gray levels" in str(caught.value)
    assert adapter.state.samples == 0  # nothing happened
    two = nn.Sequential(nn.Conv2d(2, 4, 3), nn.GroupNorm(2, 4), nn.Flatten(), nn.LazyLinear(10))
    two(torch.zeros(1, 2, 16, 16))
    adapter = RealmAdapter(two.double(), _config("ttaug"))
    with pytest.raises(ValueError, match=r"inputs must be \(B, 1 or 3, H, W\)"):
        adapter.adapt(torch.zeros(1, 2, 16, 16, dtype=torch.float64))


def test_the_presets_run_them_as_the_paper_s_appendix_b_says():
    for rules in (MEMO, SFT, TTAUG):
        cifar = RealmConfig.preset("cifar", num_classes=10, method=rules.name)
        imagenet = RealmConfig.preset("imagenet", num_classes=1000, method=rules.name)
        assert cifar.lr == 0.005 and cifar.momentum == 0.0
        assert imagenet.lr == 0.00025 and imagenet.momentum == 0.9  # unscaled
        assert imagenet.freeze_last_block == (rules is TTAUG)  # SAR's rule is about norms
        assert cifar.episodic == (rules is MEMO)
        assert cifar.settings.augmentations == 64
    tent = RealmConfig.preset("imagenet", num_classes=1000, method="tent")
    assert math.isclose(tent.lr, 0.00025 / 16) and not tent.episodic


def test_bad_view_settings_are_named():
    with pytest.raises(ValueError, match="pixel_std must be > 0"):
        _config("memo", pixel_std=[0.0])
    with pytest.raises(ValueError, match="severity must be an integer in"):
        _config("sft", severity=11)
    with pytest.raises(ValueError, match="augmentations must be an integer"):
        _config("ttaug", augmentations=0)
    with pytest.raises(ValueError, match="no convolution"):
        RealmAdapter(nn.Sequential(nn.Flatten(), nn.Linear(4, 10)), _config("sft"))
