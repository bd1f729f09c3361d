"""SPEC §4: presets and validation of RealmConfig."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from realm_runtime.methods import (
    BY_NAME,
    DEYO,
    REALM,
    SAR,
    RealmSettings,
    SarSettings,
    setting_owners,
)
from realm_sdk import RealmConfig


def test_cifar_preset_matches_paper_table():
    cfg = RealmConfig.preset("cifar", num_classes=10)
    assert (cfg.method, cfg.lr, cfg.momentum, cfg.settings.alpha0, cfg.settings.lambda0) == (
        "realm",
        0.005,
        0.0,
        0.15,
        0.1,
    )
    # App. D's smaller α/λ rate, chosen on the validation split (SPEC §4), not App. B's 2·lr.
    assert cfg.settings.lr_alpha_lambda == 5e-7
    assert cfg.settings.loss_scale == "one"
    assert cfg.diversity_margin == 0.4
    assert not cfg.freeze_last_block and cfg.frozen == ()
    assert cfg.ema_beta == 0.9
    assert cfg.preset_name == "cifar"
    # BatchNorm's own rate, chosen on the validation split (SPEC §4), REALM's alone.
    assert cfg.lr_batch_norm == 0.001 and cfg.batch_norm_lr == 0.001


@pytest.mark.parametrize("method", ["tent", "eta", "sar", "deyo"])
def test_the_baselines_step_batch_norm_at_their_one_rate(method):
    cfg = RealmConfig.preset("cifar", num_classes=10, method=method)
    assert cfg.lr_batch_norm is None and cfg.batch_norm_lr == cfg.lr == 0.005


def test_batch_norm_rate_follows_lr_when_unset():
    cfg = RealmConfig.preset("imagenet", num_classes=1000)
    assert cfg.lr_batch_norm is None and cfg.batch_norm_lr == cfg.lr
    custom = RealmConfig.preset("cifar", num_classes=10, lr=0.01, lr_batch_norm=None)
    assert custom.batch_norm_lr == 0.01


def test_imagenet_preset_matches_paper_table():
    cfg = RealmConfig.preset("imagenet", num_classes=1000)
    assert cfg.lr == pytest.approx(0.00025 / 16)
    assert cfg.settings.lr_alpha_lambda == pytest.approx(cfg.lr)
    assert cfg.momentum == 0.9
    assert cfg.settings.alpha0 == 0.15
    assert cfg.settings.lambda0 == pytest.approx(0.4 * math.log(1000))
    assert cfg.settings.loss_scale == "lambda"
    assert cfg.diversity_margin == 0.05
    assert cfg.freeze_last_block


def test_eata_threshold_defaults_to_0_4_ln_c():
    assert RealmConfig.preset("cifar", num_classes=10, method="eta").e0 == pytest.approx(
        0.4 * math.log(10)
    )
    assert RealmConfig(num_classes=10, method="eta", entropy_margin=0.7).e0 == 0.7


def test_methods_share_the_preset():
    tent = RealmConfig.preset("imagenet", num_classes=100, method="tent")
    assert tent.method == "tent" and not tent.rules.diversity and not tent.rules.learns_alpha_lambda
    assert tent.lr == RealmConfig.preset("imagenet", num_classes=100).lr


def test_overrides_apply_after_the_preset():
    cfg = RealmConfig.preset("cifar", num_classes=10, lr=0.01, episodic=True)
    assert cfg.lr == 0.01 and cfg.episodic


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("alpha0", 0.0, "alpha0"),
        ("alpha0", 2.0, "alpha0"),
        ("alpha0", float("nan"), "alpha0"),
        ("lambda0", 0.0, "lambda0"),
        ("lr", -1e-3, "lr"),
        ("lr_alpha_lambda", float("inf"), "lr_alpha_lambda"),
        ("momentum", 1.0, "momentum"),
        ("diversity_margin", 0.0, "diversity_margin"),
        ("diversity_margin", 1.5, "diversity_margin"),
        ("ema_beta", 1.0, "ema_beta"),
        ("method", "cotta", "method"),
        ("sam_rho", 0.0, "sam_rho"),
        ("recovery_loss", -0.1, "recovery_loss"),
        ("loss_scale", "two", "loss_scale"),
        ("num_classes", 1, "num_classes"),
        ("frozen", ["layer4"], "frozen"),
        ("entropy_margin", -1.0, "entropy_margin"),
        ("lr_batch_norm", 0.0, "freeze BatchNorm layers with `frozen`"),
        ("lr_batch_norm", float("nan"), "lr_batch_norm"),
    ],
)
def test_invalid_values_are_named(field, value, message):
    owners = setting_owners(field)  # a method's own setting is tried on that method
    base = RealmConfig.preset(
        "cifar", num_classes=10, method=owners[0].name if owners else REALM.name
    )
    with pytest.raises(ValueError, match=message):
        base.with_overrides(**{field: value})


def test_each_method_holds_its_own_settings_under_its_name():
    for rules in BY_NAME.values():
        cfg = RealmConfig.preset("imagenet", num_classes=100, method=rules.name)
        assert type(cfg.settings) is rules.settings
        written = cfg.to_dict()
        assert written[rules.name] == cfg.settings.to_dict()
        others = set(BY_NAME) - {rules.name}
        assert not others & set(written), "another method's settings were written"
        assert not {n for m in BY_NAME.values() for n in m.settings.names()} & set(written)
        assert RealmConfig.from_dict(json.loads(json.dumps(written))) == cfg


def test_a_setting_of_another_method_is_named_with_its_owner():
    sar = RealmConfig.preset("cifar", num_classes=10, method=SAR.name)
    with pytest.raises(ValueError, match="plpd_threshold is a setting of DeYO, not of SAR"):
        sar.with_overrides(plpd_threshold=0.3)
    with pytest.raises(ValueError, match="deyo's settings cannot change a SAR configuration"):
        sar.with_overrides(deyo={"plpd_threshold": 0.3})
    with pytest.raises(ValueError, match=r"settings of \['deyo'\]"):
        RealmConfig.from_dict({**sar.to_dict(), "deyo": {}})
    with pytest.raises(ValueError, match="SAR has no setting"):
        RealmConfig.from_dict({**sar.to_dict(), "sar": {"sam_rho": 0.1, "e_m": 0.2}})
    with pytest.raises(ValueError, match="DeyoSettings"):
        dataclasses.replace(sar, method=DEYO.name)  # a stale settings object is refused


def test_settings_change_by_name_or_under_the_method():
    sar = RealmConfig.preset("cifar", num_classes=10, method=SAR.name)
    assert sar.with_overrides(sam_rho=0.1).settings == SarSettings(sam_rho=0.1)
    assert sar.with_overrides(sar={"recovery_loss": 0.5}).settings == SarSettings(recovery_loss=0.5)
    # A new method starts from its own defaults, as the preset gives them.
    realm = sar.with_overrides(method=REALM.name)
    assert realm.settings == RealmConfig.preset("cifar", num_classes=10).settings
    imagenet = RealmConfig.preset("imagenet", num_classes=100, method=SAR.name)
    assert imagenet.with_overrides(method=REALM.name).settings == RealmSettings.for_preset(
        "imagenet", num_classes=100, lr=imagenet.lr
    )


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown preset"):
        RealmConfig.preset("svhn", num_classes=10)  # type: ignore[arg-type]


def test_frozen_and_dict_round_trip():
    cfg = RealmConfig.preset("imagenet", num_classes=1000, frozen=(r"blocks\.0\.",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0  # type: ignore[misc]
    again = RealmConfig.from_dict(cfg.to_dict())
    assert again == cfg
    with pytest.raises(ValueError, match="unknown RealmConfig fields"):
        RealmConfig.from_dict({**cfg.to_dict(), "bogus": 1})


@pytest.mark.parametrize("method", [["realm"], {"name": "realm"}, 3, None])
def test_a_method_that_is_not_a_name_is_refused_in_a_sentence(method):
    with pytest.raises(ValueError, match=r"method must be a method's name, one of \['deyo'"):
        RealmConfig.from_dict({"num_classes": 10, "method": method})


def test_an_eata_configuration_from_before_its_fisher_term_is_refused_in_a_sentence():
    """Manifests wrote EATA's step without the regulariser as ``{"method": "eata", "eata":
    {}}``: read now, that would claim a regulariser its graphs lack."""
    fresh = RealmConfig(num_classes=10, method="eata")
    assert RealmConfig.from_dict(fresh.to_dict()) == fresh
    old = {**RealmConfig(num_classes=10, method="eta").to_dict(), "method": "eata", "eata": {}}
    del old["eta"]
    with pytest.raises(ValueError, match=r"before EATA had its Fisher regulariser.*'eta'"):
        RealmConfig.from_dict(old)
