"""Config loading: YAML + dotted --set overrides, typed coercion, ConfigError with allowed values."""

from __future__ import annotations

from pathlib import Path

import pytest

from deciplane.errors import ConfigError
from deciplane.methods import get, load_config_class, names
from deciplane.methods.math_grpo import MathGRPOConfig
from deciplane.methods.rlid_ppo import RLiDPPOConfig
from deciplane.methods.text_ppo import TextPPOConfig
from deciplane.trainers.config import (describe_config, dump_yaml, field_docs, load_config,
                                       parse_override)

REPO = Path(__file__).resolve().parents[2]


def test_overrides_are_typed_and_dotted(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("algorithm: rlid_ppo\noptim: {lr: 0.1}\n")
    cfg = load_config(p, ["optim.lr=1e-4", "env.group_size=8", "distill.enabled=true",
                          "eval.final_splits=[test]", "env.kwargs={games: tw-simple}",
                          "max_wall_time_s=null", "iterations=3.0"])
    assert isinstance(cfg, RLiDPPOConfig)
    assert cfg.optim.lr == pytest.approx(1e-4) and isinstance(cfg.optim.lr, float)
    assert cfg.env.group_size == 8 and cfg.distill.enabled is True
    assert cfg.eval.final_splits == ["test"] and cfg.env.kwargs == {"games": "tw-simple"}
    assert cfg.max_wall_time_s is None and cfg.iterations == 3


def test_literal_error_lists_allowed_values():
    with pytest.raises(ConfigError, match="'conflict', 'always', 'sum'"):
        load_config(data={"algorithm": "rlid_ppo"}, overrides=["distill.combine=project"])
    with pytest.raises(ConfigError, match="choose one of rlid_ppo, text_ppo, math_grpo"):
        load_config(data={"algorithm": "ppo"})


@pytest.mark.parametrize("override, match", [
    ("optim.lrr=1", "unknown option.*optim.lrr.*allowed.*lr"),
    ("iterations=2.5", "must be an integer"),
    ("optim.lr=-1", "optim.lr = -1.0 must be > 0"),
    ("env.group_size=0", "must be > 0"),
    ("distill.enabled=maybe", "true or false"),
    ("lr", "key=value"),
])
def test_bad_values_raise_config_error(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(data={"algorithm": "rlid_ppo"}, overrides=[override])


def test_cross_field_validation():
    with pytest.raises(ConfigError, match="rloo needs env.group_size >= 2"):
        load_config(data={"algorithm": "rlid_ppo", "advantage": "rloo", "env": {"group_size": 1}})
    with pytest.raises(ConfigError, match="teacher_model"):
        load_config(data={"algorithm": "rlid_ppo",
                          "distill": {"enabled": True, "teacher": "policy"}})
    with pytest.raises(ConfigError, match="s_min"):
        load_config(data={"algorithm": "text_ppo", "tlm_dre": {"s_min": 3.0, "s_max": 2.0}})


def test_parse_override_yaml_values():
    assert parse_override("a.b=1e-3") == ("a.b", 1e-3)
    assert parse_override("x=hello world") == ("x", "hello world")
    assert parse_override("x=[1, 2]") == ("x", [1, 2])


def test_every_field_is_documented_and_round_trips():
    for cls in [load_config_class(get(name)) for name in names("train")]:
        rows = describe_config(cls)
        undocumented = [r[0] for r in rows if not r[3]]
        assert not undocumented, f"{cls.__name__}: no docstring for {undocumented}"
        cfg = cls()
        import yaml

        again = load_config(data=yaml.safe_load(dump_yaml(cfg)))
        assert again == cfg
    assert "Master seed" in field_docs(TextPPOConfig)["seed"]


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_load(path):
    cfg = load_config(path)
    assert cfg.algorithm in names("train")
    if isinstance(cfg, MathGRPOConfig):
        assert cfg.benchmark


def test_missing_file_says_what_to_pass(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


# ---------------------------------------------------------------------------------------
# 0.2 renames: old keys/values/names keep working for one release, with a warning
# ---------------------------------------------------------------------------------------


def test_math_grpo_old_keys_and_values_load_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="beta is now loss.kl_beta"):
        with pytest.warns(DeprecationWarning, match="aggregation=sequence is now aggregation=seq_mean"):
            cfg = load_config(data={"algorithm": "math_grpo", "beta": 0.05,
                                    "aggregation": "sequence"})
    assert cfg.loss.kl_beta == 0.05 and cfg.loss.aggregation == "seq_mean"
    with pytest.raises(ConfigError, match="beta is the old name of loss.kl_beta"):
        load_config(data={"algorithm": "math_grpo", "beta": 0.1, "loss": {"kl_beta": 0.1}})
    with pytest.warns(DeprecationWarning, match="kl_coef is now loss.kl_beta"):
        assert load_config(data={"algorithm": "math_grpo", "kl_coef": 0.2}).loss.kl_beta == 0.2


@pytest.mark.parametrize("clip, high, eps_high, ratio", [
    ("symmetric", 0.3, None, "token"), ("clip_higher", None, 0.28, "token"),
    ("clip_higher", 0.3, 0.3, "token"), ("gspo", 0.3, None, "sequence")])
def test_math_grpo_clip_choice_of_0_2_maps_onto_the_loss(clip, high, eps_high, ratio):
    data = {"algorithm": "math_grpo", "clip": clip, "clip_eps": 0.1}
    if high is not None:
        data["clip_eps_high"] = high
    with pytest.warns(DeprecationWarning, match="clip_eps_high are now loss.eps_high"):
        cfg = load_config(data=data)
    assert (cfg.loss.eps_low, cfg.loss.eps_high, cfg.loss.ratio) == (0.1, eps_high, ratio)
    with pytest.raises(ConfigError, match="'symmetric', 'clip_higher', 'gspo'"):
        load_config(data={"algorithm": "math_grpo", "clip": "dapo"})
    with pytest.raises(ConfigError, match="clip=gspo is the old form of loss.ratio"):
        load_config(data={"algorithm": "math_grpo", "clip": "gspo", "loss": {"ratio": "token"}})


def test_math_grpo_loss_as_the_update_uses_it():
    """The embedded loss goes to the update as it is, except the two rules of the
    trainer: max_len defaults to the generation limit, dr_grpo sums over it."""
    cfg = load_config(data={"algorithm": "math_grpo", "max_new_tokens": 20,
                            "loss": {"eps_high": 0.28, "kl_beta": 0.01}})
    loss = cfg.policy_loss()
    assert (loss.eps_low, loss.eps_high, loss.kl_beta, loss.aggregation, loss.max_len) == (
        0.2, 0.28, 0.01, "token_mean", 20)
    dr = load_config(data={"algorithm": "math_grpo", "advantage": "dr_grpo"}).policy_loss()
    assert (dr.aggregation, dr.max_len) == ("seq_sum_const", 24)


def test_text_ppo_loss_section_and_its_old_keys():
    cfg = load_config("configs/text_ppo.yaml")
    assert (cfg.loss.eps_low, cfg.loss.eps_high, cfg.loss.aggregation) == (0.2, None, "token_mean")
    with pytest.warns(DeprecationWarning, match="clip_eps_high is now loss.eps_high"):
        old = load_config(data={"algorithm": "text_ppo", "clip_eps": 0.1, "clip_eps_high": 0.3})
    assert (old.loss.eps_low, old.loss.eps_high) == (0.1, 0.3)
    with pytest.raises(ConfigError, match="no reference model"):
        load_config(data={"algorithm": "text_ppo", "loss": {"kl_beta": 0.1}})
    with pytest.raises(ConfigError, match="loss.aggregation: token_mean"):
        load_config(data={"algorithm": "text_ppo", "loss": {"aggregation": "seq_mean"}})


def test_no_shipped_config_uses_an_old_key(recwarn):
    import warnings

    for path in sorted(Path("configs").glob("*.yaml")):
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            load_config(path)


def test_tlm_dre_section_is_the_loss_config_and_alpha_neg_default_is_the_shipped_one():
    from deciplane.objectives.tlm_dre import TLMDRELossConfig

    cfg = load_config("configs/text_ppo_tlm_dre.yaml")
    assert isinstance(cfg.tlm_dre, TLMDRELossConfig) and cfg.tlm_dre.enabled
    assert cfg.tlm_dre.alpha_neg == 0.5 == TLMDRELossConfig().alpha_neg


def test_old_loss_config_names_import_with_a_deprecation_warning():
    import deciplane.objectives as objectives

    for old, new in [("RLiDConfig", "RLiDLossConfig"), ("TLMDREConfig", "TLMDRELossConfig"),
                     ("TTPOConfig", "TTPOLossConfig"), ("CORDConfig", "CORDLossConfig"),
                     ("TASCOConfig", "TASCOLossConfig"), ("ERPOConfig", "ERPOLossConfig")]:
        with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: moved to deciplane.objectives.{new}"):
            assert getattr(objectives, old) is getattr(objectives, new)


def test_rlid_section_is_the_loss_config_and_old_top_level_keys_still_load():
    from deciplane.objectives.rlid import RLiDLossConfig

    cfg = load_config("configs/quickstart.yaml")
    assert isinstance(cfg.rlid, RLiDLossConfig)
    assert (cfg.rlid.eps_low, cfg.rlid.bias_control, cfg.rlid.beta_menu) == (0.2, "menu_kl", 0.01)
    with pytest.warns(DeprecationWarning, match="clip_eps is now rlid.eps_low"):
        old = load_config(data={"algorithm": "rlid_ppo", "clip_eps": 0.3, "bias_control": "entropy",
                                "rlid": {"entropy_coef": 0.05}},
                          overrides=["beta_menu=0.02"])
    assert (old.rlid.eps_low, old.rlid.bias_control, old.rlid.entropy_coef,
            old.rlid.beta_menu) == (0.3, "entropy", 0.05, 0.02)
    with pytest.raises(ConfigError, match="clip_eps is the old name of rlid.eps_low"):
        load_config(data={"algorithm": "rlid_ppo", "clip_eps": 0.3, "rlid": {"eps_low": 0.2}})
    with pytest.raises(ConfigError, match="bias_control"):
        load_config(data={"algorithm": "rlid_ppo"}, overrides=["rlid.bias_control=calibration"])


@pytest.mark.parametrize("name", ["v0_1_rlid_ppo_config.yaml", "v0_1_math_grpo_config.yaml"])
def test_a_config_yaml_written_by_0_1_loads_to_the_same_options(name, tmp_path):
    """Run directories of 0.1 hold config.yaml with the old keys (written by deciplane
    0.1.0 at commit acd8d88); loaded now, they give the options a 0.2 config.yaml of the
    same run gives, so `--resume` and `evaluate RUN_DIR` accept the old run (a 0.1 run
    resumed by 0.2 was checked bit-identical to the uninterrupted 0.1 run)."""
    from deciplane.config import dump_yaml, to_dict
    from deciplane.utils import flatten_dict

    old_file = Path(__file__).parent / "data" / name
    with pytest.warns(DeprecationWarning):
        old = load_config(old_file)
    (tmp_path / "config.yaml").write_text(dump_yaml(old))
    new = load_config(tmp_path / "config.yaml")          # the 0.2 spelling, no aliases
    assert flatten_dict(to_dict(old)) == flatten_dict(to_dict(new))
    raw = old_file.read_text()
    if "clip_eps: 0.2\nclip_eps_high: null" in raw:
        assert (new.rlid.eps_low, new.rlid.eps_high, new.rlid.bias_control) == (0.2, None, "menu_kl")
    else:
        assert (new.loss.kl_beta, new.loss.aggregation, new.loss.eps_high) == (0.0, "token_mean",
                                                                                None)
