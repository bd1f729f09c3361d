"""Each method is described once (realm_runtime.methods) and every layer finds its forms."""

from __future__ import annotations

import typing

import pytest
import torch

from realm_export.methods import ONNX_LOSSES
from realm_runtime import METHODS, Guardrails, RealmConfig
from realm_runtime.methods import BY_NAME, method_named
from realm_sdk import entropy
from realm_sdk.methods import StepInputs, TorchForm, torch_form


def test_the_registry_is_the_one_list_of_methods():
    # The configuration names no method list of its own: it checks a name against the registry.
    assert typing.get_type_hints(RealmConfig)["method"] is str
    assert set(METHODS) == set(BY_NAME)
    with pytest.raises(ValueError, match=r"method must be one of \("):
        RealmConfig(num_classes=10, method="rotta")


def test_every_method_has_a_torch_form_and_onnx_forms_name_real_methods():
    for name in BY_NAME:
        assert isinstance(torch_form(RealmConfig(num_classes=10, method=name)), TorchForm), name  # type: ignore[arg-type]
    assert set(ONNX_LOSSES) <= set(BY_NAME)
    # A method with learned loss parameters needs ONNX nodes for them in the training graph.
    for name, method in BY_NAME.items():
        if method.learns_alpha_lambda and method.legacy_training is None:
            assert name in ONNX_LOSSES, name


def test_unknown_method_is_one_sentence_listing_the_known():
    with pytest.raises(ValueError, match=r"method must be one of .*'realm'.*got 'deyo2'"):
        method_named("deyo2")
    with pytest.raises(ValueError, match="method must be one of") as info:
        RealmConfig(num_classes=10, method="nope")  # type: ignore[arg-type]
    assert "guardrails" not in str(info.value)  # the one problem, not its echoes


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_guardrail_default_is_the_methods(name):
    cfg = RealmConfig(num_classes=10, method=name)  # type: ignore[arg-type]
    assert cfg.guard == method_named(name).guardrails
    explicit = RealmConfig(num_classes=10, method=name, guardrails=Guardrails.off())  # type: ignore[arg-type]
    assert explicit.guard == Guardrails.off()


def _weighted_loss(
    cfg: RealmConfig, h: torch.Tensor, learned: tuple[torch.Tensor, ...], e0: float
) -> torch.Tensor:
    """The method's step loss with every sample at weight 1 and no second forward."""

    def no_second_forward(*_: object) -> torch.Tensor:
        raise AssertionError("a weighted method's step needs no second forward")

    inputs = StepInputs(no_second_forward, h, [], h, h, torch.ones_like(h), learned, e0, 0.0, cfg)
    return torch_form(cfg).step_loss(inputs).loss


def test_unknown_form_names_the_file_to_add(monkeypatch):
    from realm_runtime import methods as described

    extra = described.Method(
        name="rotta",
        label="RoTTA",
        paper="",
        diversity=False,
        entropy_cut=False,
        entropy_weight=False,
        learns_alpha_lambda=False,
        recovery=False,
        guardrails=Guardrails.off(),
    )
    monkeypatch.setitem(described.BY_NAME, "rotta", extra)
    cfg = RealmConfig(num_classes=10)
    object.__setattr__(cfg, "method", "rotta")
    with pytest.raises(NotImplementedError, match=r"add realm_sdk/methods/rotta\.py defining FORM"):
        torch_form(cfg)


def test_losses_follow_their_papers_at_one_point():
    # H = 0.5 nats; REALM's ρ with α = 1, λ = 1, C = 1: ε = 1, ρ = (0.5 + 1)^(1/2) − 1.
    h = torch.tensor([0.5])
    e0 = 0.9
    learned = (torch.tensor(1.0), torch.tensor(1.0))
    weighted = ("tent", "eta", "realm")  # SAR's and DeYO's steps have their own tests
    configs = {m: RealmConfig(num_classes=10, method=m) for m in weighted}  # type: ignore[arg-type]
    values = {m: float(_weighted_loss(c, h, learned, e0)) for m, c in configs.items()}
    assert values["tent"] == pytest.approx(0.5)
    assert values["eta"] == pytest.approx(0.5 * torch.exp(torch.tensor(0.4)).item())
    assert values["realm"] == pytest.approx(1.5**0.5 - 1, rel=1e-6)


def test_entropy_weight_is_a_constant_of_the_step():
    logits = torch.tensor([[2.0, 0.0, -1.0]], requires_grad=True)
    cfg = RealmConfig(num_classes=3, method="eta")
    h = entropy(logits)
    (g_eata,) = torch.autograd.grad(_weighted_loss(cfg, h, (), 0.9), logits)
    h = entropy(logits)
    (g_h,) = torch.autograd.grad(h.sum(), logits)
    scale = torch.exp(-(entropy(logits).detach() - 0.9))
    torch.testing.assert_close(g_eata, g_h * scale)
