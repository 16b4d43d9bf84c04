"""One config mechanism: ranges declared on the fields (``deciplane.options.option``),
choices in ``Literal`` types, one check (``check_options``) for every trainer, adapter and
loss config."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Literal

import pytest

from deciplane.engine.grpo import GRPOConfig
from deciplane.errors import ConfigError
from deciplane.objectives import (AdvantageConfig, CORDLossConfig, ERPOLossConfig,
                                  PolicyLossConfig, RLiDLossConfig, TASCOLossConfig,
                                  TLMDRELossConfig, TTPOLossConfig)
from deciplane.methods import load_config_class, names
from deciplane.methods import get as get_method
from deciplane.options import Range, check_options, option
from deciplane.trainers.config import load_config

LOSS_CONFIGS = [AdvantageConfig, CORDLossConfig, ERPOLossConfig, PolicyLossConfig,
                RLiDLossConfig, TASCOLossConfig, TLMDRELossConfig, TTPOLossConfig]
ADAPTER_CONFIGS = [load_config_class(get_method(n)) for n in names("adapt")] + [GRPOConfig]


@dataclass
class Demo:
    lr: float = option(1e-4, gt=0)
    top_p: float = option(1.0, gt=0, le=1)
    steps: int | None = option(None, ge=1)
    mode: Literal["a", "b"] = "a"


@pytest.mark.parametrize("rng,text", [(Range(ge=1), ">= 1"), (Range(gt=0), "> 0"),
                                      (Range(gt=0, le=1), "in (0, 1]"),
                                      (Range(ge=0, lt=1), "in [0, 1)"),
                                      (Range(ge=0.5, le=2.5), "in [0.5, 2.5]")])
def test_range_text_by_hand(rng, text):
    assert rng.text() == text


def test_check_options_messages_by_hand():
    check_options(Demo(), "Demo.")
    with pytest.raises(ConfigError, match=r"^Demo.lr = 0 must be > 0$"):
        check_options(Demo(lr=0), "Demo.")
    with pytest.raises(ConfigError, match=r"^Demo.top_p = 1.5 must be in \(0, 1\]$"):
        check_options(Demo(top_p=1.5), "Demo.")
    with pytest.raises(ConfigError, match=r"^Demo.steps = 0 must be >= 1 or null$"):
        check_options(Demo(steps=0), "Demo.")
    with pytest.raises(ConfigError, match=r"^Demo.mode = 'c' is not allowed; choose one of 'a', 'b'$"):
        check_options(Demo(mode="c"), "Demo.")
    with pytest.raises(ConfigError, match="lr = nan"):
        check_options(Demo(lr=float("nan")), "Demo.")


def _ranged_fields(cls):
    return [(f.name, f.metadata["range"]) for f in dataclasses.fields(cls) if "range" in f.metadata]


def _outside(rng: Range) -> float:
    if rng.ge is not None:
        return rng.ge - 1
    if rng.gt is not None:
        return rng.gt
    return (rng.le if rng.le is not None else rng.lt) + 1


@pytest.mark.parametrize("cls", LOSS_CONFIGS + ADAPTER_CONFIGS, ids=lambda c: c.__name__)
def test_every_declared_range_is_checked_on_construction(cls):
    ranged = _ranged_fields(cls)
    assert ranged, f"{cls.__name__} declares no range"
    for name, rng in ranged:
        with pytest.raises(ConfigError, match=rf"{cls.__name__}.{name} = "):
            cls(**{name: _outside(rng)})


@pytest.mark.parametrize("cls", LOSS_CONFIGS + ADAPTER_CONFIGS, ids=lambda c: c.__name__)
def test_every_literal_field_is_checked_on_construction(cls):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if typing.get_origin(hints[f.name]) is Literal:
            with pytest.raises(ConfigError, match=rf"{f.name} = 'no-such-value' is not allowed"):
                cls(**{f.name: "no-such-value"})


@pytest.mark.parametrize("key,value,message", [
    ("optim.lr", 0, "optim.lr = 0.0 must be > 0"),
    ("env.group_size", 0, "env.group_size = 0 must be > 0"),
    ("rlid.beta_menu", -1, "beta_menu = -1.0 must be >= 0"),
    ("tlm_dre.tau", 0, "tau = 0.0 must be > 0"),
])
def test_trainer_yaml_sections_go_through_the_same_check(key, value, message):
    algo = "text_ppo" if key.startswith("tlm_dre") else "rlid_ppo"
    section, _, leaf = key.partition(".")
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(data={"algorithm": algo, section: {leaf: value}})
